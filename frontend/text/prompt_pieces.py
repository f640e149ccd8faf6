"""Token ids of the parts of prompts that repeat (a system prompt, a tools section), kept.

A chat prompt is mostly the same text request after request: the template's framing, a long
system prompt, the tools' descriptions. `tokenizers` splits its input at added tokens before
anything else and encodes the text between them on its own, so the ids of a text cut right after
an added token are the ids of the part before the cut followed by those of the part after. Cut
points here are the ends of *anchors*: added tokens that the chat template writes and that the
tokenizer is sure to match wherever they appear (no strip or single-word rule, no normalizer in
the way, no other added token that contains one or can begin before one and run into it).

`PieceCache.encode` walks a prompt's anchors and cuts it into pieces of at least
`PIECE_MIN_CHARS`, each ending right after an anchor; a piece seen before (the second time
its text comes) is looked up instead of encoded, and the text between looked-up pieces is encoded
in one call. So ids are always exactly the tokenizer's own; the cache only decides how much of
the encoding is done again. `Tokenizer.use_prompt_anchors` sets it up and checks it against
the whole-text encoding of the template's own source before using it.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

PIECE_MIN_CHARS = 128  # shorter pieces are encoded with their neighbours
TEXT_MAX_CHARS = 64 * 1024  # longer texts (a document, not a repeated frame) are encoded whole
_CACHE_MAX_CHARS = 1024 * 1024  # the text of the pieces kept, per process
_SEEN_MAX = 8192  # pieces seen once (by hash) before the record starts again


def safe_anchors(added: Iterable[Any], candidates: Iterable[str], normalizer_is_identity: bool) -> list[str]:
    """The contents of `added` (tokenizers.AddedToken) in `candidates` at which the tokenizer
    certainly splits wherever they occur in a text."""
    tokens = list(added)
    contents = [t.content for t in tokens]
    wanted = set(candidates)
    safe = []
    for t in tokens:
        s = t.content
        if s not in wanted or not s or t.lstrip or t.rstrip or t.single_word:
            continue
        if t.normalized and not normalizer_is_identity:
            continue
        if any(_interferes(other, s) for other in contents if other != s):
            continue
        safe.append(s)
    return safe


def _interferes(other: str, anchor: str) -> bool:
    """`other` (another added token) could be matched instead of `anchor` where `anchor`
    occurs: it contains it, or one of its proper suffixes is a prefix of `anchor` (a match of
    `other` that begins first and runs into it)."""
    if anchor in other:
        return True
    return any(anchor.startswith(other[-k:]) for k in range(1, min(len(other), len(anchor))))


class PieceCache:
    __slots__ = ("_encode", "_anchors", "_ids", "_chars", "_seen")

    def __init__(self, encode: Callable[[str], list[int]], anchors: list[str]):
        self._encode = encode  # the tokenizer's own, without special tokens added
        # Longest first: at one position the regex takes the first alternative that matches.
        self._anchors = re.compile("|".join(re.escape(a) for a in sorted(anchors, key=len, reverse=True)))
        self._ids: dict[str, list[int]] = {}
        self._chars = 0
        self._seen: set[int] = set()

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        done = 0  # text[:done] is in ids
        start = 0  # where the next piece begins: 0 or right after an anchor
        for m in self._anchors.finditer(text):
            end = m.end()
            if end - start < PIECE_MIN_CHARS:
                continue
            piece = text[start:end]
            known = self._ids.get(piece)
            if known is None:
                known = self._learn(piece)
            if known is not None:
                if done < start:
                    ids += self._encode(text[done:start])
                ids += known
                done = end
            start = end
        if not done:
            return self._encode(text)
        if done < len(text):
            ids += self._encode(text[done:])
        return ids

    def _learn(self, piece: str) -> list[int] | None:
        """A piece's ids the second time it is seen (None the first time: most texts of a
        prompt after its frame are seen once)."""
        key = hash(piece)
        if key not in self._seen:
            if len(self._seen) >= _SEEN_MAX:
                self._seen.clear()
            self._seen.add(key)
            return None
        ids = self._encode(piece)
        if self._chars + len(piece) > _CACHE_MAX_CHARS:
            self._ids.clear()
            self._chars = 0
        self._ids[piece] = ids
        self._chars += len(piece)
        return ids
