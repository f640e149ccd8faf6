"""Metric values written in batches: the increments of the requests that end within one pass of
the event loop, and histograms observed once per engine step, go to prometheus_client's shared
multiprocess values once per value instead of once per observation."""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from typing import Any


class _Increments:
    """The increments of finished requests' metric values, gathered within one pass of the
    event loop and written once per value at its end (`flush`, scheduled with `call_soon`
    when the first arrives): each multiprocess value write takes a lock and packs into the
    shared file, ~20 per request, and the requests that end together (those of one engine
    step) mostly add to the same values (their finish reason, token counters, the sums and
    the few buckets they fall in). Without a running loop (a test, a script) each increment
    is written at once. `/metrics` flushes before it merges the files.

    Values observed per engine step (`_StepHistogram`) are kept in the process and join the
    next flush (`later`): the one after a request ends, or one `STEP_FLUSH_SECONDS` after the
    first step kept, whichever comes first."""

    __slots__ = ("pending", "scheduled", "kept", "timer")

    def __init__(self) -> None:
        self.pending: dict[Any, float] = {}
        # The loop a flush is scheduled on at the end of its pass, and the loop a flush is due
        # on within STEP_FLUSH_SECONDS (None: none). One scheduled on a loop that has closed
        # since (a process that ran an event loop before this one) never runs, and must not
        # hold the next back.
        self.scheduled: asyncio.AbstractEventLoop | None = None
        self.kept: list[_StepHistogram] = []  # with observations not in `pending` yet
        self.timer: asyncio.AbstractEventLoop | None = None

    def later(self, kept: "_StepHistogram") -> None:
        """`kept` has observations to write with the next flush, at the latest in
        STEP_FLUSH_SECONDS."""
        self.kept.append(kept)
        loop = self._unless_due(self.timer)
        if loop is not None:
            self.timer = loop
            loop.call_later(STEP_FLUSH_SECONDS, self._timed_flush)

    def _timed_flush(self) -> None:
        self.timer = None
        self.flush()

    def add(self, value: Any, amount: float) -> None:
        pending = self.pending
        pending[value] = pending.get(value, 0) + amount

    def done(self) -> None:
        """The increments of one request are added: flush now or at the loop pass's end."""
        loop = self._unless_due(self.scheduled)
        if loop is not None:
            self.scheduled = loop
            loop.call_soon(self.flush)

    def _unless_due(self, due: asyncio.AbstractEventLoop | None) -> asyncio.AbstractEventLoop | None:
        """The loop to schedule a flush on; None when one is due already (on `due`, a loop
        that still runs) or there is no loop (then it flushed now)."""
        if due is not None and not due.is_closed():
            return None
        return self._loop_or_flush()

    def _loop_or_flush(self) -> asyncio.AbstractEventLoop | None:
        """The running event loop to flush on later; without one (no loop in this thread),
        flush now and None."""
        try:
            return asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return None

    def flush(self) -> None:
        self.scheduled = None
        if self.kept:
            kept, self.kept = self.kept, []
            for k in kept:
                k.move_to(self)
        pending, self.pending = self.pending, {}
        for value, amount in pending.items():
            value.inc(amount)


# How long an engine step's observations may wait in the worker before they are written (they
# are written earlier when a request ends): what `/metrics` from another worker may lag by.
STEP_FLUSH_SECONDS = 0.5
INCREMENTS = _Increments()


class _HistogramChild:
    """Direct access to one histogram child's bucket and sum values, for batch flushes.

    prometheus_client stores a histogram child as non-cumulative per-bucket values plus a sum
    (the exposition accumulates them); adding k observations to bucket i is `inc(k)` on it.
    """

    __slots__ = ("buckets", "sum", "bounds")

    def __init__(self, child: Any):
        self.buckets = child._buckets
        self.sum = child._sum
        self.bounds = child._upper_bounds  # ends with +Inf

    def observe(self, amount: float) -> None:
        """`Histogram.observe(amount)` (no exemplar) into `INCREMENTS`, with a bisect for
        prometheus_client's linear scan of the bounds: the first bucket whose bound is >=
        amount (amounts here are finite: counts and durations)."""
        add = INCREMENTS.add
        add(self.sum, amount)
        add(self.buckets[bisect_left(self.bounds, amount)], 1)


class _StepHistogram:
    """A histogram child observed once per engine step (`vllm:iteration_tokens_total`): an
    observation is a bisect and two additions in this process (`observe`, inlined by its
    caller), moved into `INCREMENTS` when it flushes. Writing each step's observation to the
    shared values would cost its two value writes per step, several µs: more than the rest of
    a one-stream step's path."""

    __slots__ = ("child", "bounds", "counts", "sum", "queued")

    def __init__(self, child: Any):
        self.child = _HistogramChild(child)
        self.bounds = self.child.bounds
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0
        self.queued = False  # in INCREMENTS.kept

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount
        if not self.queued:
            self.queued = True
            INCREMENTS.later(self)

    def move_to(self, increments: _Increments) -> None:
        self.queued = False
        add = increments.add
        buckets = self.child.buckets
        counts = self.counts
        for i, k in enumerate(counts):
            if k:
                add(buckets[i], k)
                counts[i] = 0
        add(self.child.sum, self.sum)
        self.sum = 0.0
