"""Whether the engines can take requests: engines down, the engine dead, and the watchdog.

Two levels. One engine can be down (it stalled, or its socket is gone): routing skips it and
the requests it holds fail, while the others serve on (data parallel); it is taken back as
soon as it is heard from. The engine can be dead (ENGINE_CORE_DEAD, garbage on the wire, the
supervisor's word): every request fails and the client stays unhealthy. The client is healthy
while it is started, not closed, not dead, and at least one engine is up.
"""

from __future__ import annotations

import asyncio
import logging
import time

from .aborts import Aborts
from .inflight import InFlight, fail_sink
from .migration import REASON_DEAD, REASON_RESTART, Migrations
from .types import EngineDeadError, Failure, FailureKind
from .utility import UtilityCalls

log = logging.getLogger(__name__)

# A cheap EngineCore method, answered between engine steps: the liveness probe.
_PROBE_METHOD = "is_sleeping"
# While requests wait for an engine to come back (engine/migration.py): how often the engines
# down are probed (a send to one that has not reconnected fails at once, costing nothing).
_RECOVERY_PROBE_S = 0.2


class Health:
    """The client's state (`started`, `closed`, `up`: started and not dead, `down`: why
    requests cannot be served now), the engines down (`engines_down`: engine -> why), and the
    engine-hang watchdog (`engine_timeout` seconds; None disables it)."""

    def __init__(self, engine_indices: list[int], engine_timeout: float | None, inflight: InFlight,
                 aborts: Aborts, utility: UtilityCalls, migrations: Migrations):
        self.engine_indices = engine_indices
        self.engine_timeout = engine_timeout
        self._inflight = inflight
        self._aborts = aborts
        self._utility = utility
        # Requests of an engine that goes down move to a live one (when enabled).
        self.migrations = migrations
        self._recovery: asyncio.TimerHandle | None = None
        self.started = False
        self.closed = False
        self.up = False
        self.down: Failure | None = Failure(FailureKind.ENGINE_DEAD, "The engine client is not started.")
        # Engines that cannot take requests now (stalled, or their socket gone), and why. The
        # client stays healthy while any engine is up: routing skips these.
        self.engines_down: dict[int, Failure] = {}
        # Watchdog: when each engine last sent anything; probes sent and not yet answered.
        self.last_heard = {i: time.monotonic() for i in engine_indices}
        self._probe_sent: dict[int, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def healthy(self) -> bool:
        """Up, and an engine takes requests now or requests wait for one to come back."""
        return self.up and (len(self.engines_down) < len(self.engine_indices) or self.migrations.waiting())

    def live(self) -> list[int]:
        """The engines that take requests now."""
        down = self.engines_down
        return [e for e in self.engine_indices if e not in down] if self.up else []

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """The engines answered: serving (and watching them, with a timeout)."""
        self._loop = loop
        self.started = True
        self.up = True
        self.down = None
        now = time.monotonic()
        for i in self.engine_indices:
            self.last_heard[i] = now
        if self.engine_timeout:
            self._arm_watchdog()

    def stop_watching(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._recovery is not None:
            self._recovery.cancel()
            self._recovery = None
        self.migrations.stop()

    def shut_down(self) -> None:
        """The client is closed: nothing is served any more."""
        self.up = False
        self.down = Failure(FailureKind.SHUTTING_DOWN, "The engine client is closed.")

    def unavailable(self) -> EngineDeadError:
        """The error for a request that cannot be served now."""
        down = self.down
        if down is None and self.engines_down:
            down = next(reversed(self.engines_down.values()))  # the latest engine to go
        down = down or Failure(FailureKind.ENGINE_DEAD, "The engine is not available.")
        return EngineDeadError(down.message, down.kind)

    # ------------------------------------------------------------------ engines down, dead

    def heard_from(self, engine: int) -> None:
        """Anything arrived from `engine` (outputs, stats, a reply): it is alive."""
        self.last_heard[engine] = time.monotonic()
        self._probe_sent.pop(engine, None)
        if self.engines_down.pop(engine, None) is not None:
            log.warning("engine %d answers again: serving", engine)
            self.migrations.waiting_until = 0.0  # (a restart is over: an engine is live)
            if self.migrations.parked:
                self.migrations.resume()

    def engine_down(self, engine: int, failure: Failure, reason: str | None = None) -> None:
        """Take one engine out of routing and move the requests it holds to a live engine, or
        fail them; the others serve on (the client is unhealthy only when every engine is down
        and no request waits for one)."""
        if engine not in self.engines_down:
            log.error("engine %d is down: %s", engine, failure.message)
        self.engines_down[engine] = failure
        # Its requests are forgotten here, not aborted: should the engine wake up, their outputs
        # are orphans, and those are aborted there (see `Delivery`).
        if self.migrations.enabled:
            failing = self.migrations.move_off(self._inflight.held_by(engine), failure, reason)
            self._recover()
        else:
            failing = self._inflight.drop_engine(engine)
        for sink in failing:
            fail_sink(sink, failure)

    def all_engines_down(self, failure: Failure, reason: str) -> None:
        """Every engine may be gone (ENGINE_CORE_DEAD, which does not say whose; a restart):
        every request moves, and waits for an engine that answers (`migrations`). The
        requests are also aborted where they ran, in case that engine lives on."""
        log.error("engines %s down: %s", self.engine_indices, failure.message)
        owner = self._inflight.owner
        for rid, engine in owner.items():
            self._aborts.queue(engine, rid)
        for engine in self.engine_indices:
            self.engines_down[engine] = failure
        self.migrations.expect_engine()
        failing = self.migrations.move_off(list(owner), failure, reason)
        for sink in failing:
            fail_sink(sink, failure)
        self._utility.fail_all(self.unavailable())
        self._recover()

    def engine_core_dead(self) -> None:
        """ENGINE_CORE_DEAD on the output socket: with migration, the requests wait for an
        engine that answers (another DP rank, or this one restarted); else the engine is dead."""
        message = "The engine died (ENGINE_CORE_DEAD)."
        if self.migrations.enabled and self.up:
            self.all_engines_down(Failure(FailureKind.ENGINE_DEAD, message), REASON_DEAD)
        else:
            self.mark_dead(message)

    def engine_restarting(self) -> None:
        """The supervisor restarts the engine (--on-engine-death restart): requests wait for it."""
        if self.migrations.enabled and self.up:
            self.all_engines_down(Failure(FailureKind.ENGINE_DEAD, "The engine is restarting."), REASON_RESTART)
        else:
            self.mark_dead("The engine died.")

    def _recover(self) -> None:
        """While requests wait for an engine: probe the engines down often, so that one is taken
        back (`heard_from`) as soon as it answers."""
        if self._recovery is not None or self._loop is None or self.closed:
            return
        self._recovery = self._loop.call_later(_RECOVERY_PROBE_S, self._probe_down)

    def _probe_down(self) -> None:
        self._recovery = None
        if self.closed or not self.up or not self.engines_down or not self.migrations.waiting():
            return
        for engine in list(self.engines_down):
            try:
                self._utility.post(engine, _PROBE_METHOD)
            except EngineDeadError:
                pass  # not (re)connected yet
        self._recover()

    def mark_dead(self, message: str) -> None:
        """The engine is gone: fail every in-flight request and utility call, report unhealthy."""
        if not self.up and not self._inflight.sinks and not self._utility.pending:
            if self.down is None:
                self.down = Failure(FailureKind.ENGINE_DEAD, message)
            return
        log.error("engine marked dead: %s", message)
        self.up = False
        failure = self.down = Failure(FailureKind.ENGINE_DEAD, message)
        self.migrations.fail_all(failure)
        sinks = self._inflight.drop_all()
        self._aborts.pending.clear()
        for sink in sinks:
            fail_sink(sink, failure)
        self._utility.fail_all(self.unavailable())

    # ------------------------------------------------------------------ hang detection

    def _arm_watchdog(self) -> None:
        assert self.engine_timeout and self._loop is not None
        interval = min(1.0, self.engine_timeout / 4)
        self._timer = self._loop.call_later(interval, self._watchdog)

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
        self._timer = None
        if self.closed or not self.started:
            return
        timeout = self.engine_timeout
        assert timeout
        now = time.monotonic()
        for engine in self.engine_indices:
            silent = now - self.last_heard[engine]
            sent = self._probe_sent.get(engine)
            down = engine in self.engines_down
            if silent >= timeout and sent is not None and not down:
                self._engine_stalled(engine, silent)
            elif silent >= timeout / 2 and (sent is None or now - sent >= timeout / 2) and self.up:
                # One probe per half-timeout of silence (`heard_from` clears it), also to an
                # engine that is down, so that it is taken back as soon as it answers.
                self._probe_sent[engine] = now
                try:
                    self._utility.post(engine, _PROBE_METHOD)
                except EngineDeadError as e:
                    (log.debug if down else log.warning)("liveness probe to engine %d failed: %s", engine, e)
        self._arm_watchdog()

    def _engine_stalled(self, engine: int, silent: float) -> None:
        message = (
            f"The engine did not answer within the request deadline ({silent:.0f}s without "
            f"any output or reply, limit {self.engine_timeout:g}s); it is treated as dead."
        )
        log.error("engine %d stalled: %s", engine, message)
        self.engine_down(engine, Failure(FailureKind.ENGINE_STALLED, message))
