"""One worker's engine client slot: ADD/ABORT/UTILITY out, outputs pushed to sinks.

Each worker process owns one vLLM client slot (`client_index`): a ROUTER it binds for requests
(the engines' DEALERs connect to it) and a PULL it binds for outputs (the engines' PUSHes
connect to it). The engine sends every output of a request to the slot named by the request's
`client_index`, so outputs never need a hop.

`EngineClient` is the face the server, router, gRPC service and supervisor see; the work is
done by its parts, each in its own module:

- `connection.Connection`: the two sockets, the engines' ready responses, sending;
- `inflight.InFlight`: the requests in flight (sink and engine of each);
- `routing.Router`: which engine takes a new request (`routing.EngineStats`: their load reports);
- `sending.Outbox`: new requests and aborts, sent together once per loop iteration
  (`aborts.Aborts`: the aborts owed and the ids aborted lately);
- `utility.UtilityCalls`: `EngineCore.<method>(*args)` calls and their replies;
- `health.Health`: engines down, the engine dead, the engine-hang watchdog;
- `migration.Migrations`: the requests of an engine that went down, moved to a live one;
- `outputs.OutputReader`: the output socket drained on the event loop (the hot path);
- `delivery.Delivery`: the one way an output reaches its request's sink, stamped by the
  client's `delivery.OutputClock` (`clock`: the sinks read it);
- `disaggregation.Disaggregation`: with engine roles, a request's prefill on a prefill engine
  and its decode on a decode engine.

What the client reports (scheduler stats, iterations, migrations) goes to the
`observer.EngineObserver` it is built with (the worker's metrics), and nowhere else.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable

from .aborts import Aborts
from .connection import Connection
from .delivery import Delivery, OutputClock
from .disaggregation import Disaggregation, PrefillSink, Roles, client_sink
from .health import Health
from .inflight import InFlight, fail_sink
from .migration import Migrations
from .observer import EngineObserver
from .outputs import OutputReader
from .routing import EngineStats, Router
from .sending import Outbox
from .types import (
    EngineDeadError,
    EngineInfo,
    EngineRequest,
    Failure,
    FailureKind,
    InvalidEngineRequest,
    OutputSink,
)
from .utility import UtilityCalls, UtilityError
from .validate import validate_engine_request
from .wire import encode_add

__all__ = ["EngineClient", "EngineObserver", "OutputClock", "UtilityError"]


class EngineClient:
    """ZMQ client of one or more EngineCores (data parallel) for one worker.

    `observer` hears what the client reports as it happens (see `observer.EngineObserver`);
    `clock` is this client's output clock, which the sinks it delivers to read.
    `prefill_engines` > 0: the first that many engines (by rank) prefill and the others decode
    (engine/disaggregation.py); prompts shorter than `prefill_min_prompt_tokens` go to a decode
    engine whole."""

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
        migration_limit: int = 0,
        migration_timeout: float = 30.0,
        observer: EngineObserver | None = None,
        prefill_engines: int = 0,
        prefill_min_prompt_tokens: int = 0,
    ):
        if not engine_indices:
            raise ValueError("engine_indices must name at least one engine")
        self.client_index = client_index
        self.input_address = input_address
        self.output_address = output_address
        self.engine_indices = list(engine_indices)
        self.vocab_size = vocab_size
        self.max_logprobs = max_logprobs
        # Engine-hang detection (see `Health._watchdog`): None or 0 disables it.
        self.engine_timeout = engine_timeout or None

        self._infos: dict[int, EngineInfo] = {}
        self._max_model_len = 0
        self.clock = OutputClock()

        indices = self.engine_indices
        self._inflight = InFlight(indices)
        self._connection = Connection(input_address=input_address, output_address=output_address,
                                      engine_indices=indices, unavailable=self._unavailable)
        self._utility = UtilityCalls(client_index, self._connection)
        self._aborts = Aborts(self._connection)
        # Requests of an engine that goes down continue on a live one (0 moves: they fail).
        self._migrations = Migrations(
            max(0, migration_limit), migration_timeout, self._inflight, self._live, self._resend,
            on_moved=observer.count_migration if observer is not None else None,
            on_unmoved=observer.count_migration_failure if observer is not None else None)
        self._health = Health(indices, self.engine_timeout, self._inflight, self._aborts, self._utility,
                              self._migrations)
        self._engine_stats = EngineStats()
        self._router = Router(indices, self._inflight, self._health.engines_down, self._engine_stats)
        self._outbox = Outbox(self._connection, self._inflight, self._router, self._health, self._aborts)
        self._delivery = Delivery(indices, self._inflight, self._outbox, self._aborts, self._health.mark_dead,
                                  self.clock, observer.observe_iteration if observer is not None else None)
        self._outputs = OutputReader(self._connection, self._outbox, self._delivery, self._health,
                                     self._utility, self._engine_stats, self.clock, observer)
        self.roles: Roles | None = None
        self._disaggregation: Disaggregation | None = None
        if prefill_engines:
            self.roles = self._router.roles = Roles.first_prefill(indices, prefill_engines)
            self._disaggregation = Disaggregation(self.roles, prefill_min_prompt_tokens, self._send_phase,
                                                  self._live, self._inflight.sinks, observer)

    # ------------------------------------------------------------------ lifecycle

    async def start(
        self, *, engine_infos: list[EngineInfo] | None = None, timeout: float = 600.0
    ) -> list[EngineInfo]:
        """Bind the sockets, wait for every engine's ready response, start reading.

        A restarted worker gets no ready response (the engines sent theirs once,
        to its predecessor): it passes the infos it was given and this waits only,
        briefly, for the engines' DEALERs to reconnect.
        """
        if self._health.started:
            raise RuntimeError("EngineClient.start() called twice")
        loop = asyncio.get_running_loop()
        self._outbox.loop = loop
        infos = await self._connection.open(engine_infos, timeout)
        for info in infos:
            self._infos[info.engine_index] = info
        self._max_model_len = min(i.max_model_len for i in infos)
        self._migrations.start(loop)
        self._health.start(loop)
        self._outputs.start(loop)
        return [self._infos[i] for i in self.engine_indices]

    def start_prefix_routing(self, engine_args: list[str], policy: str | None, weight: float,
                             host: str = "127.0.0.1"):
        """Route by where the KV cache is when it applies (engine/kv_subscriber.py): returns the
        running KV event subscriber (the caller closes it), or None when routing stays by load."""
        from .kv_subscriber import start_prefix_routing

        return start_prefix_routing(self._router, self.engine_indices, engine_args, policy, weight, host)

    async def close(self) -> None:
        """Abort what is still in flight, fail its sinks, close the sockets."""
        health = self._health
        if health.closed:
            return
        health.closed = True
        health.stop_watching()
        self._migrations.fail_all(Failure(FailureKind.SHUTTING_DOWN, "The server is shutting down."))
        sinks = self._inflight.sinks
        if health.started and sinks:
            ids, failing = list(sinks), list(sinks.values())
            self.abort(ids)
            for sink in failing:
                fail_sink(sink, Failure(FailureKind.SHUTTING_DOWN, "The server is shutting down."))
        self._outbox.flush()
        health.shut_down()
        self._utility.fail_all(health.unavailable())
        self._outputs.stop()
        self._connection.close(linger=1000)

    # ------------------------------------------------------------------ properties

    @property
    def healthy(self) -> bool:
        """Started, not closed, no engine dead, and at least one engine taking requests."""
        return self._health.healthy

    @property
    def engines_down(self) -> list[int]:
        """Engines skipped by routing now (data parallel: the others still serve)."""
        return sorted(self._health.engines_down)

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
        """Requests on an engine, or waiting for one (moved off an engine that went down)."""
        return len(self._inflight.sinks) + len(self._migrations.parked)

    @property
    def migration_limit(self) -> int:
        """How many times a request may move to another engine (0: never)."""
        return self._migrations.limit

    @property
    def scheduler_stats(self) -> dict[int, dict]:
        """Latest `scheduler_stats` per engine index, as seen by this client.

        The engine sends its stats to one client per step, so each worker sees a
        sample; aggregate across workers for a full picture.
        """
        return dict(self._engine_stats.latest)

    @property
    def scheduler_stats_time(self) -> dict[int, float]:
        """Wall-clock time (time.time()) at which each engine's latest stats arrived."""
        return dict(self._engine_stats.received_at)

    @property
    def scheduler_stats_engine_time(self) -> dict[int, float]:
        """The engine's own timestamp (`EngineCoreOutputs.timestamp`, its monotonic clock) of the
        batch that carried each engine's latest stats here.

        This, not the receipt time, orders one engine's samples across workers: the engine sends
        each step's stats to one worker, and a worker that reads a batch a few milliseconds late
        would stamp an older state with a later receipt time. When the engine then goes idle it
        sends nothing more, so "latest by receipt" could report a stale state for good (running
        requests that were aborted long ago)."""
        return dict(self._engine_stats.engine_time)

    @property
    def drain_hooks(self) -> tuple[Callable[[], None], Callable[[], None]] | None:
        """(begin, end), called around each drain of the output socket (one or more engine
        steps' outputs): the server gathers a stream's writes of one drain into one
        (vllm_pyfrontend.serving.sse)."""
        return self._outputs.drain_hooks

    @drain_hooks.setter
    def drain_hooks(self, hooks: tuple[Callable[[], None], Callable[[], None]] | None) -> None:
        self._outputs.drain_hooks = hooks

    @property
    def on_mm_cache_miss(self) -> Callable[[list[str]], None] | None:
        """Called with an output's mm_cache_miss_hashes (frontend/multimodal's sender cache)."""
        return self._delivery.on_mm_cache_miss

    @on_mm_cache_miss.setter
    def on_mm_cache_miss(self, callback: Callable[[list[str]], None] | None) -> None:
        self._delivery.on_mm_cache_miss = callback

    def in_flight_by_engine(self) -> dict[int, int]:
        return dict(self._inflight.count)

    # ------------------------------------------------------------------ requests

    def add_request(self, req: EngineRequest, sink: OutputSink) -> int | None:
        """Validate, route and queue for sending (with the other requests of this loop
        iteration, see `Outbox.flush`). Outputs then go to `sink` until it finishes.

        Returns the engine it goes to (None: it waits for one, every engine being down).
        Raises InvalidEngineRequest (nothing sent) or EngineDeadError (no engine takes
        requests). An engine whose socket turns out to be gone when the request is sent is
        taken out of routing and the request goes to a live engine, or its sink fails.
        """
        if not self._health.healthy:
            raise self._unavailable()
        req.client_index = self.client_index
        self._router.check_rank(req.data_parallel_rank)
        validate_engine_request(
            req,
            max_model_len=self._max_model_len,
            vocab_size=self.vocab_size,
            num_clients=self.client_index + 1,
            max_logprobs=self.max_logprobs,
        )
        rid = req.request_id
        if rid in self._inflight.sinks:
            # A duplicate in-flight id kills the engine.
            raise InvalidEngineRequest(f"request id {rid!r} is already in flight", "request_id")
        migrations = self._migrations
        if migrations.parked and rid in migrations.parked:
            raise InvalidEngineRequest(f"request id {rid!r} is already in flight", "request_id")
        if self._health.engines_down and not self._health.live():
            if not migrations.enabled:
                raise self._unavailable()
            # Every engine is down and requests wait for one (a restart): so does this one.
            try:
                encode_add(req, self._connection.layout)
            except (TypeError, ValueError, OverflowError) as e:
                raise InvalidEngineRequest(f"request cannot be encoded: {e}", None) from None
            migrations.park_new(req, sink, self._health.unavailable().failure)
            return None
        if self._disaggregation is not None:
            req, sink = self._disaggregation.split(req, sink)
        engine = self._router.route(req)
        try:
            payload = encode_add(req, self._connection.layout)
        except (TypeError, ValueError, OverflowError) as e:
            raise InvalidEngineRequest(f"request cannot be encoded: {e}", None) from None
        self._inflight.track(rid, sink, engine)
        if migrations.enabled:
            self._inflight.requests[rid] = req
        self._outbox.add(rid, payload, req)
        if type(sink) is PrefillSink:
            sink.engine = engine
        return engine

    def _live(self) -> list[int]:
        return self._health.live()

    def _resend(self, req: EngineRequest, sink: OutputSink, engine: int) -> int:
        """Track and queue a request moved off an engine (or one that waited for an engine, or
        a disaggregated request's next phase) on `engine` (-1: the router picks)."""
        if type(sink) is PrefillSink:  # a prefill phase moved: whole on a decode engine when no prefill engine is up
            req, sink = self._disaggregation.moving(req, sink)
        if engine < 0:
            engine = self._router.route(req)
        payload = encode_add(req, self._connection.layout)
        rid = req.request_id
        self._inflight.track(rid, sink, engine)
        if self._migrations.enabled:
            self._inflight.requests[rid] = req
        self._outbox.add(rid, payload, req)
        return engine

    def _send_phase(self, req: EngineRequest, sink: OutputSink) -> int:
        """Track and queue the next phase of a disaggregated request (engine/disaggregation.py)
        on the engine the router picks for it. Raises EngineDeadError when no engine takes it."""
        if not self._health.healthy:
            raise self._unavailable()
        if self._health.engines_down and not self._health.live():
            if not self._migrations.enabled:
                raise self._unavailable()
            self._migrations.park_new(req, sink, self._health.unavailable().failure)
            return -1
        return self._resend(req, sink, -1)

    def in_flight_sinks(self) -> list[tuple[str, OutputSink]]:
        """Every request in flight (request id, the sink its client gave): for an operator's
        "abort everything". (A disaggregated request's phase stands in for its client's sink in
        the table: the client's is named, so that ending it does not start another phase.)"""
        pairs = list(self._inflight.sinks.items()) + [(rid, p.sink) for rid, p in self._migrations.parked.items()]
        if self._disaggregation is not None:
            pairs = [(rid, client_sink(sink)) for rid, sink in pairs]
        return pairs

    def abort(self, request_ids: Iterable[str]) -> None:
        """Forget these requests now (no more callbacks); tell the engines soon.

        Aborts are batched: one ABORT message per engine per event-loop iteration.
        The engine sends nothing back for them.
        """
        self._outbox.abort(request_ids)

    # ------------------------------------------------------------------ utility calls

    async def call_utility(
        self, method: str, *args: Any, engine_index: int | None = None, timeout: float = 30
    ) -> Any:
        """Run `EngineCore.<method>(*args)` in one engine (the first by default)."""
        if not self._health.up:
            raise self._unavailable()
        engine = self.engine_indices[0] if engine_index is None else engine_index
        if engine not in self._connection.identities:
            raise ValueError(f"unknown engine index {engine}")
        return await self._utility.call(engine, method, args, timeout)

    # ------------------------------------------------------------------ death

    def _unavailable(self) -> EngineDeadError:
        return self._health.unavailable()

    def mark_dead(self, message: str) -> None:
        """The engine is gone: fail every in-flight request and report unhealthy."""
        self._health.mark_dead(message)

    def engine_restarting(self) -> None:
        """The supervisor restarts the engine (--on-engine-death restart). With migration on,
        the requests in flight and new ones wait for it (up to the migration timeout) and then
        continue; without, it is `mark_dead`."""
        self._health.engine_restarting()
        self._outbox.schedule()
