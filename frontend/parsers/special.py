"""Which marker occurrences are real special tokens, given text plus token ids.

A parser sees text. A model that writes ``<think>`` or ``｜DSML｜`` as
ordinary tokens (``<``, ``think``, ``>``) produces the same text as the single
added token the model emits to really open reasoning or a tool call. Only the
token ids tell them apart, so the contract with the caller is:

1. The detokenizer runs with ``skip_special_tokens=False`` for requests with a
   reasoning or tool parser, so every added token's text reaches the parser
   (some markers, e.g. Qwen's ``<tool_call>``, are added tokens flagged
   special and would otherwise vanish).
2. The caller passes each step's new token ids with its text:
   ``feed(text, token_ids=ids)``. Ids may arrive before their text (the
   detokenizer holds incomplete UTF-8 and possible stop strings), never after.

`SpecialGate` keeps, per added-token string that occurs inside a marker, a
credit: +1 for each such id seen, -1 for each occurrence of the string in
text that the parser has gone past. A marker occurrence is real when every
added-token string inside it has a credit. A caller that never passes ids
(tests, non-tokenized input) gets text-only matching: every occurrence counts.

Limitation: counts, not positions. A lookalike in the same step as, and
before, a real token of the same string can take the real one's credit.
"""

from __future__ import annotations

import weakref
from typing import Iterable, Protocol


class TokenizerLike(Protocol):
    added_token_ids: dict[int, str]

    def token_to_id(self, token: str) -> int | None: ...


# tokenizer -> markers -> {token id: added-token text inside a marker}; one
# scan of the added tokens per tokenizer and grammar, not per request.
_PIECES: "weakref.WeakKeyDictionary[object, dict[tuple[str, ...], dict[int, str]]]" = (
    weakref.WeakKeyDictionary()
)


_MIN_PIECE = 3


def _pieces_for(tokenizer: TokenizerLike, markers: tuple[str, ...]) -> dict[int, str]:
    try:
        per_tok = _PIECES.setdefault(tokenizer, {})
    except TypeError:  # not weak-referenceable: no cache
        per_tok = {}
    found = per_tok.get(markers)
    if found is None:
        added = getattr(tokenizer, "added_token_ids", {}) or {}
        # Very short added tokens ("<", "=") also occur inside ordinary
        # tokens' text, so their counts would not match: they are not gated.
        found = {
            tid: content
            for tid, content in added.items()
            if len(content) >= _MIN_PIECE and any(content in m for m in markers)
        }
        per_tok[markers] = found
    return found


class SpecialGate:
    """Credits for added-token strings inside markers (see module docstring)."""

    def __init__(self, tokenizer: TokenizerLike | None, markers: Iterable[str]) -> None:
        markers = tuple(m for m in markers if m)
        self._piece_of_id: dict[int, str] = (
            _pieces_for(tokenizer, markers) if tokenizer is not None else {}
        )
        # Longest first so that overlapping pieces count once each.
        self.pieces: tuple[str, ...] = tuple(
            sorted(set(self._piece_of_id.values()), key=len, reverse=True)
        )
        self._credit: dict[str, int] = {p: 0 for p in self.pieces}
        self.strict = False  # becomes True on the first ids received

    @property
    def token_ids(self) -> frozenset[int]:
        """Ids of the added tokens that occur inside this gate's markers."""
        return frozenset(self._piece_of_id)

    def note_ids(self, token_ids: Iterable[int]) -> None:
        self.strict = True
        for tid in token_ids:
            piece = self._piece_of_id.get(tid)
            if piece is not None:
                self._credit[piece] += 1

    def _count(self, text: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for p in self.pieces:
            c = text.count(p)
            if c:
                counts[p] = c
        return counts

    def is_real(self, marker: str) -> bool:
        """Whether an occurrence of ``marker`` at the read position is the model's token."""
        if not self.strict or not self.pieces:
            return True
        for piece, need in self._count(marker).items():
            if self._credit[piece] < need:
                return False
        return True

    def passed(self, text: str) -> None:
        """The parser moved past ``text`` (released or consumed): spend its credits."""
        if not self.strict or not self.pieces or not text:
            return
        for piece, c in self._count(text).items():
            self._credit[piece] = max(0, self._credit[piece] - c)
