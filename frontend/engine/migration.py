"""Requests moved off an engine that went down, to a live one, where they continue.

When an engine is declared down (its socket gone, silent past the request deadline,
ENGINE_CORE_DEAD, or restarting), each unfinished request it held is sent again, to a live
engine, as its continuation: the prompt followed by the tokens generated so far, `max_tokens`
and `min_tokens` reduced by their number, the same sampling parameters and stop conditions,
under a new engine request id (`<id>-m<move>`: the old id's late outputs are orphans and are
dropped). Everything the client sees is computed above the engine (detokenizer, stop strings,
usage, logprobs formatting), so the stream goes on as if nothing happened.

What a continuation needs is kept by the request's sink (`llm.Generation`: `output_ids`, the
token ids delivered so far, one list extend per step) and by the in-flight table (the engine
request as first sent, `InFlight.requests`). A sink that keeps no `output_ids` is not moved.

A request that cannot continue exactly ends as before (503, or an error event mid-stream):

- seeded random sampling with tokens generated: vLLM seeds a per-request generator with the
  seed when the request is added and draws from it at every step, so a continuation would draw
  the first step's numbers again: different text from an uninterrupted run;
- presence or frequency penalties with tokens generated: vLLM counts them over output tokens,
  which a continuation has moved into its prompt;
- structured outputs with tokens generated: the grammar would start again at the prompt's end;
- multimodal items with tokens generated: items sent by hash only are not in the new engine's
  cache, and the tensors are not kept here to send them in full.

A request with no token generated yet is re-sent as it was (exact whatever its parameters: the
engine had produced nothing from it). Prompt logprobs: their rows all arrive before the first
token, so a continuation asks for none again; a request that had part of them is not moved.
Beam search sends one engine request per beam and step, each of one token: re-sent whole.

A request is moved at most `limit` times. With no engine live, moved and new requests wait
(`parked`) for one to come back, up to `timeout` seconds, then fail with the failure that
stopped them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Callable

from .disaggregation import has_remote_prefill, with_kv_transfer
from .inflight import InFlight, fail_sink
from .types import EngineRequest, Failure, FailureKind, OutputSink

log = logging.getLogger(__name__)

# Why a request moved: the label of `vllm:request_migrations_total`.
REASON_LOST = "engine_lost"  # its socket is gone
REASON_STALLED = "engine_stalled"  # silent past the request deadline
REASON_DEAD = "engine_dead"  # ENGINE_CORE_DEAD
REASON_RESTART = "engine_restart"  # the supervisor restarts it

_REASONS = {
    FailureKind.ENGINE_STALLED: REASON_STALLED,
    FailureKind.ENGINE_DEAD: REASON_DEAD,
}

# Why a request of an engine that went down failed instead of moving: the label of
# `vllm:request_migration_failures_total`.
UNMOVED_LIMIT = "limit"  # it moved --migration-limit times already
UNMOVED_INEXACT = "inexact"  # it cannot continue exactly (see above), or its sink keeps no tokens
UNMOVED_TIMEOUT = "timeout"  # no engine was live within --migration-timeout

DEFAULT_LIMIT = 3
DEFAULT_TIMEOUT = 30.0


def reason_of(failure: Failure) -> str:
    return _REASONS.get(failure.kind, REASON_LOST)


def continuation(req: EngineRequest, sink: OutputSink, new_id: str) -> EngineRequest | None:
    """The engine request that continues `req` where `sink` is, under `new_id`; None when it
    cannot continue exactly (see the module's docstring)."""
    output_ids = getattr(sink, "output_ids", None)
    if output_ids is None:
        return None
    if has_remote_prefill(req):  # the prefill engine's blocks may be gone: the new engine computes
        req = with_kv_transfer(req, None, req.request_id)
    sp = req.sampling_params
    k = len(output_ids)
    if k == 0:
        if sp is not None and sp.get("prompt_logprobs") is not None \
                and getattr(sink, "prompt_logprobs", None) is not None:
            return None  # part of the prompt's rows delivered: they would come again
        return replace(req, request_id=new_id)
    if sp is None or req.mm_features:
        return None
    if sp.get("seed") is not None and (sp.get("temperature") or 0.0) >= 1e-5:
        return None
    if sp.get("presence_penalty") or sp.get("frequency_penalty"):
        return None
    if sp.get("structured_outputs") is not None or sp.get("guided_decoding") is not None:
        return None
    max_tokens = sp.get("max_tokens")
    if max_tokens is not None:
        max_tokens -= k
        if max_tokens <= 0:
            return None
    params = dict(sp)
    params["max_tokens"] = max_tokens
    if params.get("min_tokens"):
        params["min_tokens"] = max(0, params["min_tokens"] - k)
    if params.get("prompt_logprobs") is not None:
        params["prompt_logprobs"] = None  # delivered with the first token already
    return replace(req, request_id=new_id, prompt_token_ids=req.prompt_token_ids + output_ids,
                   sampling_params=params)


def moved_id(rid: str, move: int) -> str:
    """The engine request id of a request's `move`-th continuation."""
    if move > 1:
        rid = rid.rsplit("-m", 1)[0]
    return f"{rid}-m{move}"


class Parked:
    __slots__ = ("req", "sink", "failure", "deadline", "reason", "origin")

    def __init__(self, req: EngineRequest, sink: OutputSink, failure: Failure, deadline: float,
                 reason: str | None, origin: int | None):
        self.req = req
        self.sink = sink
        self.failure = failure
        self.deadline = deadline
        self.reason = reason  # None: a new request waiting for an engine, not a move
        self.origin = origin  # the engine it left


class Migrations:
    """Moves the requests of an engine that went down (`move_off`) and holds those that wait
    for a live engine (`parked`). `send(req, sink, engine)` tracks and queues a request (on
    the engine it returns; a sink with `on_sent(engine)` hears which);
    `live()` says which engines take requests now; `on_moved(reason)`, when given, counts a
    move and `on_unmoved(reason)` a request that failed instead (the client's observer)."""

    def __init__(self, limit: int, timeout: float, inflight: InFlight, live: Callable[[], list[int]],
                 send: Callable[[EngineRequest, OutputSink, int], int],
                 on_moved: Callable[[str], None] | None = None, on_unmoved: Callable[[str], None] | None = None):
        self.limit = limit
        self.timeout = timeout
        self._inflight = inflight
        self._live = live
        self._send = send
        self.parked: dict[str, Parked] = {}
        self.waiting_until = 0.0  # new requests wait for an engine until then (a restart)
        self.on_moved = on_moved
        self.on_unmoved = on_unmoved
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def waiting(self) -> bool:
        """No engine may be live, but requests wait for one (parked, or a restart announced)."""
        return bool(self.parked) or time.monotonic() < self.waiting_until

    def expect_engine(self) -> None:
        """The supervisor restarts the engine: requests wait for it, up to the timeout."""
        self.waiting_until = time.monotonic() + self.timeout
        self._arm()

    # ------------------------------------------------------------------ moving

    def move_off(self, rids: list[str], failure: Failure, reason: str | None = None) -> list[OutputSink]:
        """Take `rids` out of flight (on an engine now down) and move each one that may
        continue; the sinks of the others, to be failed with `failure`."""
        inflight = self._inflight
        requests = inflight.requests
        reason = reason or reason_of(failure)
        deadline = time.monotonic() + self.timeout
        failing: list[OutputSink] = []
        for rid in rids:
            req = requests.get(rid)
            engine, sink = inflight.untrack(rid)
            if sink is None:
                continue
            moves = getattr(sink, "moves", None)
            n = 1 + (len(moves) if moves else 0)
            try:
                cont = None if req is None or n > self.limit else continuation(req, sink, moved_id(rid, n))
                if cont is not None:
                    # (from here on the sink's aborts name the new id: it must hear of it)
                    sink.on_moved(cont.request_id, engine, reason)  # type: ignore[attr-defined]
            except Exception as e:  # noqa: BLE001 - this one fails, the others still move
                log.exception("request %s could not be moved", rid)
                fail_sink(sink, Failure(FailureKind.INTERNAL, f"internal error: {e}"))
                continue
            if cont is None:
                failing.append(sink)
                self._unmoved(UNMOVED_LIMIT if n > self.limit else UNMOVED_INEXACT)
                continue
            self.parked[cont.request_id] = Parked(cont, sink, failure, deadline, reason, engine)
        if self.parked:
            self.resume()
        return failing

    def park_new(self, req: EngineRequest, sink: OutputSink, failure: Failure) -> None:
        """A new request while no engine is live (a restart): it waits for one."""
        self.parked[req.request_id] = Parked(req, sink, failure, time.monotonic() + self.timeout, None, None)
        self._arm()

    def unpark(self, rid: str) -> bool:
        """Forget a waiting request (aborted). True if it was waiting."""
        return self.parked.pop(rid, None) is not None

    def resume(self) -> None:
        """Send what waits to the live engines (a request pinned to a rank waits for that one)."""
        if not self.parked:
            return
        live = self._live()
        if not live:
            self._arm()
            return
        waiting, self.parked = self.parked, {}
        for rid, p in waiting.items():
            rank = p.req.data_parallel_rank
            if rank is not None and rank not in live:
                self.parked[rid] = p
                continue
            try:
                engine = self._send(p.req, p.sink, -1 if rank is None else rank)
                on_sent = getattr(p.sink, "on_sent", None)
                if on_sent is not None:
                    on_sent(engine)
            except Exception as e:  # noqa: BLE001 - this one fails, the others still go
                log.exception("could not resend request %s", rid)
                fail_sink(p.sink, Failure(FailureKind.INTERNAL, f"The request could not be sent: {e}"))
                continue
            if p.reason is not None:
                log.info("request %s moved off engine %s (%s)", rid, p.origin, p.reason)
                if self.on_moved is not None:
                    self.on_moved(p.reason)
        if self.parked:
            self._arm()

    def fail_all(self, failure: Failure | None = None) -> None:
        """Nothing will come back (the client closes, the engine is dead for good)."""
        waiting, self.parked = self.parked, {}
        self.waiting_until = 0.0
        for p in waiting.values():
            fail_sink(p.sink, failure or p.failure)

    # ------------------------------------------------------------------ the deadline

    def _arm(self) -> None:
        if self._timer is not None or self._loop is None:
            return
        deadlines = [p.deadline for p in self.parked.values()]
        if self.waiting_until:
            deadlines.append(self.waiting_until)
        if not deadlines:
            return
        delay = max(0.0, min(deadlines) - time.monotonic()) + 0.01
        self._timer = self._loop.call_later(delay, self._expire)

    def _expire(self) -> None:
        """Fail what waited past its deadline."""
        self._timer = None
        now = time.monotonic()
        if self.waiting_until and now >= self.waiting_until:
            self.waiting_until = 0.0
        expired = [rid for rid, p in self.parked.items() if p.deadline <= now]
        for rid in expired:
            p = self.parked.pop(rid)
            log.warning("request %s: no engine within %.0fs; it fails", rid, self.timeout)
            fail_sink(p.sink, p.failure)
            self._unmoved(UNMOVED_TIMEOUT)
        self._arm()

    def _unmoved(self, reason: str) -> None:
        if self.on_unmoved is not None:
            self.on_unmoved(reason)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
