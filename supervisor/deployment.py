"""The supervisor's lifecycle: engine, handshake, workers, restarts, shutdown.

    start engines ──► handshake (thread) ──┐
    spawn N workers ───────────────────────┴─► all workers ready ─► "serving on ..."
    serving:   worker exits  -> restart it (backoff; give up after repeated fast crashes -> exit 1)
               engine exits  -> SIGUSR1 to workers, stop them, exit 1
               SIGTERM/INT   -> SIGTERM workers (they drain), SIGKILL stragglers, stop engine, exit 0
               SIGHUP        -> with --api-keys-file: reload it, forward to the workers (keys_reload.py)

Everything that happens (child exit, worker ready, handshake result, signal, restart timer) is
an event on one asyncio queue, and one loop handles them in order: the state is in one place and
there are no callbacks racing each other. The handshake is vLLM's blocking zmq exchange, so it
runs in a daemon thread and posts its result to the queue; the loop tells it to give up (engine
died, or we were told to stop) through `is_alive`.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.supervisor.keys_reload import KeysReloader
from vllm_pyfrontend.supervisor.listening import bind_unix_socket, example_curl, serving_address
from vllm_pyfrontend.tenants.keys_file import KeysFileError
from vllm_pyfrontend.supervisor.engine_launch import EngineLaunch, engine_launches, split_sim_flags
from vllm_pyfrontend.supervisor.options import SupervisorOptions
from vllm_pyfrontend.supervisor.process import Child, describe_exit, log_as, wait_all
from vllm_pyfrontend.supervisor.runtime import RuntimeDir, free_tcp_port, tcp_uri
from vllm_pyfrontend.supervisor.vllm_flags import pooler_config_from
from vllm_pyfrontend.supervisor.workers import (
    WORKER_EVENTS,
    Fatal,
    WorkerPool,
    WorkerSlot,
    child_env,
    default_worker_command,
    slot_config_fields,
)

log = logging.getLogger("vllm_pyfrontend.supervisor")

# (Worker restarts, their backoff and fast-crash give-up: supervisor/workers.py.)
# Extra time past --shutdown-timeout before draining workers are killed (they bound their own
# drain by shutdown_timeout; this covers their exit).
WORKER_KILL_GRACE_S = 5.0
ENGINE_STOP_TIMEOUT_S = 20.0
# --on-engine-death restart: an engine that dies within ENGINE_FAST_DEATH_S of its start
# counts toward MAX_ENGINE_FAST_DEATHS in a row, after which the supervisor exits 1.
ENGINE_FAST_DEATH_S = 60.0
MAX_ENGINE_FAST_DEATHS = 3
_RESTART = -1  # _event_loop's "restart the deployment" result
_RESTART_ENGINE = -2  # _event_loop's "restart the engine, the workers serve on" result
ENGINE_GROUP_GRACE_S = 5.0
HANDSHAKE_JOIN_S = 5.0


class HandshakeServerLike(Protocol):
    address: str

    def run(
        self,
        *,
        engine_indices: list[int],
        inputs: list[str],
        outputs: list[str],
        timeout: float,
        is_alive: Callable[[], bool] | None = None,
    ) -> dict[int, dict]: ...

    def close(self) -> None: ...


def _default_handshake_factory(address: str) -> HandshakeServerLike:
    from vllm_pyfrontend.engine.handshake import HandshakeServer

    return HandshakeServer(address)


def _not_read_by_sim(args: list[str]) -> list[str]:
    read = ("--max-model-len", "--max-num-seqs", "--served-model-name", "--tokenizer",
            "--generation-config", "--data-parallel-")
    out: list[str] = []
    skip_values = False
    for token in args:
        if token.startswith("-"):
            skip_values = token.split("=", 1)[0].startswith(read)
        if not skip_values:
            out.append(token)
    return out


def configure_logging(level: str = "info") -> None:
    """Every line this process logs (ours and the handshake's) says `[supervisor]`."""
    log_as("supervisor", level)


@dataclass
class Event:
    kind: str  # signal | handshake | engine_exit | worker_exit | worker_ready | restart | reload
    slot: WorkerSlot | None = None
    child: Child | None = None
    value: Any = None
    error: BaseException | None = None
    handshake: Any = None  # the _Handshake a "handshake" event reports on


@dataclass
class _Handshake:
    server: HandshakeServerLike
    thread: threading.Thread | None = None
    abort: threading.Event = field(default_factory=threading.Event)
    done: bool = False
    closed: bool = False


class Supervisor:
    """Runs one frontend deployment until a signal or a fatal error; `run()` returns the exit code.

    The collaborators are parameters so tests can swap in fakes: `launcher(host, port)` gives the
    engine processes to start, `worker_command(config)` the argv of a worker, and
    `handshake_factory(address)` a bound HandshakeServer.
    """

    def __init__(
        self,
        options: SupervisorOptions,
        *,
        launcher: Callable[[str, int], list[EngineLaunch]] | None = None,
        worker_command: Callable[[WorkerConfig], list[str]] = default_worker_command,
        handshake_factory: Callable[[str], HandshakeServerLike] = _default_handshake_factory,
    ):
        self.options = options
        self._launcher = launcher or (lambda host, port: engine_launches(options, host, port))
        self._worker_command = worker_command
        self._handshake_factory = handshake_factory
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._engines: list[Child] = []
        self._pool: WorkerPool | None = None  # made in run(), once the runtime directory exists
        self._hurry = asyncio.Event()  # a second signal: stop waiting, kill
        self._stopping = False
        self._serving = False
        self._engine_died = False
        self._restarting = False
        self._signal_during_restart: int | None = None
        self._engine_started_at = 0.0
        self._engine_fast_deaths = 0
        self._env = child_env()
        self.runtime: RuntimeDir | None = None
        self._handshake: _Handshake | None = None
        self._uds: socket.socket | None = None  # --uds: bound here once, shared by the workers
        self._keys: KeysReloader | None = None  # --api-keys-file: published, reloaded on SIGHUP

    # ---------------------------------------------------------------- entry points

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        self.runtime = RuntimeDir()
        if self.options.policy.api_keys_file:
            self._keys = KeysReloader(self.options.policy.api_keys_file, self.runtime.path,
                                      self.options.api_keys, log)
            loop.add_signal_handler(signal.SIGHUP, self._events.put_nowait, Event("reload"))
        self._pool = WorkerPool(
            self._events, Event, build_config=self._worker_config, runtime_dir=self.runtime.path,
            env=self._env, api_keys=self.options.api_keys, command=self._worker_command, logger=log,
            preload=self.options.worker_preload,
        )
        try:
            try:
                self._prepare_port()
                if self._keys is not None:
                    try:
                        self._keys.start()
                    except KeysFileError as e:
                        raise Fatal(f"--api-keys-file: {e}") from None
                while True:
                    await self._start_engines()
                    await self._pool.spawn_all()
                    assert self._handshake is not None
                    code = await self._event_loop(self._handshake)
                    while code == _RESTART_ENGINE:
                        if not await self._restart_engine():
                            break
                        assert self._handshake is not None
                        code = await self._event_loop(self._handshake)
                    if code != _RESTART or not await self._stop_for_restart():
                        break
                if code in (_RESTART, _RESTART_ENGINE):
                    code = 0  # a signal arrived while the deployment was being restarted
            except Fatal as e:
                log.error("%s", e)
                code = 1
            except Exception:  # a bug here must still stop the children in order
                log.exception("supervisor failure")
                code = 1
            await self._shutdown(engine_dead=self._engine_died)
            return code
        finally:
            if self._handshake is not None:
                self._close_handshake(self._handshake)
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            if self._keys is not None:
                loop.remove_signal_handler(signal.SIGHUP)
            self.runtime.cleanup()
            if self._uds is not None:
                self._uds.close()
                try:
                    os.unlink(self.options.uds or "")
                except OSError:
                    pass

    # ---------------------------------------------------------------- startup

    def _prepare_port(self) -> None:
        """Fail before a long engine load if the HTTP port is taken; pick one for --port 0.
        With --uds, bind the socket now: SO_REUSEPORT does not apply to Unix sockets, so every
        worker inherits this one listener (as on the drop-in path)."""
        opts = self.options
        if opts.uds:
            self._uds = bind_unix_socket(opts.uds)
            assert self._pool is not None
            self._pool.pass_fds = (self._uds.fileno(),)
            return
        if opts.port == 0:
            opts.port = free_tcp_port(opts.host if opts.host not in ("", "0.0.0.0") else "127.0.0.1")
        family = socket.AF_INET6 if ":" in opts.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            # No SO_REUSEPORT: the bind fails if anything (even a reuse-port server) holds it.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((opts.host, opts.port))
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    raise Fatal(f"port {opts.port} on {opts.host} is already in use") from None
                raise Fatal(f"cannot bind {opts.host}:{opts.port}: {e}") from None

    async def _start_engines(self, keep_workers: bool = False) -> None:
        """Start the engines and the handshake (in a thread). `keep_workers`: the workers serve
        on, and the engines connect to their client slots as before."""
        opts = self.options
        if opts.has_remote_engines:
            # Engines on other hosts dial the DP address, like `vllm serve --headless` expects.
            host = opts.data_parallel_address or "127.0.0.1"
            bind = tcp_uri(host, opts.data_parallel_rpc_port)
            client_host: str | None = host
        else:
            host, bind, client_host = "127.0.0.1", "tcp://127.0.0.1:*", None
        assert self.runtime is not None and self._pool is not None
        pool = self._pool
        if not keep_workers:
            pool.reset(self.runtime.client_addresses(opts.workers, client_host))
        try:
            server = self._handshake_factory(bind)
        except Exception as e:
            raise Fatal(f"cannot bind the handshake socket {bind}: {e}") from None
        handshake = self._handshake = _Handshake(server=server)
        port = int(server.address.rsplit(":", 1)[1])
        log.info("handshake on %s; expecting engines %s", server.address, opts.engine_indices)

        launches = self._launcher(host, port)
        if opts.engine == "sim" and launches:
            # Flags the supervisor itself read are not "ignored"; report only the others.
            ignored = _not_read_by_sim(split_sim_flags(opts.engine_args)[1])
            if ignored:
                log.warning("the sim engine ignores these vLLM flags: %s", " ".join(ignored))
        for launch in launches:
            log.info("starting %s: %s", launch.name, " ".join(launch.argv))
            try:
                child = await Child.spawn(launch.name, launch.argv, env=self._env)
            except OSError as e:
                raise Fatal(f"cannot start {launch.name}: {e}") from None
            self._engines.append(child)
            self._engine_started_at = time.monotonic()
            pool.watch(child, Event("engine_exit", child=child))
        if opts.local_engine_count < opts.data_parallel_size:
            log.info(
                "waiting for %d headless engine(s) to join at %s",
                opts.data_parallel_size - opts.local_engine_count, server.address,
            )

        def handshake_thread() -> None:
            try:
                result = server.run(
                    engine_indices=opts.engine_indices,
                    inputs=[s.addresses.input for s in pool.slots],
                    outputs=[s.addresses.output for s in pool.slots],
                    timeout=opts.engine_ready_timeout,
                    is_alive=lambda: not handshake.abort.is_set(),
                )
                event = Event("handshake", value=result, handshake=handshake)
            except BaseException as e:  # report every failure to the loop
                event = Event("handshake", error=e, handshake=handshake)
            try:
                loop.call_soon_threadsafe(self._events.put_nowait, event)
            except RuntimeError:  # the loop is gone: we are exiting anyway
                pass

        loop = asyncio.get_running_loop()
        handshake.thread = threading.Thread(target=handshake_thread, name="handshake", daemon=True)
        handshake.thread.start()

    def _close_handshake(self, handshake: _Handshake) -> None:
        handshake.abort.set()
        if handshake.closed:
            return
        if handshake.thread is not None:
            handshake.thread.join(HANDSHAKE_JOIN_S)
            if handshake.thread.is_alive():  # its zmq socket is in use: leave it to the exit
                return
        handshake.closed = True
        try:
            handshake.server.close()
        except Exception:  # closing is best effort
            pass

    def _worker_config(self, slot: WorkerSlot) -> WorkerConfig:
        opts = self.options
        assert self.runtime is not None
        own = slot_config_fields(slot, self.runtime)
        if self._keys is not None:
            self._keys.starting(slot.index)
        return WorkerConfig(
            **own,
            num_workers=opts.workers,
            host=opts.host,
            port=opts.port,
            model=opts.model,
            model_root=opts.model_arg or opts.model,
            served_model_names=opts.served_names,
            engine_indices=opts.engine_indices,
            tokenizer=opts.tokenizer,
            chat_template=opts.chat_template,
            max_model_len=opts.max_model_len,
            shutdown_timeout=opts.shutdown_timeout,
            engine_ready_timeout=opts.engine_ready_timeout,
            engine_timeout=opts.engine_timeout,
            listen_fd=self._uds.fileno() if self._uds is not None else None,
            reuse_port=self._uds is None,
            grpc_port=opts.grpc_port,
            log_level=opts.log_level,
            generation_config=opts.generation_config,
            pooler_config=pooler_config_from(opts.engine_args),
            engine_args=list(opts.engine_args),
            policy=opts.policy,
        )

    # ---------------------------------------------------------------- the event loop

    async def _event_loop(self, handshake: _Handshake) -> int:
        """Handle events until the deployment must stop; return the exit code."""
        opts = self.options
        pool = self._pool
        assert pool is not None
        ready_deadline: float | None = None
        while True:
            timeout = None if ready_deadline is None else max(0.0, ready_deadline - time.monotonic())
            try:
                ev = await asyncio.wait_for(self._events.get(), timeout)
            except asyncio.TimeoutError:
                raise Fatal(
                    f"workers {pool.not_ready()} not ready {opts.worker_ready_timeout:.0f}s after the engines"
                ) from None

            if ev.kind == "signal":
                log.info("%s: shutting down", signal.Signals(ev.value).name)
                handshake.abort.set()
                return 0

            if ev.kind == "handshake":
                if ev.handshake is not handshake:
                    continue  # the result of a deployment already given up (engine restart)
                handshake.done = True
                if ev.error is not None:
                    if self._engine_died:
                        continue  # already reported as the engine's exit
                    raise Fatal(f"engine handshake failed: {type(ev.error).__name__}: {ev.error}")
                log.info("engines %s ready", sorted(ev.value) if ev.value else opts.engine_indices)
                self._close_handshake(handshake)
                if self._serving:  # an engine restarted under serving workers
                    log.warning("the engine is back: serving")
                    continue
                ready_deadline = time.monotonic() + opts.worker_ready_timeout

            elif ev.kind == "engine_exit":
                assert ev.child is not None
                if not any(ev.child is e for e in self._engines):
                    continue  # an engine of a deployment already restarted
                self._engine_died = True
                handshake.abort.set()
                await ev.child.flush_output()
                log.error("%s exited (%s)", ev.child.name, describe_exit(ev.child.returncode))
                if opts.on_engine_death == "restart":
                    lived = time.monotonic() - self._engine_started_at
                    self._engine_fast_deaths = self._engine_fast_deaths + 1 if lived < ENGINE_FAST_DEATH_S else 1
                    if self._engine_fast_deaths <= MAX_ENGINE_FAST_DEATHS:
                        return _RESTART_ENGINE if self._restarts_engine_alone() else _RESTART
                    log.error("the engine died %d times in a row within %.0fs of starting; giving up",
                              self._engine_fast_deaths, ENGINE_FAST_DEATH_S)
                return 1

            elif ev.kind in WORKER_EVENTS:
                assert ev.slot is not None
                await pool.handle(ev.kind, ev.slot, ev.child, serving=self._serving)
                if ev.kind == "worker_ready" and self._keys is not None and ev.slot.ready:
                    self._keys.ready(ev.slot)

            elif ev.kind == "reload":  # SIGHUP: the keys file again
                if self._keys is not None:
                    self._keys.reload(pool.slots)

            if not self._serving and handshake.done and pool.all_ready:
                self._serving = True
                ready_deadline = None
                log.info("serving on %s (%d workers)", serving_address(opts), opts.workers)
                log.info("try: %s", example_curl(opts))

    def _on_signal(self, sig: int) -> None:
        """First SIGTERM/SIGINT: orderly shutdown. A second Ctrl-C: stop waiting, kill.

        A repeated SIGTERM is not an escalation: wrappers such as `timeout` or a process
        manager signalling the whole group deliver it twice.
        """
        if self._restarting and self._signal_during_restart is None:
            self._signal_during_restart = sig  # stop instead of starting again
        elif not self._stopping:
            self._stopping = True
            self._events.put_nowait(Event("signal", value=sig))
        elif sig == signal.SIGINT and not self._hurry.is_set():
            log.warning("SIGINT again: killing everything now")
            self._hurry.set()
        else:
            log.info("%s: already shutting down", signal.Signals(sig).name)

    # ---------------------------------------------------------------- engine restart

    def _restarts_engine_alone(self) -> bool:
        """Whether the engine restarts under serving workers: they were serving, and requests
        may wait for an engine and move to it (--migration-limit > 0). Else the whole
        deployment restarts (its workers fail their requests, and the port closes until they
        are back)."""
        opts = self.options
        return self._serving and opts.policy.migration_limit > 0 and not opts.has_remote_engines

    async def _restart_engine(self) -> bool:
        """--on-engine-death restart with migration: the workers keep the port and their client
        slots; told the engine restarts (SIGUSR2), their requests in flight and the new ones
        wait for it and then continue (frontend/engine/migration.py). What is left of the
        engines stops, and they start again from the handshake. False if a signal arrived
        meanwhile (stop instead)."""
        self._restarting = True
        self._signal_during_restart = None
        assert self._pool is not None
        for slot in self._pool.slots:
            if slot.child is not None and slot.child.alive:
                slot.child.send_signal(signal.SIGUSR2)
        if self._handshake is not None:
            self._close_handshake(self._handshake)
        self._handshake = None
        await self._stop_engines()
        self._engines = []
        self._engine_died = False
        self._restarting = False
        if self._signal_during_restart is not None:
            log.info("%s during the restart: shutting down", signal.Signals(self._signal_during_restart).name)
            self._stopping = True
            return False
        log.warning("restarting the engine; the workers serve on (--on-engine-death restart)")
        await self._start_engines(keep_workers=True)
        return True

    async def _stop_for_restart(self) -> bool:
        """--on-engine-death restart: stop the workers (their in-flight requests end with an
        error event and [DONE]) and what is left of the engines, then start the deployment
        again from the handshake. False if a signal arrived meanwhile (stop instead)."""
        self._restarting = True
        self._signal_during_restart = None
        await self._shutdown(engine_dead=True)
        if self._handshake is not None:
            self._close_handshake(self._handshake)
        self._handshake = None
        self._engines = []
        if self._pool is not None:
            self._pool.reset([])
        self._engine_died = self._serving = self._stopping = False
        self._restarting = False
        if self._signal_during_restart is not None:
            log.info("%s during the restart: shutting down", signal.Signals(self._signal_during_restart).name)
            return False
        log.warning("restarting the engine and the workers (--on-engine-death restart)")
        return True

    # ---------------------------------------------------------------- shutdown

    async def _shutdown(self, *, engine_dead: bool) -> None:
        """Workers first (they drain against a live engine), then the engine."""
        self._stopping = True
        if self._pool is not None:
            # A dead engine: SIGUSR1 first, the workers fail their in-flight requests now.
            workers = await self._pool.stop(self.options.shutdown_timeout, WORKER_KILL_GRACE_S,
                                            engine_dead=engine_dead, hurry=self._hurry)
            for w in workers:
                await w.flush_output(0.5)
        await self._stop_engines()
        log.info("stopped")

    async def _stop_engines(self) -> None:
        engines = [e for e in self._engines if e.alive]
        if engines:
            log.info("stopping the engine")
            for e in engines:
                e.send_signal(signal.SIGTERM)
            if not await wait_all(engines, ENGINE_STOP_TIMEOUT_S, self._hurry):
                log.warning("engine still running: SIGKILL")
        for e in self._engines:
            # The engine's own subprocesses (vLLM's EngineCore, workers, multiprocessing's
            # resource tracker, which unlinks shared memory) get a moment to finish on their
            # own; whatever is left is killed.
            if not self._hurry.is_set() and not e.alive:
                await e.wait_group(ENGINE_GROUP_GRACE_S)
            e.kill_group(signal.SIGKILL)
        await wait_all(self._engines, 5.0)
        for e in self._engines:
            await e.flush_output(0.5)


def run(options: SupervisorOptions) -> int:
    """Run the supervisor to completion and return the process exit code."""
    return asyncio.run(Supervisor(options).run())
