"""What the engines are owed: new requests and aborts, sent together once per loop iteration.

A send that finds ZMQ's I/O thread asleep wakes it, which costs this thread ~30 µs on these
machines against ~3 µs for each send right after it (`bench/zmq_send.py`). So adding and
aborting a request only queue, and `Outbox.flush` sends what the loop iteration queued when it
ends (and before a drain of the outputs): the new requests in order, then one ABORT message per
engine. An engine whose socket turns out to be gone is taken out of routing, and the requests
of the flush that were meant for it go to a live engine.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Iterable

from .aborts import Aborts
from .connection import Connection
from .health import Health
from .inflight import InFlight, fail_sink
from .routing import Router
from .types import EngineDeadError, EngineRequest, Failure, FailureKind
from .wire import REQUEST_ADD

log = logging.getLogger(__name__)


class Outbox:
    """New requests not sent yet (in order) and the aborts of `aborts`, flushed together;
    `scheduled` while a flush is due at the end of this loop iteration."""

    def __init__(self, connection: Connection, inflight: InFlight, router: Router, health: Health,
                 aborts: Aborts):
        self._connection = connection
        self._inflight = inflight
        self._router = router
        self._health = health
        self._aborts = aborts
        # rid -> (payload, request), in the order they were added.
        self._unsent: dict[str, tuple[bytes, EngineRequest]] = {}
        self.scheduled = False
        self.loop: asyncio.AbstractEventLoop | None = None

    def add(self, rid: str, payload: bytes, req: EngineRequest) -> None:
        """Queue a request already tracked in flight (its engine is its owner there)."""
        self._unsent[rid] = (payload, req)
        self.schedule()

    def abort(self, request_ids: Iterable[str]) -> None:
        """Forget these requests now (no more callbacks) and queue their aborts; a request
        not sent yet is only taken out of the queue."""
        queued = False
        parked = self._health.migrations.parked
        for rid in request_ids:
            engine, _ = self._inflight.untrack(rid)
            if engine is None:
                if parked:
                    parked.pop(rid, None)  # waiting for an engine: never sent
                continue
            if self._unsent.pop(rid, None) is not None:
                continue  # never sent: nothing to abort
            self._aborts.queue(engine, rid)
            queued = True
        if queued:
            self.schedule()

    def schedule(self) -> None:
        """Flush at the end of this loop iteration."""
        if not self.scheduled and self.loop is not None and not self.loop.is_closed():
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """The new requests, then the aborts. Called once per loop iteration that queued any
        (and before a drain of the outputs), so the requests that arrive together go out
        together."""
        self.scheduled = False
        if self._unsent:
            self._send_unsent()
        if self._aborts.pending:
            # Dead engines (mark_dead) have nothing to abort. One engine down does not stop
            # them: the others' aborts must flow, or their requests run to max_tokens.
            health = self._health
            self._aborts.flush(send=health.up or health.closed)

    def _send_unsent(self) -> None:
        unsent, self._unsent = self._unsent, {}
        owner = self._inflight.owner
        for rid, (payload, req) in unsent.items():
            while (engine := owner.get(rid)) is not None:
                try:
                    self._connection.send(engine, REQUEST_ADD, payload, req.aux_frames)
                    break
                except EngineDeadError as e:
                    # Its socket is gone (or this client closed): the requests not sent to it
                    # yet go to a live engine, or fail.
                    self._lost_engine(engine, e, unsent)
                except Exception as e:  # noqa: BLE001 - this one fails, the others still go
                    log.exception("could not send request %s", rid)
                    _, sink = self._inflight.untrack(rid)
                    if sink is not None:
                        fail_sink(sink, Failure(FailureKind.INTERNAL, f"The request could not be sent: {e}"))
                    break

    def _lost_engine(self, engine: int, error: EngineDeadError, unsent: dict) -> None:
        """`engine` refused a send: take it out of routing (until it is heard from again, e.g.
        answering the watchdog's probe; several engines only), move this flush's requests
        for it that were not sent to a live engine (not those pinned to it), fail the rest."""
        inflight, health = self._inflight, self._health
        moving = []
        for rid, (_, req) in unsent.items():
            if inflight.owner.get(rid) == engine and rid in inflight.sinks:
                moving.append((rid, req, inflight.untrack(rid)[1]))
        failure = error.failure
        migrations = health.migrations
        reroute = ((len(self._router.engine_indices) > 1 or migrations.enabled)
                   and self._connection.input is not None)
        if reroute:
            # (what it ran moves to a live engine or fails; these were never sent)
            health.engine_down(engine, failure)
            if not health.healthy:  # that was the last engine
                failure = health.unavailable().failure
        for rid, req, sink in moving:
            if reroute and req.data_parallel_rank is None and health.live():
                inflight.track(rid, sink, self._router.route(req))
                if migrations.enabled:
                    inflight.requests[rid] = req
            elif reroute and migrations.enabled:
                migrations.park_new(req, sink, failure)  # waits for a live engine
            else:
                fail_sink(sink, failure)
