"""Drive a parser over chunks and check results and the OpenAI delta contract."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from vllm_pyfrontend.chat.assistant import AssistantDelta


@dataclass
class Result:
    content: str = ""
    reasoning: str = ""
    #: (name, arguments text, id) per call, in index order
    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def key(self) -> tuple[str, str, list[tuple[str, str]]]:
        """What must not depend on chunking (ids are random)."""
        return self.content, self.reasoning, [(n, a) for n, a, _ in self.calls]

    def decoded_calls(self) -> list[tuple[str, Any]]:
        return [(n, json.loads(a)) for n, a, _ in self.calls]


def check_contract(deltas: Sequence[AssistantDelta]) -> None:
    """id, type and name first; arguments only grow; one index per call, in order."""
    seen: dict[int, bool] = {}
    next_index = 0
    for d in deltas:
        assert isinstance(d, AssistantDelta)
        assert not d.is_empty(), "empty deltas are returned as None"
        for item in d.tool_calls:
            i = item["index"]
            fn = item["function"]
            if i not in seen:
                assert i == next_index, f"index {i} out of order"
                next_index += 1
                assert item["id"].strip() and item["type"] == "function"
                assert isinstance(fn["name"], str) and fn["name"]
                assert fn["arguments"] == ""
                seen[i] = True
            else:
                assert set(item) == {"index", "function"}, item
                assert set(fn) == {"arguments"}, fn
                assert isinstance(fn["arguments"], str) and fn["arguments"]
                assert i == next_index - 1, "arguments for an earlier call after a later one"


def collect(deltas: Iterable[AssistantDelta | None]) -> tuple[Result, list[AssistantDelta]]:
    out = Result()
    kept = [d for d in deltas if d is not None]
    check_contract(kept)
    calls: dict[int, list[str]] = {}
    for d in kept:
        out.content += d.content or ""
        out.reasoning += d.reasoning or ""
        for item in d.tool_calls:
            i = item["index"]
            if i not in calls:
                calls[i] = [item["function"]["name"], "", item["id"]]
            calls[i][1] += item["function"]["arguments"]
    out.calls = [tuple(calls[i]) for i in sorted(calls)]  # type: ignore[misc]
    return out, kept


Factory = Callable[[], Any]


def run_chunks(make: Factory, chunks: Sequence[str], ids: Sequence[Sequence[int]] | None = None) -> Result:
    p = make()
    deltas: list[AssistantDelta | None] = []
    for k, c in enumerate(chunks):
        deltas.append(p.feed(c, ids[k]) if ids is not None else p.feed(c))
    deltas.append(p.finish())
    return collect(deltas)[0]


def run_whole(make: Factory, text: str) -> Result:
    return run_chunks(make, [text])


def split_at(text: str, cuts: Sequence[int]) -> list[str]:
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def random_char_splits(text: str, rng: random.Random) -> list[str]:
    n = len(text)
    if n < 2:
        return [text]
    k = rng.randint(1, max(1, min(n - 1, n // 2)))
    return split_at(text, rng.sample(range(1, n), k))


_PIECES_CACHE: dict[tuple[int, str], tuple[list[str], list[int]]] = {}


def token_pieces(tok: Any, text: str) -> tuple[list[str], list[int]]:
    """Text of each token of ``text`` as a detokenizer releases it (held
    incomplete UTF-8 goes out with the token that completes it)."""
    key = (id(tok), text)
    if key not in _PIECES_CACHE:
        _PIECES_CACHE[key] = _token_pieces(tok, text)
    return _PIECES_CACHE[key]


def _token_pieces(tok: Any, text: str) -> tuple[list[str], list[int]]:
    ids = tok.encode(text)
    det = tok.new_detokenizer(skip_special_tokens=False)
    pieces = []
    for t in ids:
        pieces.append(_detok_step(det, t))
    tail = _detok_flush(det)
    if tail:
        pieces[-1] += tail
    assert "".join(pieces) == text, "token pieces must rebuild the text"
    return pieces, ids


def _detok_step(det: Any, tid: int) -> str:
    out = det.step(tid) if hasattr(det, "step") else det.feed([tid])
    return out or ""


def _detok_flush(det: Any) -> str:
    for name in ("flush", "finish"):
        f = getattr(det, name, None)
        if f is not None:
            return f() or ""
    return ""


def random_token_groups(
    pieces: Sequence[str], ids: Sequence[int], rng: random.Random
) -> tuple[list[str], list[list[int]]]:
    """Consecutive tokens grouped at random (one engine step = 1..4 tokens)."""
    texts: list[str] = []
    groups: list[list[int]] = []
    i = 0
    while i < len(pieces):
        k = rng.randint(1, 4)
        texts.append("".join(pieces[i : i + k]))
        groups.append(list(ids[i : i + k]))
        i += k
    return texts, groups
