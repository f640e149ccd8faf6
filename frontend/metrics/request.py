"""One request's timing: the engine's view of it (`EngineTiming`, kept by its `Generation`) and
what the worker observes (`RequestMetrics`: inter-token latency per engine step, everything else
once at its end, into the worker's families)."""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import TYPE_CHECKING

from vllm_pyfrontend.metrics.increments import INCREMENTS
from vllm_pyfrontend.metrics.buckets import INTER_TOKEN_LATENCY_BUCKETS

if TYPE_CHECKING:
    from vllm_pyfrontend.metrics import _EngineChildren


class EngineTiming:
    """What the engine's events and step timestamps say about one engine request, on the
    engine's clock (vLLM's `RequestStateStats`): kept by the request's `Generation` from the
    outputs decoded in full (the first, the last, any carrying events), read at its end."""

    __slots__ = ("queue_time", "scheduled_at", "first_token_at", "last_token_at", "preemptions", "finished")

    def __init__(self) -> None:
        self.queue_time: float | None = None  # SCHEDULED - QUEUED (the first of each)
        self.scheduled_at: float | None = None  # the first SCHEDULED event
        self.first_token_at: float | None = None  # the step of the first output
        self.last_token_at: float | None = None  # the step of the latest output seen
        self.preemptions = 0
        self.finished = False  # the engine's final output arrived

    def phases(self, generation_tokens: int) -> tuple[float, float, float, float] | None:
        """(prefill, decode, inference, mean time per output token) as vLLM computes them, or
        None when the engine's events or the final output are missing."""
        scheduled, first, last = self.scheduled_at, self.first_token_at, self.last_token_at
        if not self.finished or scheduled is None or first is None or last is None:
            return None
        decode = last - first
        tpot = decode / (generation_tokens - 1) if generation_tokens > 1 else 0.0
        return first - scheduled, decode, last - scheduled, tpot


_ITL_BOUNDS = INTER_TOKEN_LATENCY_BUCKETS


class RequestMetrics:
    """Timing of one request; created by `WorkerMetrics.start_request` when the request arrives.

    Hot path: `on_output()` once per engine output carrying new tokens (one per engine step, as
    vLLM measures). Everything else is observed once, in `on_finished()`.
    """

    __slots__ = ("_c", "arrival", "first_token_at", "last_token_at", "_itl_counts", "_itl_sum", "finished")

    def __init__(self, children: _EngineChildren, arrival: float):
        self._c = children
        self.arrival = arrival
        self.first_token_at: float | None = None
        self.last_token_at = 0.0
        self._itl_counts: list[int] | None = None
        self._itl_sum = 0.0
        self.finished = False

    def on_output(self, now: float | None = None) -> None:
        """An engine output with new tokens arrived (`now`: time.monotonic(), default now)."""
        if now is None:
            now = time.monotonic()
        if self.first_token_at is None:
            self.first_token_at = self.last_token_at = now
            return
        itl = now - self.last_token_at
        self.last_token_at = now
        counts = self._itl_counts
        if counts is None:
            counts = self._itl_counts = [0] * (len(_ITL_BOUNDS) + 1)
        counts[bisect_left(_ITL_BOUNDS, itl)] += 1
        self._itl_sum += itl

    def on_steps(self, first: float, last: float, steps: int) -> None:
        """`steps` engine outputs with new tokens, the first arrived at `first` and the last at
        `last`, delivered at once (a drained backlog): as many ITL observations as steps, the
        time between the first and the last spread evenly over them (the sum is exact)."""
        self.on_output(first)
        if steps > 1:
            gap = (last - first) / (steps - 1)
            counts = self._itl_counts
            if counts is None:
                counts = self._itl_counts = [0] * (len(_ITL_BOUNDS) + 1)
            counts[bisect_left(_ITL_BOUNDS, gap)] += steps - 1
            self._itl_sum += last - first
            self.last_token_at = last

    def on_finished(
        self,
        finish_reason: str,
        prompt_tokens: int,
        generation_tokens: int,
        *,
        max_tokens: int | None = None,
        n: int | None = 1,
        queue_time_s: float | None = None,
        now: float | None = None,
        timing: EngineTiming | None = None,
    ) -> None:
        """Record the finished request (idempotent: only the first call counts).

        `finish_reason`: stop | length | abort | error | repetition (anything else counts as
        stop: `tool_calls` is a stop). `max_tokens`: the request's own max_tokens parameter if
        it gave one (vLLM observes only explicit values). `n`: the request's n, observed once
        per request — pass None for the 2nd..nth choice of an n > 1 request. `timing`: the
        engine's view of the request (queue time, phases, preemptions), when it sent one."""
        if self.finished:
            return
        self.finished = True
        if now is None:
            now = time.monotonic()
        c = self._c
        add = INCREMENTS.add
        success = c.success.get(finish_reason)
        if success is None:
            success = c.success["stop"]
        add(success, 1)
        if prompt_tokens:
            add(c.prompt_tokens, prompt_tokens)
        if generation_tokens:
            add(c.generation_tokens, generation_tokens)
        c.prompt_hist.observe(prompt_tokens)
        c.generation_hist.observe(generation_tokens)
        if n is not None:
            c.n_hist.observe(n)
        if max_tokens:
            c.max_tokens_hist.observe(max_tokens)
        if self.first_token_at is not None:
            c.ttft.observe(self.first_token_at - self.arrival)
        c.e2e.observe(now - self.arrival)
        if timing is not None:
            if queue_time_s is None:
                queue_time_s = timing.queue_time
            if timing.preemptions:
                add(c.preemptions, timing.preemptions)
            phases = timing.phases(generation_tokens)
            if phases is not None:
                prefill, decode, inference, tpot, preempted = c.phase_children()
                prefill.observe(max(0.0, phases[0]))
                decode.observe(max(0.0, phases[1]))
                inference.observe(max(0.0, phases[2]))
                tpot.observe(max(0.0, phases[3]))
                preempted.observe(timing.preemptions)
        if queue_time_s is not None:
            c.observe_queue_time(queue_time_s)
        counts = self._itl_counts
        if counts is not None:
            buckets = c.itl.buckets
            for i, k in enumerate(counts):
                if k:
                    add(buckets[i], k)
            add(c.itl.sum, self._itl_sum)
        INCREMENTS.done()
