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

    __slots__ = ("_stops", "_include", "_max_len", "_keep", "_ends", "_tail", "_held", "_done", "_prefixes",
                 "_firsts")

    def __init__(self, stops: list[str], include_stop_str_in_output: bool) -> None:
        (self._stops, self._max_len, self._keep, self._ends, self._prefixes,
         self._firsts) = _setup(tuple(stops))
        self._include = include_stop_str_in_output
        # Last (max_len - 1) characters seen: the overlap searched together
        # with the next delta.
        self._tail = ""
        # Characters at the end of _tail not released yet (a possible stop prefix).
        self._held = 0
        self._done = False

    @property
    def stopped(self) -> bool:
        return self._done

    def passes(self, text: str) -> bool:
        """`feed(text)` would release all of it at once without a search: nothing is held and
        the text holds none of the stops' first characters, so no stop can complete in it or
        begin in it (feed's common step). Then feeding it in pieces releases the same."""
        return not self._held and not self._include and not self._done and self._firsts.isdisjoint(text)

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
        if not self._held and not self._include and self._firsts.isdisjoint(delta):
            # The common step. A stop that completes in this delta or ever reaches past it
            # begins in it (none of its first characters here) or in a suffix of the text
            # before it that is a stop's prefix, which would be held: none is. So nothing of
            # the text so far can take part in a match: all of it goes out, no overlap kept.
            # (With include_stop_str_in_output nothing is held, so `_held` says nothing.)
            self._tail = ""
            return delta, None

        tail = self._tail
        window = tail + delta
        if check_stops:
            for end in self._ends:
                if end in delta:  # (the common delta holds none: no search at all)
                    matched = self._search(window, len(tail))
                    if matched is not None:
                        return matched
                    break

        keep = self._keep
        self._tail = window[-keep:] if keep else ""
        held = self._held
        if self._include:
            # Nothing is held back: the stop string is part of the output anyway.
            return (window[len(tail) - held:] if held else delta), None
        # Hold back the longest suffix that may still become a stop (only prefixes ending in
        # the window's last character can: usually none or one, one dict lookup).
        possible = 0
        for prefix in self._prefixes.get(window[-1], ()):
            if window.endswith(prefix):
                possible = len(prefix)
                break
        if not held and not possible:
            return delta, None  # the common step: everything goes out
        unreleased = len(tail) - held  # index in `window` where unreleased text begins
        release_to = len(window) - possible
        self._held = len(window) - max(release_to, unreleased)
        return (window[unreleased:release_to] if release_to > unreleased else ""), None

    def _search(self, window: str, tail_len: int) -> tuple[str, str] | None:
        """The stop that ends first in ``window``'s new part (ties: list order), as feed's
        result, or None. A match must end inside the delta (earlier ones were found before),
        so each stop is searched from where one ending at the delta's first char would start."""
        best_stop: str | None = None
        best_start = 0
        best_end = -1
        for stop in self._stops:
            start = window.find(stop, max(0, tail_len + 1 - len(stop)))
            if start == -1:
                continue
            end = start + len(stop)
            if best_end == -1 or end < best_end:
                best_stop, best_start, best_end = stop, start, end
        if best_stop is None:
            return None
        self._done = True
        cut = best_end if self._include else best_start
        return window[tail_len - self._held:cut], best_stop

    def flush(self) -> str:
        """Release what is still held at the end of the stream."""
        if self._done or not self._held:
            return ""
        text = self._tail[len(self._tail) - self._held :]
        self._held = 0
        return text


@functools.lru_cache(maxsize=256)
def _setup(stops: tuple[str, ...]) -> tuple:
    """What a matcher derives from its stop list, once per list (requests of one deployment
    mostly share theirs): (stops, longest, overlap kept, last characters, prefixes by last
    character, first characters)."""
    # Empty stop strings never match (vLLM's str.find would match "" at once; the OpenAI layer
    # rejects them), so they are dropped here.
    kept = tuple(s for s in stops if s)
    longest = max((len(s) for s in kept), default=0)
    return (
        kept,
        longest,
        # The last (longest - 1) characters seen: the overlap searched with the next delta.
        max(longest - 1, 0),
        # A stop can only complete in a delta holding its last character.
        tuple(dict.fromkeys(s[-1] for s in kept)),
        _prefixes_by_last_char(kept),
        # With nothing held, a delta holding none of these can neither complete nor begin a
        # stop (see feed).
        frozenset(s[0] for s in kept),
    )


@functools.lru_cache(maxsize=256)
def _prefixes_by_last_char(stops: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Every proper prefix of the stops, grouped by its last character, longest first.
    Cached: requests of one deployment mostly share their stop lists."""
    groups: dict[str, set[str]] = {}
    for stop in stops:
        for k in range(1, len(stop)):
            groups.setdefault(stop[k - 1], set()).add(stop[:k])
    return {c: tuple(sorted(ps, key=len, reverse=True)) for c, ps in groups.items()}
