"""One worker's engine client slot: ADD/ABORT/UTILITY out, outputs pushed to sinks.

Each worker process owns one vLLM client slot (`client_index`): a ROUTER it binds
for requests (the engines' DEALERs connect to it) and a PULL it binds for outputs
(the engines' PUSHes connect to it). The engine sends every output of a request to
the slot named by the request's `client_index`, so outputs never need a hop.

The output path is the hot path. It does not use asyncio sockets: the PULL
socket's file descriptor is registered with `loop.add_reader`, and the callback
drains every queued message with non-blocking `recv_multipart`, decodes each
batch and calls `sink.on_output(output)` synchronously for every output. No task,
future or queue per token.

ZMQ's FD is edge-triggered: it signals "something changed", not "a message is
waiting", and it is only re-armed once a receive has returned EAGAIN. So the
reader must drain until EAGAIN every time, and when it stops early (to let the
loop breathe) it must reschedule itself rather than wait for the FD. Only this
callback touches the PULL socket, so no other call can swallow a wake-up.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from typing import Any, Callable, Iterable

import zmq

from .types import (
    EngineDeadError,
    EngineInfo,
    EngineOutput,
    EngineRequest,
    Failure,
    FailureKind,
    InvalidEngineRequest,
    OutputSink,
)
from .validate import validate_engine_request
from .wire import (
    LATEST_LAYOUT,
    REQUEST_ABORT,
    REQUEST_ADD,
    REQUEST_UTILITY,
    ProtocolError,
    decode_message,
    decode_output,
    plain_running,
    decode_ready,
    encode_abort,
    encode_add,
    encode_utility,
    engine_identity,
    is_engine_dead,
    layout_for_version,
)

class OutputClock:
    """`time.monotonic()` when the engine output batch being delivered now arrived; 0.0 outside
    a delivery. Per-token consumers (ITL metrics) read it instead of the clock: one clock read
    per engine step, not per token, and every output of one step stamped alike.

    A delivery may carry several engine steps of one stream (a backlog drained at once, see
    `EngineClient._drain`): `steps` says how many, `now` is when the first of them arrived and
    `last` when the last did (`last == now` for one step)."""

    now = 0.0
    last = 0.0
    steps = 1


log = logging.getLogger(__name__)

# Messages handled per reader callback before yielding to the event loop.
_DRAIN_BUDGET = 512
# ... and seconds: a worker far behind an engine (a burst of new streams, an engine that steps
# faster than the worker can stream) must still accept, parse and submit new requests between
# drains, or their time to first token grows with the backlog (a 512-step drain of 500 streams
# is ~1 s of work). One drain still gathers every step that fits, so a stream's steps of one
# drain go out in one write.
_DRAIN_SECONDS = 0.01
# Messages taken off the output socket per drain at most (~1 µs each): an engine that sends
# faster than this is read on the next loop iteration.
_TAKE_BUDGET = 8192
# Send flags as ints (see _send).
_MORE = int(zmq.SNDMORE | zmq.NOBLOCK)
_LAST = int(zmq.NOBLOCK)
# How long the writes of a drain that spans several slices may be held back (see _on_readable).
_DRAIN_HOLD_SECONDS = 0.05
# Ids aborted locally are remembered this long (in entries) so late outputs for
# them are dropped quietly instead of triggering another abort.
_RECENT_ABORTS = 8192
# A cheap EngineCore method, answered between engine steps: the liveness probe.
_PROBE_METHOD = "is_sleeping"


class UtilityError(RuntimeError):
    """A utility call that the engine ran and reported as failed."""


def _rank_range(indices: list[int]) -> str:
    """The engines' ranks as vLLM words them, "[0, 2)"; a list when they are not contiguous."""
    lo, hi = min(indices), max(indices)
    if hi - lo + 1 == len(indices):
        return f"[{lo}, {hi + 1})"
    return str(sorted(indices))


class EngineClient:
    """ZMQ client of one or more EngineCores (data parallel) for one worker."""

    def __init__(
        self,
        *,
        client_index: int,
        input_address: str,
        output_address: str,
        engine_indices: list[int],
        vocab_size: int | None = None,
        max_logprobs: int = 20,
        engine_timeout: float | None = None,
    ):
        if not engine_indices:
            raise ValueError("engine_indices must name at least one engine")
        self.client_index = client_index
        self.input_address = input_address
        self.output_address = output_address
        self.engine_indices = list(engine_indices)
        self.vocab_size = vocab_size
        self.max_logprobs = max_logprobs
        # Engine-hang detection (see `_watchdog`): None or 0 disables it.
        self.engine_timeout = engine_timeout or None

        self._identities = {i: engine_identity(i) for i in self.engine_indices}
        self._infos: dict[int, EngineInfo] = {}
        self._layout = LATEST_LAYOUT
        self._max_model_len = 0

        self._ctx: zmq.Context | None = None
        self._input: zmq.Socket | None = None
        self._output: zmq.Socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reader_fd: int | None = None
        self._drain_scheduled = False
        # While a drain reads a backlog: each running stream's new token ids of the messages
        # read so far, delivered once per stream at the end of the drain (see `_drain`).
        self._coalesce: dict[str, list] | None = None
        # Output messages taken off the socket and not handled yet (see `_take`).
        self._received: deque[list[bytes]] = deque()
        # Called around each drain of the output socket (one or more engine steps' outputs):
        # the server gathers a stream's writes of one drain into one (vllm_pyfrontend.server.sse).
        self.drain_hooks: tuple[Callable[[], None], Callable[[], None]] | None = None
        # Called with an output's mm_cache_miss_hashes (frontend/multimodal's sender cache).
        self.on_mm_cache_miss: Callable[[list[str]], None] | None = None
        self._drain_opened: float | None = None  # when the open drain's begin hook ran

        self._started = False
        self._closed = False
        self._healthy = False
        # Why requests cannot be served now (None while healthy).
        self._down: Failure | None = Failure(FailureKind.ENGINE_DEAD, "The engine client is not started.")

        self._sinks: dict[str, OutputSink] = {}
        self._owner: dict[str, int] = {}
        self._in_flight = {i: 0 for i in self.engine_indices}
        self._stats: dict[int, dict] = {}
        self._stats_at: dict[int, float] = {}  # wall time each engine's stats arrived here
        # The engine's own clock (EngineCoreOutputs.timestamp) on the batch that carried them:
        # orders one engine's samples across workers (see scheduler_stats_engine_time).
        self._stats_engine_at: dict[int, float] = {}
        self._rr = 0

        # New requests not sent yet, in order: rid -> (payload, request). They go out together
        # at the end of the loop iteration that made them (see `_flush_out`).
        self._unsent: dict[str, tuple[bytes, EngineRequest]] = {}
        self._pending_aborts: dict[int, list[str]] = {}
        self._out_scheduled = False
        self._recent_aborts: set[str] = set()
        self._old_aborts: set[str] = set()

        self._utility: dict[int, asyncio.Future] = {}
        self._next_call_id = secrets.randbits(62)

        # Watchdog: when each engine last sent anything; probes sent and not yet answered.
        self._last_heard = {i: time.monotonic() for i in self.engine_indices}
        self._probe_sent: dict[int, float] = {}
        # Engines that cannot take requests now (stalled, or their socket gone), and why. The
        # client stays healthy while any engine is up: routing skips these.
        self._engines_down: dict[int, Failure] = {}
        self._watchdog_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(
        self, *, engine_infos: list[EngineInfo] | None = None, timeout: float = 600.0
    ) -> list[EngineInfo]:
        """Bind the sockets, wait for every engine's ready response, start reading.

        A restarted worker gets no ready response (the engines sent theirs once,
        to its predecessor): it passes the infos it was given and this waits only,
        briefly, for the engines' DEALERs to reconnect.
        """
        if self._started:
            raise RuntimeError("EngineClient.start() called twice")
        self._loop = asyncio.get_running_loop()
        self._ctx = zmq.Context()
        inp = self._ctx.socket(zmq.ROUTER)
        inp.setsockopt(zmq.SNDHWM, 0)
        inp.setsockopt(zmq.RCVHWM, 0)
        # A ROUTER silently drops frames for an unknown peer; make that an error.
        inp.setsockopt(zmq.ROUTER_MANDATORY, 1)
        out = self._ctx.socket(zmq.PULL)
        out.setsockopt(zmq.RCVHWM, 0)
        self._input, self._output = inp, out
        try:
            if engine_infos is None:
                # Monitor is only needed for restarts; bind first, then wait.
                inp.bind(self.input_address)
                out.bind(self.output_address)
                infos = await self._wait_ready(timeout)
            else:
                infos = self._trust_infos(engine_infos)
                monitor = inp.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
                inp.bind(self.input_address)
                out.bind(self.output_address)
                await self._wait_connected(monitor, min(timeout, 30.0))
        except BaseException:
            self._close_sockets(linger=0)
            raise
        for info in infos:
            self._infos[info.engine_index] = info
        self._max_model_len = min(i.max_model_len for i in infos)
        self._layout = layout_for_version(infos[0].vllm_version)
        self._started = True
        self._healthy = True
        self._down = None
        self._reader_fd = out.getsockopt(zmq.FD)
        self._loop.add_reader(self._reader_fd, self._on_readable)
        # Outputs may already be queued (a restarted worker inherits orphans):
        # the edge-triggered FD would not announce them.
        self._schedule_drain()
        now = time.monotonic()
        for i in self.engine_indices:
            self._last_heard[i] = now
        if self.engine_timeout:
            self._arm_watchdog()
        return [self._infos[i] for i in self.engine_indices]

    def _trust_infos(self, engine_infos: list[EngineInfo]) -> list[EngineInfo]:
        by_index = {i.engine_index: i for i in engine_infos}
        missing = [i for i in self.engine_indices if i not in by_index]
        if missing:
            raise ValueError(f"no engine info for engine(s) {missing}")
        return [by_index[i] for i in self.engine_indices]

    async def _wait_ready(self, timeout: float) -> list[EngineInfo]:
        assert self._input is not None
        deadline = time.monotonic() + timeout
        pending = set(self.engine_indices)
        infos: dict[int, EngineInfo] = {}
        by_identity = {v: k for k, v in self._identities.items()}
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"no ready response from engine(s) {sorted(pending)} on "
                    f"{self.input_address} within {timeout:.0f}s"
                )
            # Startup only: short blocking polls, then let the loop run.
            if not self._input.poll(timeout=min(20, max(1, int(remaining * 1000)))):
                await asyncio.sleep(0.005)
                continue
            frames = self._input.recv_multipart()
            if len(frames) != 2:
                log.warning("ignoring %d-frame message on the input socket", len(frames))
                continue
            identity, payload = frames
            index = by_identity.get(identity)
            if index is None:
                log.warning("ready response from unexpected engine identity %r", identity)
                continue
            infos[index] = decode_ready(payload, engine_index=index)
            pending.discard(index)
            log.info("engine %d ready: vLLM %s, max_model_len %d", index,
                     infos[index].vllm_version, infos[index].max_model_len)
        return [infos[i] for i in self.engine_indices]

    async def _wait_connected(self, monitor: zmq.Socket, timeout: float) -> None:
        """Wait until every engine's DEALER has (re)connected to the input ROUTER.

        Until then a send to its identity fails (ROUTER_MANDATORY). Not fatal on
        timeout: the engine may be slow to notice the new socket; sends report it.
        """
        from zmq.utils.monitor import recv_monitor_message

        assert self._input is not None
        deadline = time.monotonic() + timeout
        connected = 0
        try:
            while connected < len(self.engine_indices):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning("only %d of %d engine(s) reconnected to %s within %.0fs",
                                connected, len(self.engine_indices), self.input_address, timeout)
                    return
                if monitor.poll(timeout=min(20, max(1, int(remaining * 1000)))):
                    event = recv_monitor_message(monitor)
                    if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                        connected += 1
                else:
                    await asyncio.sleep(0.005)
        finally:
            self._input.disable_monitor()
            monitor.close(linger=0)

    async def close(self) -> None:
        """Abort what is still in flight, fail its sinks, close the sockets."""
        if self._closed:
            return
        self._closed = True
        if self._watchdog_timer is not None:
            self._watchdog_timer.cancel()
            self._watchdog_timer = None
        if self._started and self._sinks:
            ids = list(self._sinks)
            sinks = list(self._sinks.values())
            self.abort(ids)
            for sink in sinks:
                self._notify_failure(sink, Failure(FailureKind.SHUTTING_DOWN, "The server is shutting down."))
        self._flush_out()
        self._healthy = False
        self._down = Failure(FailureKind.SHUTTING_DOWN, "The engine client is closed.")
        self._fail_utilities(self._unavailable())
        if self._loop is not None and self._reader_fd is not None:
            self._loop.remove_reader(self._reader_fd)
            self._reader_fd = None
        self._close_sockets(linger=1000)

    def _close_sockets(self, linger: int) -> None:
        for sock in (self._input, self._output):
            if sock is not None:
                sock.close(linger=linger)
        self._input = self._output = None
        self._close_drain()
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    # ------------------------------------------------------------------ properties

    @property
    def healthy(self) -> bool:
        """Started, not closed, no engine dead, and at least one engine taking requests."""
        return self._healthy and len(self._engines_down) < len(self.engine_indices)

    @property
    def engines_down(self) -> list[int]:
        """Engines skipped by routing now (data parallel: the others still serve)."""
        return sorted(self._engines_down)

    @property
    def engine_infos(self) -> list[EngineInfo]:
        return [self._infos[i] for i in self.engine_indices if i in self._infos]

    @property
    def max_model_len(self) -> int:
        """The smallest `max_model_len` over the engines (0 before start)."""
        return self._max_model_len

    @property
    def vllm_version(self) -> str:
        infos = self.engine_infos
        return infos[0].vllm_version if infos else ""

    @property
    def num_in_flight(self) -> int:
        return len(self._sinks)

    @property
    def scheduler_stats(self) -> dict[int, dict]:
        """Latest `scheduler_stats` per engine index, as seen by this client.

        The engine sends its stats to one client per step, so each worker sees a
        sample; aggregate across workers for a full picture.
        """
        return dict(self._stats)

    @property
    def scheduler_stats_time(self) -> dict[int, float]:
        """Wall-clock time (time.time()) at which each engine's latest stats arrived."""
        return dict(self._stats_at)

    @property
    def scheduler_stats_engine_time(self) -> dict[int, float]:
        """The engine's own timestamp (`EngineCoreOutputs.timestamp`, its monotonic clock) of the
        batch that carried each engine's latest stats here.

        This, not the receipt time, orders one engine's samples across workers: the engine sends
        each step's stats to one worker, and a worker that reads a batch a few milliseconds late
        would stamp an older state with a later receipt time. When the engine then goes idle it
        sends nothing more, so "latest by receipt" could report a stale state for good (running
        requests that were aborted long ago)."""
        return dict(self._stats_engine_at)

    def in_flight_by_engine(self) -> dict[int, int]:
        return dict(self._in_flight)

    # ------------------------------------------------------------------ requests

    def add_request(self, req: EngineRequest, sink: OutputSink) -> None:
        """Validate, route and queue for sending (with the other requests of this loop
        iteration, see `_flush_out`). Outputs then go to `sink` until it finishes.

        Raises InvalidEngineRequest (nothing sent) or EngineDeadError (no engine takes
        requests). An engine whose socket turns out to be gone when the request is sent is
        taken out of routing and the request goes to a live engine, or its sink fails.
        """
        if not self.healthy:
            raise self._unavailable()
        req.client_index = self.client_index
        if req.data_parallel_rank is not None and req.data_parallel_rank not in self._in_flight:
            raise InvalidEngineRequest(
                f"data_parallel_rank {req.data_parallel_rank} is out of range "
                f"{_rank_range(self.engine_indices)}.", "data_parallel_rank")
        validate_engine_request(
            req,
            max_model_len=self._max_model_len,
            vocab_size=self.vocab_size,
            num_clients=self.client_index + 1,
            max_logprobs=self.max_logprobs,
        )
        rid = req.request_id
        if rid in self._sinks:
            # A duplicate in-flight id kills the engine.
            raise InvalidEngineRequest(f"request id {rid!r} is already in flight", "request_id")
        engine = self._route(req)
        try:
            payload = encode_add(req, self._layout)
        except (TypeError, ValueError, OverflowError) as e:
            raise InvalidEngineRequest(f"request cannot be encoded: {e}", None) from None
        self._track(rid, sink, engine)
        self._unsent[rid] = (payload, req)
        self._schedule_flush()

    def _track(self, rid: str, sink: OutputSink, engine: int) -> None:
        """`rid` is in flight on `engine`: its outputs go to `sink`."""
        self._sinks[rid] = sink
        self._owner[rid] = engine
        self._in_flight[engine] += 1

    def _untrack(self, rid: str) -> tuple[int | None, OutputSink | None]:
        """Forget `rid` (its engine and sink, None for what it no longer had)."""
        sink = self._sinks.pop(rid, None)
        engine = self._owner.pop(rid, None)
        if engine is not None:
            self._in_flight[engine] -= 1
        return engine, sink

    def _route(self, req: EngineRequest) -> int:
        indices = self.engine_indices
        if req.data_parallel_rank is not None:
            return req.data_parallel_rank
        if self._engines_down:
            indices = [e for e in indices if e not in self._engines_down]
        n = len(indices)
        if n == 1:
            return indices[0]
        best, best_score = indices[0], None
        start = self._rr
        for k in range(n):
            e = indices[(start + k) % n]
            score = self._in_flight[e]
            stats = self._stats.get(e)
            if stats:
                score += (stats.get("num_running_reqs") or 0) + (stats.get("num_waiting_reqs") or 0)
            if best_score is None or score < best_score:
                best, best_score = e, score
        # Rotate the tie-break so equal engines share the load.
        self._rr = (start + 1) % n
        return best

    def _send(self, engine: int, kind: bytes, payload: bytes, aux: list | None = None) -> None:
        sock = self._input
        if sock is None:
            raise self._unavailable()
        # Frame by frame with int flags: pyzmq's send_multipart combines its flag enums per
        # frame, ~10 µs per message in enum arithmetic.
        send = sock.send
        try:
            send(self._identities[engine], _MORE)  # (the ROUTER refuses an unknown peer here)
            send(kind, _MORE)
            if not aux:
                send(payload, _LAST)
                return
            send(payload, _MORE, copy=False)
            for frame in aux[:-1]:
                send(frame, _MORE, copy=False)
            send(aux[-1], _LAST, copy=False)
        except zmq.ZMQError as e:
            if e.errno == zmq.EHOSTUNREACH:
                raise EngineDeadError(f"engine {engine} is not connected") from None
            raise EngineDeadError(f"cannot send to engine {engine}: {e}") from None

    def in_flight_sinks(self) -> list[tuple[str, OutputSink]]:
        """Every request in flight (engine id, sink): for an operator's "abort everything"."""
        return list(self._sinks.items())

    def abort(self, request_ids: Iterable[str]) -> None:
        """Forget these requests now (no more callbacks); tell the engines soon.

        Aborts are batched: one ABORT message per engine per event-loop iteration.
        The engine sends nothing back for them.
        """
        queued = False
        for rid in request_ids:
            engine, _ = self._untrack(rid)
            if engine is None:
                continue
            if self._unsent.pop(rid, None) is not None:
                continue  # never sent: nothing to abort
            self._queue_abort(engine, rid)
            queued = True
        if queued:
            self._schedule_flush()

    def _queue_abort(self, engine: int, rid: str) -> None:
        self._pending_aborts.setdefault(engine, []).append(rid)
        recent = self._recent_aborts
        recent.add(rid)
        if len(recent) >= _RECENT_ABORTS:
            self._old_aborts = recent
            self._recent_aborts = set()

    def _schedule_flush(self) -> None:
        if not self._out_scheduled and self._loop is not None and not self._loop.is_closed():
            self._out_scheduled = True
            self._loop.call_soon(self._flush_out)

    def _flush_out(self) -> None:
        """What the engines are owed: the new requests, then the aborts. Called once per loop
        iteration that made any (and before a drain of the outputs), so the requests that
        arrive together go out together: a send that finds ZMQ's I/O thread asleep wakes it,
        which costs this thread ~30 µs on these machines against ~3 µs for each send right
        after it (`bench/zmq_send.py`)."""
        self._out_scheduled = False
        if self._unsent:
            self._send_unsent()
        if self._pending_aborts:
            self._flush_aborts()

    def _send_unsent(self) -> None:
        unsent, self._unsent = self._unsent, {}
        for rid, (payload, req) in unsent.items():
            while (engine := self._owner.get(rid)) is not None:
                try:
                    self._send(engine, REQUEST_ADD, payload, req.aux_frames)
                    break
                except EngineDeadError as e:
                    # Its socket is gone (or this client closed): the requests not sent to it
                    # yet go to a live engine, or fail.
                    self._lost_engine(engine, e, unsent)
                except Exception as e:  # noqa: BLE001 - this one fails, the others still go
                    log.exception("could not send request %s", rid)
                    _, sink = self._untrack(rid)
                    if sink is not None:
                        self._notify_failure(sink, Failure(FailureKind.INTERNAL, f"The request could not be sent: {e}"))
                    break

    def _lost_engine(self, engine: int, error: EngineDeadError, unsent: dict) -> None:
        """`engine` refused a send: take it out of routing (until it is heard from again, e.g.
        answering the watchdog's probe; several engines only), move this flush's requests
        for it that were not sent to a live engine (not those pinned to it), fail the rest."""
        moving = []
        for rid, (_, req) in unsent.items():
            if self._owner.get(rid) == engine and rid in self._sinks:
                moving.append((rid, req, self._untrack(rid)[1]))
        failure = error.failure
        reroute = len(self.engine_indices) > 1 and self._input is not None
        if reroute:
            self._engine_down(engine, failure)  # (what it ran fails; these were never sent)
            if not self.healthy:  # that was the last engine
                failure = self._unavailable().failure
        for rid, req, sink in moving:
            if reroute and req.data_parallel_rank is None and self.healthy:
                self._track(rid, sink, self._route(req))
            else:
                self._notify_failure(sink, failure)

    def _flush_aborts(self) -> None:
        pending, self._pending_aborts = self._pending_aborts, {}
        if not self._healthy and not self._closed:
            # Dead engines (mark_dead) have nothing to abort. One engine down does not come
            # here: the others' aborts must flow, or their requests run to max_tokens.
            return
        for engine, ids in pending.items():
            try:
                self._send(engine, REQUEST_ABORT, encode_abort(ids))
            except EngineDeadError as e:
                log.warning("could not abort %d request(s) on engine %d: %s", len(ids), engine, e)

    # ------------------------------------------------------------------ utility calls

    async def call_utility(
        self, method: str, *args: Any, engine_index: int | None = None, timeout: float = 30
    ) -> Any:
        """Run `EngineCore.<method>(*args)` in one engine (the first by default)."""
        if not self._healthy:
            raise self._unavailable()
        engine = self.engine_indices[0] if engine_index is None else engine_index
        if engine not in self._identities:
            raise ValueError(f"unknown engine index {engine}")
        assert self._loop is not None
        call_id = self._next_call_id
        self._next_call_id = (call_id + 1) & (2**64 - 1)
        fut = self._loop.create_future()
        self._utility[call_id] = fut
        try:
            self._send(engine, REQUEST_UTILITY,
                       encode_utility(self.client_index, call_id, method, args))
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._utility.pop(call_id, None)

    def _resolve_utility(self, utility: tuple[int, str | None, Any]) -> None:
        call_id, failure, result = utility
        fut = self._utility.pop(call_id, None)
        if fut is None or fut.done():
            if failure is not None:
                log.warning("utility call %s failed after its caller left: %s", call_id, failure)
            return
        if failure is not None:
            fut.set_exception(UtilityError(failure))
        else:
            fut.set_result(result)

    def _fail_utilities(self, exc: Exception) -> None:
        futures, self._utility = self._utility, {}
        for fut in futures.values():
            if not fut.done():
                fut.set_exception(exc)

    # ------------------------------------------------------------------ death

    def _unavailable(self) -> EngineDeadError:
        down = self._down
        if down is None and self._engines_down:
            down = next(reversed(self._engines_down.values()))  # the latest engine to go
        down = down or Failure(FailureKind.ENGINE_DEAD, "The engine is not available.")
        return EngineDeadError(down.message, down.kind)

    def mark_dead(self, message: str) -> None:
        """The engine is gone: fail every in-flight request and report unhealthy."""
        if not self._healthy and not self._sinks and not self._utility:
            if self._down is None:
                self._down = Failure(FailureKind.ENGINE_DEAD, message)
            return
        log.error("engine marked dead: %s", message)
        self._healthy = False
        failure = self._down = Failure(FailureKind.ENGINE_DEAD, message)
        sinks, self._sinks = self._sinks, {}
        self._owner.clear()
        self._pending_aborts.clear()
        for e in self._in_flight:
            self._in_flight[e] = 0
        for sink in sinks.values():
            self._notify_failure(sink, failure)
        self._fail_utilities(self._unavailable())

    # ------------------------------------------------------------------ hang detection

    def _arm_watchdog(self) -> None:
        assert self.engine_timeout and self._loop is not None
        interval = min(1.0, self.engine_timeout / 4)
        self._watchdog_timer = self._loop.call_later(interval, self._watchdog)

    def _watchdog(self) -> None:
        """The request deadline for an engine that stops answering.

        An engine must be heard from: outputs, stats or a utility reply. Silence alone is not
        proof (an idle engine sends nothing, and a worker whose requests all wait in the
        engine's queue gets no outputs while other workers' requests run), so after half the
        timeout of silence a liveness probe goes out (`is_sleeping`, which EngineCore answers
        between steps; one small message per half-timeout while idle). If nothing at all
        arrives within `engine_timeout`, the engine is stuck: its requests here fail with a
        clear error (503 to the client, an error event mid-stream) and /health turns 503 until
        the engine is heard from again.
        """
        self._watchdog_timer = None
        if self._closed or not self._started:
            return
        timeout = self.engine_timeout
        assert timeout
        now = time.monotonic()
        for engine in self.engine_indices:
            silent = now - self._last_heard[engine]
            sent = self._probe_sent.get(engine)
            down = engine in self._engines_down
            if silent >= timeout and sent is not None and not down:
                self._engine_stalled(engine, silent)
            elif silent >= timeout / 2 and (sent is None or now - sent >= timeout / 2) and self._healthy:
                # One probe per half-timeout of silence (`_heard_from` clears it), also to an
                # engine that is down, so that it is taken back as soon as it answers.
                self._probe_sent[engine] = now
                try:
                    self._send(engine, REQUEST_UTILITY,
                               encode_utility(self.client_index, self._next_call_id, _PROBE_METHOD, ()))
                    self._next_call_id = (self._next_call_id + 1) & (2**64 - 1)
                except EngineDeadError as e:
                    (log.debug if down else log.warning)("liveness probe to engine %d failed: %s", engine, e)
        self._arm_watchdog()

    def _engine_stalled(self, engine: int, silent: float) -> None:
        message = (
            f"The engine did not answer within the request deadline ({silent:.0f}s without "
            f"any output or reply, limit {self.engine_timeout:g}s); it is treated as dead."
        )
        log.error("engine %d stalled: %s", engine, message)
        self._engine_down(engine, Failure(FailureKind.ENGINE_STALLED, message))

    def _engine_down(self, engine: int, failure: Failure) -> None:
        """Take one engine out of routing and fail the requests it holds; the others serve on
        (the client is unhealthy only when every engine is down)."""
        if engine not in self._engines_down:
            log.error("engine %d is down: %s", engine, failure.message)
        self._engines_down[engine] = failure
        ids = [rid for rid, owner in self._owner.items() if owner == engine]
        sinks = [self._sinks.pop(rid) for rid in ids if rid in self._sinks]
        for rid in ids:
            self._owner.pop(rid, None)
            # Remembered as aborted: should the engine wake up, their outputs are dropped
            # quietly and the requests are aborted there (see `_orphan`).
        self._in_flight[engine] = 0
        for sink in sinks:
            self._notify_failure(sink, failure)

    def _heard_from(self, engine: int) -> None:
        self._last_heard[engine] = time.monotonic()
        self._probe_sent.pop(engine, None)
        if self._engines_down.pop(engine, None) is not None:
            log.warning("engine %d answers again: serving", engine)

    @staticmethod
    def _notify_failure(sink: OutputSink, failure: Failure) -> None:
        try:
            sink.on_failure(failure)
        except Exception:
            log.exception("output sink failed in on_failure")

    # ------------------------------------------------------------------ output loop

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled and self._loop is not None:
            self._drain_scheduled = True
            self._loop.call_soon(self._scheduled_drain)

    def _scheduled_drain(self) -> None:
        self._drain_scheduled = False
        self._on_readable()

    def _on_readable(self) -> None:
        if self._out_scheduled:
            self._flush_out()  # requests made this iteration go out before a drain's work
        sock = self._output
        if sock is None:
            self._close_drain()
            return
        hooks = self.drain_hooks
        if hooks is None:
            self._drain(sock)
            return
        # A drain cut short by its time slice (a backlog) stays open across the loop iterations
        # that finish it, up to _DRAIN_HOLD_SECONDS: new requests are accepted in between, and
        # a stream's steps of the whole backlog still go out in one write.
        if self._drain_opened is None:
            hooks[0]()
            self._drain_opened = time.monotonic()
        drained = True
        try:
            drained = self._drain(sock)
        finally:
            if drained or time.monotonic() - self._drain_opened > _DRAIN_HOLD_SECONDS:
                self._drain_opened = None
                hooks[1]()

    def _close_drain(self) -> None:
        """End a drain left open by a time slice (the socket closed before it finished)."""
        if self._drain_opened is not None and self.drain_hooks is not None:
            self._drain_opened = None
            self.drain_hooks[1]()

    def _drain(self, sock: zmq.Socket) -> bool:
        """Handle queued output messages; False when the time slice or budget ran out first
        (another drain is scheduled).

        Every message waiting on the socket is first taken off it (`_take`); they are then
        handled in order for up to one time slice. The first message is delivered as it is
        handled. When more are queued behind it (the engine steps faster than this worker
        streams), the plain token steps of each stream are gathered over the rest of the drain
        and delivered once per stream at its end: the detokenizer, parsers and SSE framing run
        once per stream per drain instead of once per step, so a worker that falls behind
        catches up instead of falling further behind, and a new stream's first token waits for
        one pass over the backlog, not for every step before it to be streamed (vLLM's output
        collector merges a slow consumer's deltas the same way). Anything else for a stream
        (its finish, logprobs, an error) is delivered in order, after the steps gathered
        before it."""
        received = self._received
        drained = self._take(sock, received)
        deadline = time.monotonic() + _DRAIN_SECONDS
        try:
            for i in range(_DRAIN_BUDGET):
                if not received:
                    break
                frames = received.popleft()
                if i == 1:
                    self._coalesce = {}
                try:
                    self._handle_message(frames)
                except Exception:  # never let one batch stop the reader
                    log.exception("failed to process an engine output batch")
                if self._output is None:  # closed meanwhile: what is left has no reader
                    received.clear()
                    return True
                if time.monotonic() > deadline:
                    break
        finally:
            gathered, self._coalesce = self._coalesce, None
            if gathered:
                self._deliver_gathered(gathered)
        if drained and not received:
            return True
        # Messages left (taken or still on the socket): the FD will not fire for them, so come
        # back on the next loop iteration.
        self._schedule_drain()
        return False

    @staticmethod
    def _take(sock: zmq.Socket, received: deque) -> bool:
        """Move every message waiting on the output socket into `received`, each frame copied
        into its own bytes; True when the socket is empty (its FD re-armed).

        A message left on the socket keeps alive the receive buffer that ZMQ decoded it into
        (shared by the messages of one read), so a backlog of small step messages costs
        several times its size there. Against a zero-work engine (workers 1-3 s behind it) a
        worker's C heap in use grew by ~200 MiB with the backlog left on the socket, by ~40
        MiB with it taken off at once (`bench/run.py --workload fbound0`, glibc mallinfo2).
        """
        recv = sock.recv_multipart
        events = sock.getsockopt
        append = received.append
        for _ in range(_TAKE_BUDGET):
            try:
                # (ZMQ_EVENTS says whether a message waits, and re-arms the FD like a failed
                # receive would, without building a zmq.Again: the FD also fires when nothing
                # came, e.g. after requests went out.)
                if not events(zmq.EVENTS) & zmq.POLLIN:
                    return True
                append(recv(zmq.NOBLOCK))
            except zmq.Again:
                return True
            except zmq.ZMQError as e:
                log.error("output socket error: %s", e)
                return True
        return False

    def _deliver_gathered(self, gathered: dict[str, list]) -> None:
        """Each stream's token steps gathered by a drain, as one output (`_drain`): what
        `_deliver_steps` does for one stream, for all of them."""
        sinks = self._sinks
        clock = OutputClock.now, OutputClock.last, OutputClock.steps
        try:
            for rid, entry in gathered.items():
                sink = sinks.get(rid)
                if sink is None:  # ended meanwhile (aborted here, its engine down)
                    continue
                ids, OutputClock.steps, OutputClock.now, OutputClock.last = entry
                try:
                    sink.on_tokens(ids)
                except Exception as e:
                    self._tokens_failed(rid, sink, ids, e)
        finally:
            OutputClock.now, OutputClock.last, OutputClock.steps = clock

    def _deliver_steps(self, rid: str, sink: OutputSink | None, entry: list) -> None:
        """One stream's gathered steps: [token ids, steps, first arrival, last arrival], with
        the OutputClock set to them for the delivery and put back after it."""
        if sink is None:  # ended meanwhile (aborted here, its engine down)
            return
        clock = OutputClock.now, OutputClock.last, OutputClock.steps
        ids, OutputClock.steps, OutputClock.now, OutputClock.last = entry
        try:
            self._give_tokens(rid, sink, ids)
        finally:
            OutputClock.now, OutputClock.last, OutputClock.steps = clock

    def _give_tokens(self, rid: str, sink: OutputSink, ids: list[int]) -> None:
        """A running output with nothing but new token ids (the per-token path)."""
        try:
            sink.on_tokens(ids)
        except Exception as e:
            self._tokens_failed(rid, sink, ids, e)

    def _tokens_failed(self, rid: str, sink: OutputSink, ids: list[int], exc: Exception) -> None:
        """`sink.on_tokens(ids)` raised: a sink without `on_tokens` (it is optional) gets the
        step as an output; any other error fails the request."""
        if isinstance(exc, AttributeError) and not hasattr(sink, "on_tokens"):
            try:
                sink.on_output(EngineOutput(rid, ids))
            except Exception as e:
                self._sink_failed(rid, sink, EngineOutput(rid, ids), e)
            return
        self._sink_failed(rid, sink, EngineOutput(rid, ids), exc)

    def _handle_message(self, frames: list) -> None:
        OutputClock.now = OutputClock.last = time.monotonic()
        try:
            self._handle_batch(frames)
        finally:
            OutputClock.now = OutputClock.last = 0.0

    def _handle_batch(self, frames: list) -> None:
        if len(frames) == 1 and is_engine_dead(frames):
            self.mark_dead("The engine died (ENGINE_CORE_DEAD).")
            return
        layout = self._layout
        try:
            batch, raw_outputs = decode_message(frames, layout)
        except ProtocolError as e:
            # Outputs of unknown requests are lost: they would hang forever.
            self.mark_dead(f"Undecodable message from the engine: {e}")
            return
        engine = batch.engine_index
        if engine in self._last_heard:
            self._heard_from(engine)
        if batch.scheduler_stats is not None:
            self._stats_engine_at[engine] = batch.timestamp  # first: the metrics tap reads it
            self._stats_at[engine] = time.time()
            self._stats[engine] = batch.scheduler_stats
        if batch.utility_output is not None:
            self._resolve_utility(batch.utility_output)
        sinks = self._sinks
        gathering = self._coalesce
        now = OutputClock.now
        plain_tail = layout.plain_tail
        error_index = layout.error_index
        for o in raw_outputs:
            # The common step, a running request's new token ids and nothing else (`is_plain`,
            # inlined): straight to its sink, without an EngineOutput.
            if type(o) is list and (len(o) == 2 or o[2:] == plain_tail or plain_running(o, error_index)):
                rid = o[0]
                ids = o[1]
                sink = sinks.get(rid)
                if sink is not None:
                    if gathering is not None:  # a backlog: delivered at the drain's end
                        entry = gathering.get(rid)
                        if entry is None:
                            gathering[rid] = [ids, 1, now, now]
                        else:
                            entry[0] += ids
                            entry[1] += 1
                            entry[3] = now
                        continue
                    try:  # (_give_tokens, inlined: once per stream per step)
                        sink.on_tokens(ids)
                    except Exception as e:
                        self._tokens_failed(rid, sink, ids, e)
                    continue
                out = EngineOutput(rid, ids)
            else:
                try:
                    out = decode_output(o, frames, layout)
                except ProtocolError as e:
                    self.mark_dead(f"Undecodable message from the engine: {e}")
                    return
            rid = out.request_id
            if gathering and rid in gathering:  # its steps gathered so far go first
                self._deliver_steps(rid, sinks.get(rid), gathering.pop(rid))
            sink = sinks.get(rid)
            if sink is None:
                self._orphan(engine, out)
                continue
            if out.finish_reason is not None:
                del sinks[rid]
                owner = self._owner.pop(rid, None)
                if owner is not None:
                    self._in_flight[owner] -= 1
            if out.mm_cache_miss_hashes is not None and self.on_mm_cache_miss is not None:
                self.on_mm_cache_miss(out.mm_cache_miss_hashes)
            try:
                sink.on_output(out)
            except Exception as e:
                self._sink_failed(rid, sink, out, e)

    def _orphan(self, engine: int, out: EngineOutput) -> None:
        """An output nobody here waits for: aborted just now, or left by a predecessor."""
        rid = out.request_id
        if out.finish_reason is not None or rid in self._recent_aborts or rid in self._old_aborts:
            return
        if engine not in self._identities:
            log.warning("output from unknown engine %d for request %s", engine, rid)
            return
        log.info("aborting orphaned request %s on engine %d", rid, engine)
        self._queue_abort(engine, rid)
        self._schedule_flush()

    def _sink_failed(self, rid: str, sink: OutputSink, out: EngineOutput, exc: Exception) -> None:
        log.error("output sink of request %s failed; aborting it", rid, exc_info=exc)
        if out.finish_reason is None:
            self.abort((rid,))
        # The layer above ends its request with an error instead of hanging, even when the
        # output it failed on was the final one.
        self._notify_failure(sink, Failure(FailureKind.INTERNAL, f"internal error: {exc}"))
