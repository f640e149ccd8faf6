"""Stop strings over streamed text.

Semantics are vLLM's (v1/engine/detokenizer.py ``check_stop_strings``): each
new piece of text is searched, together with enough of the text before it to
catch a stop string that straddles the boundary; when several stop strings
complete in the same piece, the one that *ends* first wins (ties: list
order). After a match the output ends: at the start of the stop string, or
after it with ``include_stop_str_in_output``; nothing after it is released.

Streaming differs from vLLM only in timing, never in the final text: vLLM
holds back a fixed ``max(len(stop)) - 1`` characters, we hold back only a
suffix that could still become a stop string, so text is released earlier.
With ``include_stop_str_in_output`` nothing is held (the stop string is part
of the output anyway), as in vLLM.
"""

from __future__ import annotations

import functools


class StopStringMatcher:
    """Per-request matcher; feed it detokenized deltas in order."""

    __slots__ = ("_stops", "_include", "_max_len", "_tail", "_held", "_done", "_prefixes")

    def __init__(self, stops: list[str], include_stop_str_in_output: bool) -> None:
        # Empty stop strings never match (vLLM's str.find would match "" at
        # once; the OpenAI layer rejects them), so drop them here.
        self._stops: list[str] = [s for s in stops if s]
        self._include = include_stop_str_in_output
        self._max_len = max((len(s) for s in self._stops), default=0)
        self._prefixes = _prefixes_by_last_char(tuple(self._stops))
        # Last (max_len - 1) characters seen: the overlap searched together
        # with the next delta.
        self._tail = ""
        # Characters at the end of _tail not released yet (a possible stop prefix).
        self._held = 0
        self._done = False

    @property
    def stopped(self) -> bool:
        return self._done

    def feed(self, delta: str, check_stops: bool = True) -> tuple[str, str | None]:
        """Add ``delta``; return (text safe to release now, matched stop or None).

        ``check_stops=False`` adds text without matching (vLLM's min_tokens:
        stop strings are only searched once enough tokens were generated);
        such text is still held back while it may start a stop string, and a
        stop string that begins in it and ends in a later delta still matches.
        After a match, further calls return ("", None).
        """
        if self._done or not delta:
            return "", None
        if not self._stops:
            return delta, None

        window = self._tail + delta
        # Index in `window` where unreleased text begins.
        unreleased = len(self._tail) - self._held

        if check_stops:
            best_stop: str | None = None
            best_start = 0
            best_end = -1
            # A match must end inside `delta` (earlier ones were found before),
            # so search from where a stop ending at delta's first char would start.
            for stop in self._stops:
                start = window.find(stop, max(0, len(self._tail) + 1 - len(stop)))
                if start == -1:
                    continue
                end = start + len(stop)
                if best_end == -1 or end < best_end:
                    best_stop, best_start, best_end = stop, start, end
            if best_stop is not None:
                self._done = True
                cut = best_end if self._include else best_start
                return window[unreleased:cut], best_stop

        if self._include:
            release_to = len(window)
        else:
            release_to = len(window) - self._possible_prefix_len(window)
        released = window[unreleased:release_to] if release_to > unreleased else ""
        keep = self._max_len - 1
        self._tail = window[-keep:] if keep > 0 else ""
        self._held = len(window) - max(release_to, unreleased)
        return released, None

    def flush(self) -> str:
        """Release what is still held at the end of the stream."""
        if self._done or not self._held:
            return ""
        text = self._tail[len(self._tail) - self._held :]
        self._held = 0
        return text

    def _possible_prefix_len(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a stop."""
        if not text:
            return 0
        # Only prefixes ending in text's last character can match (longest first); usually
        # there are none or one, so this is one dict lookup per delta.
        for prefix in self._prefixes.get(text[-1], ()):
            if text.endswith(prefix):
                return len(prefix)
        return 0


@functools.lru_cache(maxsize=256)
def _prefixes_by_last_char(stops: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Every proper prefix of the stops, grouped by its last character, longest first.
    Cached: requests of one deployment mostly share their stop lists."""
    groups: dict[str, set[str]] = {}
    for stop in stops:
        for k in range(1, len(stop)):
            groups.setdefault(stop[k - 1], set()).add(stop[:k])
    return {c: tuple(sorted(ps, key=len, reverse=True)) for c, ps in groups.items()}
