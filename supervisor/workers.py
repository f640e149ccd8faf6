"""The HTTP worker processes, one pool for both launchers: `Supervisor` (supervisor/deployment.py,
`frontend-supervisor`) and `DropinSupervisor` (supervisor/dropin.py, the `vllm serve` drop-in).

    spawn(slot) ──► worker (status pipe) ── b"ready\\n" ──► event worker_ready
                          └── exits ──► event worker_exit ──► forget its metrics, restart in
                                        backoff (a slot that keeps crashing is retried slowly
                                        while another worker serves; Fatal when none does)
    stop(drain, grace) ──► [SIGUSR1 if the engine is dead] SIGTERM, wait, SIGKILL stragglers

A slot is worker i's place: its engine client addresses survive its restarts. The pool posts
everything that happens as an event into its owner's queue (built by the owner's `make_event`,
so each supervisor keeps its single ordered event loop) and the owner hands the worker events
back to `handle`. `watch` and `read_status` serve the owner's other children (engines, router).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.environment import API_KEYS_ENV, MULTIPROC_ENV
from vllm_pyfrontend.supervisor.forkserver import ForkedChild, TemplateError, WorkerTemplate, preload_enabled
from vllm_pyfrontend.supervisor.process import Child, describe_exit, wait_all
from vllm_pyfrontend.supervisor.runtime import ClientAddresses, RuntimeDir

# prometheus_client's multiprocess directory variable (see frontend/metrics), set for workers.
METRICS_DIR_ENV = MULTIPROC_ENV

# Restart policy: a worker that dies within FAST_CRASH_S of its start is a "fast crash"; after
# MAX_FAST_CRASHES in a row the slot is crash-looping (a bug or a broken dependency, not bad
# luck). The supervisor stops only when no worker serves: while another worker is ready, the
# slot is retried every QUARANTINE_S (logged as an error each time), so one worker's broken
# optional dependency never takes the healthy workers and the engine down with it.
FAST_CRASH_S = 10.0
MAX_FAST_CRASHES = 5
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 10.0
QUARANTINE_S = 60.0

# The event kinds the pool posts about its workers (see WorkerPool.handle).
WORKER_EVENTS = frozenset({"worker_exit", "worker_ready", "restart"})


class Fatal(Exception):
    """A reason to stop with exit code 1 (logged once, by the supervisor's `run`)."""


def default_worker_command(config: WorkerConfig) -> list[str]:
    return [sys.executable, "-m", "vllm_pyfrontend.server.worker", "--config-json", config.to_json()]


def child_env() -> dict[str, str]:
    """Children (the same installed package, `sys.executable -m ...`) log unbuffered, so
    their lines arrive as written."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def worker_env(base: dict[str, str], metrics_dir: str, api_keys: list[str]) -> dict[str, str]:
    """A worker's environment: the shared metrics directory (prometheus_client reads it at
    import, so it must be there when the process starts) and the API keys (never on the
    command line, which every local user can read)."""
    env = dict(base)
    env[METRICS_DIR_ENV] = metrics_dir
    env.pop(API_KEYS_ENV, None)
    if api_keys:
        env[API_KEYS_ENV] = json.dumps(api_keys)
    return env


@dataclass
class WorkerSlot:
    """Worker i's place: its engine client addresses survive its restarts."""

    index: int
    addresses: ClientAddresses
    child: Child | ForkedChild | None = None
    ready: bool = False
    starts: int = 0
    fast_crashes: int = 0
    restart_timer: asyncio.TimerHandle | None = None


def slot_config_fields(slot: WorkerSlot, runtime: RuntimeDir) -> dict[str, Any]:
    """The `WorkerConfig` fields that are worker `slot`'s own: its index, its engine client
    addresses and the runtime directory, and, once restarted (the engines send no ready response
    again), the engines' ready responses as the runtime directory recorded them."""
    return {
        "worker_index": slot.index,
        "input_address": slot.addresses.input,
        "output_address": slot.addresses.output,
        "engine_infos": runtime.read_engine_infos() if slot.starts > 0 else None,
        "runtime_dir": runtime.path,
    }


# make_event(kind, slot, child): the owner's event object for one of WORKER_EVENTS.
MakeEvent = Callable[[str, "WorkerSlot | None", "Child | None"], Any]


class WorkerPool:
    """The workers of one supervisor. `build_config(slot)` gives a worker's WorkerConfig (the
    pool sets its status_fd), `command(config)` its argv; `pass_fds` are inherited by every
    worker besides its status pipe. Created once the runtime directory exists: the workers'
    shared Prometheus directory is `<runtime_dir>/metrics`."""

    def __init__(
        self,
        events: asyncio.Queue,
        make_event: MakeEvent,
        *,
        build_config: Callable[[WorkerSlot], WorkerConfig],
        runtime_dir: str,
        env: dict[str, str],
        api_keys: list[str],
        command: Callable[[WorkerConfig], list[str]] = default_worker_command,
        pass_fds: Sequence[int] = (),
        logger: logging.Logger | None = None,
        preload: bool | None = None,
    ):
        self._events = events
        self._make_event = make_event
        self._build_config = build_config
        self._command = command
        self.pass_fds = tuple(pass_fds)
        self._env = env
        self._api_keys = api_keys
        self._log = logger or logging.getLogger("vllm_pyfrontend.supervisor")
        self.slots: list[WorkerSlot] = []
        # Every worker's Prometheus files; /metrics on any worker merges them (frontend/metrics).
        self.metrics_dir = os.path.join(runtime_dir, "metrics")
        os.makedirs(self.metrics_dir, exist_ok=True)
        # The loop holds tasks weakly: keep our background tasks alive until they finish.
        self._tasks: set[asyncio.Future] = set()
        # Workers are forked from a preloaded template (shared read-only memory) when they run
        # the default command, unless turned off (--no-worker-preload or the env variable).
        self.preload = preload_enabled(preload) and command is default_worker_command
        self.template = WorkerTemplate(self._log)

    # ---------------------------------------------------------------- slots

    def reset(self, addresses: Sequence[ClientAddresses]) -> None:
        """New slots, one per engine client address pair (a fresh deployment)."""
        self.slots = [WorkerSlot(index=i, addresses=a) for i, a in enumerate(addresses)]

    def current(self, slot: WorkerSlot) -> bool:
        """Whether `slot` is one of this deployment's (events of a replaced one are stale)."""
        return any(slot is s for s in self.slots)

    @property
    def all_ready(self) -> bool:
        return bool(self.slots) and all(s.ready for s in self.slots)

    def not_ready(self) -> list[int]:
        return [s.index for s in self.slots if not s.ready]

    # ---------------------------------------------------------------- starting

    async def spawn_all(self) -> None:
        for slot in self.slots:
            await self.spawn(slot)

    async def spawn(self, slot: WorkerSlot) -> None:
        config = self._build_config(slot)
        read_fd, write_fd = os.pipe()
        config.status_fd = write_fd
        name = f"worker {slot.index}"
        env = worker_env(self._env, self.metrics_dir, self._api_keys)
        child: Child | ForkedChild | None = None
        try:
            if self.preload:
                child = await self._fork(name, config, env, write_fd)
            if child is None:
                child = await Child.spawn(name, self._command(config), pass_fds=(*self.pass_fds, write_fd), env=env)
        except OSError as e:
            os.close(read_fd)
            raise Fatal(f"cannot start worker {slot.index}: {e}") from None
        finally:
            os.close(write_fd)
        slot.child, slot.ready, slot.restart_timer = child, False, None
        slot.starts += 1
        self.watch(child, self._make_event("worker_exit", slot, child))
        self.read_status(read_fd, self._make_event("worker_ready", slot, child))

    async def _fork(self, name: str, config: WorkerConfig, env: dict[str, str], status_fd: int) -> ForkedChild | None:
        """Fork the worker from the template (started now if none runs); None: spawn it."""
        try:
            await self.template.ensure(config, env, self.pass_fds)
            return await self.template.fork(name, config, status_fd)
        except (TemplateError, OSError) as e:
            self._log.warning("%s; starting %s as its own process", e, name)
            return None

    # ---------------------------------------------------------------- events

    def watch(self, child: Child, event: Any) -> None:
        """Post `event` when `child` exits."""

        async def watch() -> None:
            await child.wait()
            self._events.put_nowait(event)

        self._background(watch())

    def read_status(self, fd: int, event: Any) -> None:
        """Post `event` when the child writes b"ready\\n" on its status pipe (read end `fd`)."""

        async def read() -> None:
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader()
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
            )
            try:
                while line := await reader.readline():
                    if line.strip() == b"ready":
                        self._events.put_nowait(event)
            finally:
                transport.close()

        self._background(read())

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def handle(self, kind: str, slot: WorkerSlot, child: Child | None, *, serving: bool) -> None:
        """One of WORKER_EVENTS, taken off the owner's queue. Raises Fatal when a worker keeps
        crashing right after its start."""
        if not self.current(slot):
            return  # a worker of a deployment already restarted
        if kind == "worker_exit":
            if child is not slot.child:
                return
            assert child is not None
            await child.flush_output(0.2)
            self._forget_metrics(child)
            self._schedule_restart(slot, child)
        elif kind == "restart":
            self._log.info("restarting worker %d", slot.index)
            await self.spawn(slot)
        elif kind == "worker_ready":
            if child is not slot.child or slot.ready:
                return
            slot.ready = True
            if serving:
                self._log.info("worker %d ready again", slot.index)

    def _forget_metrics(self, child: Child) -> None:
        """A dead worker's live gauges leave /metrics (its counters stay in the totals)."""
        try:
            from prometheus_client.multiprocess import mark_process_dead

            mark_process_dead(child.pid, self.metrics_dir)
        except Exception as e:  # metrics bookkeeping must not stop a restart
            self._log.warning("could not clear worker %d's metrics: %s", child.pid, e)

    def _schedule_restart(self, slot: WorkerSlot, child: Child) -> None:
        lived = time.monotonic() - child.started_at
        slot.ready = False
        slot.fast_crashes = slot.fast_crashes + 1 if lived < FAST_CRASH_S else 1
        self._log.warning(
            "worker %d (pid %d) exited (%s) after %.1fs",
            slot.index, child.pid, describe_exit(child.returncode), lived,
        )
        if slot.fast_crashes > MAX_FAST_CRASHES:
            serving = [s.index for s in self.slots if s.ready]
            if not serving:
                raise Fatal(f"worker {slot.index} crashed {slot.fast_crashes} times in a row; giving up "
                            "(no worker serves)")
            delay = QUARANTINE_S
            self._log.error(
                "worker %d crashed %d times in a row right after its start: it is retried every %.0fs "
                "while worker(s) %s serve; see its output above for the cause",
                slot.index, slot.fast_crashes, delay, ", ".join(map(str, serving)))
        else:
            delay = min(BACKOFF_BASE_S * 2 ** (slot.fast_crashes - 1), BACKOFF_MAX_S)
            self._log.info("restarting worker %d in %.1fs", slot.index, delay)
        slot.restart_timer = asyncio.get_running_loop().call_later(
            delay, self._events.put_nowait, self._make_event("restart", slot, None)
        )

    # ---------------------------------------------------------------- stopping

    async def stop(
        self,
        drain: float,
        grace: float,
        *,
        engine_dead: bool = False,
        hurry: asyncio.Event | None = None,
        kill_wait: float = 5.0,
    ) -> list[Child]:
        """Stop the running workers: SIGTERM (they drain for up to `drain` seconds), SIGKILL
        whatever still runs `grace` seconds later (or as soon as `hurry` is set). With the engine
        dead their in-flight requests cannot finish: SIGUSR1 first fails them at once. Pending
        restarts are cancelled. Returns the workers that were stopped (to flush their output)."""
        for slot in self.slots:
            if slot.restart_timer is not None:
                slot.restart_timer.cancel()
        workers = [s.child for s in self.slots if s.child is not None and s.child.alive]
        if engine_dead:
            for w in workers:
                w.send_signal(signal.SIGUSR1)
        if workers:
            self._log.info("stopping %d worker(s) (drain up to %.0fs)", len(workers), drain)
            for w in workers:
                w.send_signal(signal.SIGTERM)
            if not await wait_all(workers, drain + grace, hurry):
                for w in workers:
                    if w.alive:
                        self._log.warning("%s did not exit: SIGKILL", w.name)
                        w.kill_group(signal.SIGKILL)
                await wait_all(workers, kill_wait)
        await self.template.close()
        return workers
