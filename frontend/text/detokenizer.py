"""Incremental detokenization: token ids in, complete new text out.

Output equals vLLM's ``FastIncrementalDetokenizer`` (a `tokenizers`
``DecodeStream`` per request). Text that ends in an incomplete UTF-8 sequence
(decoded as U+FFFD) is held until a later token completes it, exactly like
``DecodeStream.step`` returning None; an invalid byte followed by more text
is released with its replacement character, as there.

Two implementations behind one class:
* byte-level BPE tokenizers (pure ByteLevel decoder): a token -> bytes table
  built once per tokenizer and shared (see bytelevel.py). The common case, a
  token that is complete UTF-8 by itself with nothing pending, is one list
  lookup.
* anything else: `tokenizers.decoders.DecodeStream`, as vLLM does, including
  its recovery from the "Invalid prefix" error.

``spaces_between_special_tokens=False`` (only meaningful with
``skip_special_tokens=False``) follows vLLM: an added token that directly
follows another added token is emitted as its raw content.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tokenizers.decoders

_INVALID_PREFIX = "Invalid prefix encountered"
_REPLACEMENT = "\ufffd"


@dataclass(slots=True)
class DetokenizerVocab:
    """What detokenization needs of a tokenizer: built once per tokenizer (see
    `Tokenizer.detokenizer_vocab`) and shared by every request's detokenizer."""

    special_token_ids: frozenset[int]
    added_token_ids: dict[int, str]
    token_bytes: list[bytes] | None  # byte-level BPE: id -> bytes; None: use DecodeStream
    hf_tokenizer: Any  # tokenizers.Tokenizer, for DecodeStream
    _text: list[str | None] | None = field(default=None, repr=False)
    _skipping_text: list[str | None] | None = field(default=None, repr=False)

    def text_table(self) -> list[str | None]:
        """Per token id: its text when it is complete UTF-8 on its own, else None."""
        if self._text is None:
            assert self.token_bytes is not None
            table: list[str | None] = []
            for raw in self.token_bytes:
                try:
                    text: str | None = raw.decode("utf-8")
                except UnicodeDecodeError:
                    text = None
                if text is not None and (not text or text.endswith(_REPLACEMENT)):
                    text = None  # empty or ends with U+FFFD: take the slow path
                table.append(text)
            self._text = table
        return self._text

    def build_tables(self) -> None:
        """Build the per-token text tables now (byte-level tokenizers): a worker template does
        it before forking, so its workers share them instead of each building ~10 MB."""
        if self.token_bytes is not None:
            self.text_table()
            self.skipping_text_table()

    def skipping_text_table(self) -> list[str | None]:
        """`text_table` with every special token's text "" (skip_special_tokens)."""
        if self._skipping_text is None:
            table = list(self.text_table())
            for tid in self.special_token_ids:
                if 0 <= tid < len(table):
                    table[tid] = ""
            self._skipping_text = table
        return self._skipping_text


class IncrementalDetokenizer:
    """Per-request detokenizer; create with ``Tokenizer.new_detokenizer``."""

    __slots__ = ("_skip", "_skip_ids", "_raw_added", "_last_added", "_bytes", "_text", "_pending",
                 "_stream", "_hf", "_fast", "_plain")

    def __init__(
        self,
        vocab: DetokenizerVocab,
        prompt_ids: list[int] | None = None,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> None:
        self._skip = skip_special_tokens
        self._skip_ids: frozenset[int] = (
            vocab.special_token_ids if skip_special_tokens else frozenset()
        )
        # vLLM: the "no spaces" rule only applies when special tokens are kept.
        self._raw_added: dict[int, str] | None = None
        if not (skip_special_tokens or spaces_between_special_tokens):
            if vocab.added_token_ids:
                self._raw_added = vocab.added_token_ids
        self._last_added = False

        self._bytes = vocab.token_bytes
        # Byte-level and no raw added-token rule: `feed`'s one-token step is one table lookup
        # in `_fast` (per token id its text, "" for a skipped special token, None when it is
        # not complete UTF-8 on its own) whenever nothing is pending.
        self._plain = self._bytes is not None and self._raw_added is None
        if self._bytes is not None:
            self._text = vocab.text_table()
            self._fast = vocab.skipping_text_table() if self._skip_ids else self._text
            self._pending = bytearray()
            self._stream = None
            if prompt_ids:
                self._prime(prompt_ids)
        else:
            self._hf = vocab.hf_tokenizer
            self._stream = tokenizers.decoders.DecodeStream(
                ids=list(prompt_ids) if prompt_ids else None,
                skip_special_tokens=skip_special_tokens,
            )

    # ----------------------------------------------------------------- API
    def feed(self, token_ids: list[int]) -> str:
        """Consume ``token_ids``; return the complete new text they produce."""
        if len(token_ids) == 1:
            token_id = token_ids[0]
            if self._plain and not self._pending:
                # The common step, inlined: one token, skipped or complete UTF-8 on its own,
                # nothing pending (same result as _step_bytes).
                try:
                    text = self._fast[token_id]
                except (IndexError, TypeError):
                    return ""
                if text is not None:
                    return text
                return self._step_bytes(token_id)
            step = self._step_bytes if self._stream is None else self._step_stream
            return self._apply_raw_added(token_id, step(token_id))
        return "".join(self.feed_each(token_ids))

    def one_token_table(self) -> list[str | None] | None:
        """The table behind `feed`'s one-token step, for callers that inline it: per token id
        its text ("" for a skipped special token), None where the token is not complete UTF-8
        on its own. Valid while nothing is pending (`_pending` empty); None for a detokenizer
        without that step (not byte-level, or the raw added-token rule)."""
        return self._fast if self._plain else None

    def feed_each(self, token_ids: list[int]) -> list[str]:
        """`[feed([t]) for t in token_ids]`: each token's new text."""
        if self._plain:
            fast = self._fast
            step = self._step_bytes
            parts = []
            for t in token_ids:
                if self._pending:
                    parts.append(step(t))
                    continue
                try:
                    text = fast[t]
                except (IndexError, TypeError):
                    text = ""
                parts.append(step(t) if text is None else text)
            return parts
        step = self._step_bytes if self._stream is None else self._step_stream
        return [self._apply_raw_added(t, step(t)) for t in token_ids]

    def flush(self, emit_incomplete: bool = False) -> str:
        """Text still held at the end of the request.

        vLLM never releases a trailing incomplete character, so by default
        this returns "" (kept as an explicit step so callers need not know).
        ``emit_incomplete=True`` releases it with U+FFFD replacements instead.
        """
        if not emit_incomplete:
            return ""
        if self._stream is None and self._pending:
            text = self._pending.decode("utf-8", "replace")
            self._pending.clear()
            return text
        return ""

    # ----------------------------------------------------------- internals
    def _prime(self, prompt_ids: list[int]) -> None:
        """Reproduce ``DecodeStream(ids=prompt_ids)`` for byte-level models.

        A prompt decodes independently of the output unless its text ends in
        U+FFFD (an incomplete character). Then DecodeStream's prefill does not
        advance, and its first released chunk carries the whole prompt's text;
        vLLM streams that, so we do the same.
        """
        table = self._bytes
        assert table is not None
        size = len(table)
        tail = bytearray()
        for tid in reversed(prompt_ids):
            if tid in self._skip_ids or not 0 <= tid < size:
                continue
            tail[:0] = table[tid]
            if len(tail) >= 4:
                break
        if not tail.decode("utf-8", "replace").endswith(_REPLACEMENT):
            return
        for tid in prompt_ids:
            if tid not in self._skip_ids and 0 <= tid < size:
                self._pending += table[tid]

    def _apply_raw_added(self, token_id: int, text: str) -> str:
        if self._raw_added is None:
            return text
        content = self._raw_added.get(token_id)
        is_added = content is not None
        if is_added and self._last_added:
            text = content  # type: ignore[assignment]
        self._last_added = is_added
        return text

    def _step_bytes(self, token_id: int) -> str:
        if token_id in self._skip_ids:
            return ""
        pending = self._pending
        if not pending:
            try:
                text = self._text[token_id]
            except (IndexError, TypeError):
                return ""
            if text is not None:
                return text
        try:
            raw = self._bytes[token_id]  # type: ignore[index]
        except (IndexError, TypeError):
            return ""
        if not raw:
            return ""
        pending += raw
        text = pending.decode("utf-8", "replace")
        if text.endswith(_REPLACEMENT):
            return ""
        pending.clear()
        return text

    def _step_stream(self, token_id: int) -> str:
        try:
            text = self._stream.step(self._hf, token_id)  # type: ignore[union-attr]
        except (OverflowError, TypeError):
            text = None
        except Exception as exc:
            if not str(exc).startswith(_INVALID_PREFIX):
                raise
            # Same recovery as vLLM: restart the stream without context.
            self._stream = tokenizers.decoders.DecodeStream(
                skip_special_tokens=self._skip
            )
            text = self._stream.step(self._hf, token_id)
        return text or ""
