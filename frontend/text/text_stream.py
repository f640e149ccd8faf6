"""Token ids -> released text for one choice: incremental detokenizer + stop strings.

Follows vLLM's detokenizer semantics: a request the engine stopped (EOS or a stop token id)
does not show its last token unless `include_stop_str_in_output`; stop strings are checked
from the token after the first `min_tokens` on (a stop string may begin before it); text that
could begin a stop string is held back; tokens of a step after the one that completed a stop
string are not part of the output.
"""

from __future__ import annotations

from vllm_pyfrontend.text.detokenizer import IncrementalDetokenizer
from vllm_pyfrontend.text.stop import StopStringMatcher


class TextStream:
    __slots__ = ("detok", "stop", "min_tokens", "include_stop", "num_tokens", "matched", "num_kept", "_table")

    def __init__(
        self,
        detok: IncrementalDetokenizer,
        stop: list[str],
        *,
        include_stop_str_in_output: bool = False,
        min_tokens: int = 0,
    ):
        self.detok = detok
        self.stop = StopStringMatcher(stop, include_stop_str_in_output) if stop else None
        self.min_tokens = min_tokens
        self.include_stop = include_stop_str_in_output
        self.num_tokens = 0
        self.matched: str | None = None
        self.num_kept = 0
        # feed_one's table (a detokenizer of another kind has none: `feed` takes every step).
        table_of = getattr(detok, "one_token_table", None)
        self._table = table_of() if table_of is not None else None

    def feed(self, token_ids: list[int], engine_stopped: bool) -> tuple[str, str | None]:
        """Returns (text to release, stop string matched or None).

        After a match, `num_kept` says how many of this step's `token_ids` produced the output
        (the one that completed the stop string and those before it): with several tokens per
        step (speculative decoding) vLLM drops the ones after it from the output, its token
        count and its logprobs, and so must the caller.
        """
        if self.matched is not None or not token_ids:
            return "", None
        prev = self.num_tokens
        self.num_tokens += len(token_ids)  # vLLM's num_output_tokens: the stop token counts
        if engine_stopped and not self.include_stop:
            token_ids = token_ids[:-1]
        stop = self.stop
        if stop is None:
            text = self.detok.feed(token_ids) if token_ids else ""
            return text + self.detok.flush() if engine_stopped else text, None
        if len(token_ids) == 1 or not token_ids:
            # One token (the common step): stop strings count from the token after the first
            # `min_tokens` on (vLLM); text before that still goes through the matcher, held
            # while it may begin a stop string that a later token completes.
            text = self.detok.feed(token_ids) if token_ids else ""
            released, matched = stop.feed(text, prev >= self.min_tokens)
            self.num_kept = len(token_ids)
        else:
            released, matched = self._feed_each(token_ids, prev)
        if matched is None and engine_stopped:
            tail = self.detok.flush()
            more, matched = stop.feed(tail, self.num_tokens > self.min_tokens) if tail else ("", None)
            released += more if matched is not None else more + stop.flush()
        if matched is not None:
            self.matched = matched
        return released, matched

    @property
    def has_one_token_step(self) -> bool:
        """`feed_one` can take steps (else it always answers None)."""
        return self._table is not None

    def feed_one(self, token_id: int) -> str | None:
        """`feed([token_id], False)[0]` when that is the common step, else None with nothing
        changed (the caller then takes `feed`). The common step: nothing matched yet, the
        detokenizer's one-token table has the token's whole text (nothing pending, see
        `IncrementalDetokenizer.one_token_table`) and the stop strings release it at once
        (`StopStringMatcher.passes`, inlined with the state change of that step of its `feed`).
        The per-token path (server.request_pipeline.ChoiceStep)."""
        table = self._table
        if table is None or self.matched is not None or self.detok._pending:
            return None
        try:
            text = table[token_id]
        except (IndexError, TypeError):
            text = ""  # (as the detokenizer: an id outside the vocabulary has no text)
        if text is None:
            return None
        stop = self.stop
        if text and stop is not None:
            if stop._held or stop._include or stop._done or not stop._firsts.isdisjoint(text):
                return None
            stop._tail = ""
        self.num_tokens += 1
        return text

    def _feed_each(self, token_ids: list[int], prev: int) -> tuple[str, str | None]:
        """Several tokens in one step: token by token, so the min_tokens boundary falls
        between the right tokens and a match tells which token completed it."""
        stop = self.stop
        assert stop is not None
        texts = self.detok.feed_each(token_ids)
        whole = "".join(texts)
        if stop.passes(whole):  # (a backlog of prose: no stop can begin or end in any of it)
            self.num_kept = len(token_ids)
            return stop.feed(whole)
        released: list[str] = []
        for i, text in enumerate(texts):
            part, matched = stop.feed(text, prev + i >= self.min_tokens)
            released.append(part)
            if matched is not None:
                self.num_kept = i + 1
                return "".join(released), matched
        return "".join(released), None

    def finish(self) -> str:
        """Release whatever is still held when the request ends for another reason."""
        if self.matched is not None:
            return ""
        text = self.detok.flush()
        if self.stop is None:
            return text
        released, matched = self.stop.feed(text) if text else ("", None)
        if matched is not None:
            self.matched = matched
            return released
        return released + self.stop.flush()
