"""`return_token_ids` (and `echo`) against vLLM's own server on the shared tiny pair: where the
prompt's token ids appear. Chat: the body's `prompt_token_ids`, and when streaming the first
chunk of every choice (the role chunk). Completions: each choice's `prompt_token_ids` in the
body, and when streaming in that choice's first chunk (with `echo` too, even without
`return_token_ids`); `echo` with `return_token_ids` echoes no prompt text (the ids carry it).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.e2e.vllm_pair import MODEL

pytestmark = pytest.mark.real_engine

U = {"role": "user", "content": "Write a short poem about the sea."}


def _chat(**kw) -> tuple[str, dict]:
    return "/v1/chat/completions", {"model": MODEL, "messages": [U], "temperature": 0, "max_tokens": 3, **kw}


def _comp(**kw) -> tuple[str, dict]:
    return "/v1/completions", {"model": MODEL, "prompt": "The capital of France is", "temperature": 0,
                               "max_tokens": 3, **kw}


CASES = {
    "chat": _chat(return_token_ids=True),
    "chat_n2": _chat(return_token_ids=True, n=2, temperature=1.0, seed=3),
    "chat_without": _chat(),
    "comp": _comp(return_token_ids=True),
    "comp_2prompts_n2": _comp(return_token_ids=True, prompt=["Hello", "Goodbye my friend"], n=2,
                              temperature=1.0, seed=3),
    "comp_token_prompt": _comp(return_token_ids=True, prompt=[100, 200, 300]),
    "comp_echo": _comp(echo=True),
    "comp_echo_and_ids": _comp(echo=True, return_token_ids=True),
    "comp_without": _comp(),
}


def _where(route: str, body: dict, stream: bool, base: str) -> Any:
    """Per choice: the prompt ids in the body, or for a stream the (choice's chunk number,
    prompt ids) of every chunk that carries them, and the choice's text."""
    r = httpx.post(base + route, json={**body, "stream": stream}, timeout=120)
    assert r.status_code == 200, r.text
    chat = route.endswith("chat/completions")
    if not stream:
        out = r.json()
        if chat:
            return {"top": out["prompt_token_ids"], "text": [c["message"]["content"] for c in out["choices"]]}
        return {c["index"]: (c["prompt_token_ids"], c["text"]) for c in out["choices"]}
    seen: dict[int, list] = {}
    count: dict[int, int] = {}
    text: dict[int, str] = {}
    for line in r.text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for c in ev.get("choices") or ():
            i = c["index"]
            n = count[i] = count.get(i, -1) + 1
            ids = ev.get("prompt_token_ids") if chat else c.get("prompt_token_ids")
            if ids is not None:
                seen.setdefault(i, []).append((n, ids))
            text[i] = text.get(i, "") + ((c["delta"].get("content") or "") if chat else c["text"])
    return {"ids": seen, "text": text}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("case", list(CASES))
def test_prompt_token_ids_where_vllm_puts_them(tiny_pair, case, stream):
    route, body = CASES[case]
    ours = _where(route, body, stream, tiny_pair.ours)
    theirs = _where(route, body, stream, tiny_pair.vllm)
    assert ours == theirs, f"{case}: ours={ours} vllm={theirs}"
    with_ids = body.get("return_token_ids") or (stream and body.get("echo") and route == "/v1/completions")
    if not with_ids:
        assert not (ours.get("top") if "top" in ours else ours.get("ids") if stream else
                    any(v[0] for v in ours.values()))
    elif stream:  # each choice's first chunk, and only that one
        assert ours["ids"] and all([n for n, _ in v] == [0] for v in ours["ids"].values())
