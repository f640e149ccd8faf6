"""Reading the output socket: every queued message drained, decoded, handed to delivery.

The output path is the hot path. It does not use asyncio sockets: the PULL socket's file
descriptor is registered with `loop.add_reader`, and the callback drains every queued message
with non-blocking receives, decodes each batch and delivers its outputs synchronously
(`Delivery.deliver`). No task, future or queue per token.

ZMQ's FD is edge-triggered: it signals "something changed", not "a message is waiting", and it
is only re-armed once a receive has returned EAGAIN. So the reader must drain until EAGAIN every
time, and when it stops early (to let the loop breathe) it must reschedule itself rather than
wait for the FD. Only this callback touches the PULL socket, so no other call can swallow a
wake-up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Callable

import zmq

from .connection import Connection
from .delivery import Delivery, OutputClock
from .health import Health
from .observer import EngineObserver
from .routing import EngineStats
from .sending import Outbox
from .utility import UtilityCalls
from .wire import ProtocolError, decode_message, is_engine_dead

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
# How long the writes of a drain that spans several slices may be held back (see `on_readable`).
_DRAIN_HOLD_SECONDS = 0.05


class OutputReader:
    """Reads `connection.output` on the event loop and hands each message's outputs to
    `delivery`, with `clock` set to the message's arrival; before that, the message's envelope:
    the engine is heard from (`health`), its scheduler stats are stored (`stats`) and reported
    (`observer`, when given), a utility reply resolved (`utility`).

    `drain_hooks` (begin, end) are called around each drain of the socket (one or more engine
    steps' outputs): the server gathers a stream's writes of one drain into one
    (vllm_pyfrontend.serving.sse)."""

    def __init__(self, connection: Connection, outbox: Outbox, delivery: Delivery, health: Health,
                 utility: UtilityCalls, stats: EngineStats, clock: OutputClock,
                 observer: EngineObserver | None = None):
        self._connection = connection
        self._outbox = outbox
        self._delivery = delivery
        self._health = health
        self._utility = utility
        self._stats = stats
        self._clock = clock
        self._observer = observer
        self.drain_hooks: tuple[Callable[[], None], Callable[[], None]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd: int | None = None
        self._scheduled = False
        # While a drain reads a backlog: each running stream's new token ids of the messages
        # read so far, delivered once per stream at the end of the drain (see `drain`).
        self._gathering: dict[str, list] | None = None
        # Output messages taken off the socket and not handled yet (see `_take`).
        self._received: deque[list[bytes]] = deque()
        self._drain_opened: float | None = None  # when the open drain's begin hook ran

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._connection.output is not None
        self._loop = loop
        self._fd = self._connection.output.getsockopt(zmq.FD)
        loop.add_reader(self._fd, self.on_readable)
        # Outputs may already be queued (a restarted worker inherits orphans):
        # the edge-triggered FD would not announce them.
        self.schedule()

    def stop(self) -> None:
        """No more reading (the sockets are about to close); a drain left open is ended."""
        if self._loop is not None and self._fd is not None:
            self._loop.remove_reader(self._fd)
            self._fd = None
        self.close_drain()

    def schedule(self) -> None:
        if not self._scheduled and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._scheduled_drain)

    def _scheduled_drain(self) -> None:
        self._scheduled = False
        self.on_readable()

    def on_readable(self) -> None:
        if self._outbox.scheduled:
            self._outbox.flush()  # requests made this iteration go out before a drain's work
        sock = self._connection.output
        if sock is None:
            self.close_drain()
            return
        hooks = self.drain_hooks
        if hooks is None:
            self.drain(sock)
            return
        # A drain cut short by its time slice (a backlog) stays open across the loop iterations
        # that finish it, up to _DRAIN_HOLD_SECONDS: new requests are accepted in between, and
        # a stream's steps of the whole backlog still go out in one write.
        if self._drain_opened is None:
            hooks[0]()
            self._drain_opened = time.monotonic()
        drained = True
        try:
            drained = self.drain(sock)
        finally:
            if drained or time.monotonic() - self._drain_opened > _DRAIN_HOLD_SECONDS:
                self._drain_opened = None
                hooks[1]()

    def close_drain(self) -> None:
        """End a drain left open by a time slice (the socket closed before it finished)."""
        if self._drain_opened is not None and self.drain_hooks is not None:
            self._drain_opened = None
            self.drain_hooks[1]()

    def drain(self, sock: zmq.Socket) -> bool:
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
                    self._gathering = {}
                try:
                    self.handle_message(frames)
                except Exception:  # never let one batch stop the reader
                    log.exception("failed to process an engine output batch")
                if self._connection.output is None:  # closed meanwhile: what is left has no reader
                    received.clear()
                    return True
                if time.monotonic() > deadline:
                    break
        finally:
            gathered, self._gathering = self._gathering, None
            if gathered:
                self._delivery.deliver_gathered(gathered, self._connection.layout)
        if drained and not received:
            return True
        # Messages left (taken or still on the socket): the FD will not fire for them, so come
        # back on the next loop iteration.
        self.schedule()
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

    def handle_message(self, frames: list) -> None:
        """One output message, with the output clock set to its arrival (and, once decoded, to
        its engine timestamp)."""
        clock = self._clock
        clock.now = clock.last = time.monotonic()
        try:
            self._handle_batch(frames)
        finally:
            clock.now = clock.last = clock.engine = 0.0

    def _handle_batch(self, frames: list) -> None:
        health = self._health
        if len(frames) == 1 and is_engine_dead(frames):
            health.engine_core_dead()
            return
        layout = self._connection.layout
        try:
            batch, raw_outputs = decode_message(frames, layout)
        except ProtocolError as e:
            # Outputs of unknown requests are lost: they would hang forever.
            health.mark_dead(f"Undecodable message from the engine: {e}")
            return
        engine = batch.engine_index
        self._clock.engine = batch.timestamp
        if engine in health.last_heard:
            health.heard_from(engine)
        if batch.scheduler_stats is not None:
            stats = self._stats
            stats.engine_time[engine] = batch.timestamp
            stats.received_at[engine] = time.time()
            stats.latest[engine] = batch.scheduler_stats
            if self._observer is not None:
                try:
                    self._observer.record_scheduler_stats(engine, batch.scheduler_stats, batch.timestamp)
                except Exception:  # metrics never stop the output path
                    log.exception("scheduler stats metrics failed")
        if batch.utility_output is not None:
            self._utility.resolve(batch.utility_output)
        self._delivery.deliver(raw_outputs, frames, layout, engine, self._gathering)
