"""Token ids -> released text for one choice: incremental detokenizer + stop strings.

Follows vLLM's detokenizer semantics: a request the engine stopped (EOS or a stop token id)
does not show its last token unless `include_stop_str_in_output`; stop strings are checked
only once `min_tokens` tokens exist; text that could begin a stop string is held back.
"""

from __future__ import annotations

from vllm_pyfrontend.text.detokenizer import IncrementalDetokenizer
from vllm_pyfrontend.text.stop import StopStringMatcher


class TextStream:
    __slots__ = ("detok", "stop", "min_tokens", "include_stop", "num_tokens", "matched")

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

    def feed(self, token_ids: list[int], engine_stopped: bool) -> tuple[str, str | None]:
        """Returns (text to release, stop string matched or None)."""
        if self.matched is not None or not token_ids:
            return "", None
        if engine_stopped and not self.include_stop:
            token_ids = token_ids[:-1]
        self.num_tokens += len(token_ids)
        text = self.detok.feed(token_ids) if token_ids else ""
        if engine_stopped:
            text += self.detok.flush()
        if self.stop is None:
            return text, None
        if self.num_tokens <= self.min_tokens:
            # Stop strings do not apply yet (vLLM: only once num_output_tokens > min_tokens);
            # nothing is held in the matcher before that point, so the text goes out as is.
            return text, None
        released, matched = self.stop.feed(text)
        if matched is not None:
            self.matched = matched
            return released, matched
        if engine_stopped:
            released += self.stop.flush()
        return released, None

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
