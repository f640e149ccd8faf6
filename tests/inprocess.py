"""The in-process test tier: one real worker and the real simulated engine inside the test process.

`InProcessStack(args)` takes a `frontend-supervisor` command line, as `tests/stack.py`'s `Stack`
does, and builds what that command would run, from the product's own pieces:

- the command line is parsed by the supervisor's `parse_args` (and the model resolved by its
  `resolve_model`), and the worker's `WorkerConfig` is the one the supervisor hands its worker 0
  (`Supervisor._worker_config`), through the same JSON round trip; with `--api-keys-file` the
  supervisor's `KeysReloader` publishes the key table in the runtime directory first;
- each simulated engine is the `SimEngine` that the supervisor's launch command would start
  (`engine_launches` -> the sim's own argument parser -> `config_from_args`), run in a thread
  (`SimEngine.run`: handshake, then its step loop) instead of a process;
- the handshake is the supervisor's (`HandshakeServer.run` with the worker's client addresses);
- the worker is `frontend/server/worker.py`'s `build_worker` (engine client, `ServerState`,
  aiohttp app), served by `make_runner` and the worker's `GuardedSite` on 127.0.0.1, on a uvloop
  event loop in a thread of its own, and closed by `close_worker`; as `run_worker` does, it also
  serves the gRPC service with `--grpc-port` (`GrpcFrontend`) and watches the TLS files with
  `--enable-ssl-refresh` (`CertRefresher`).

What it is not: the supervisor process (no restarts, signals, drains, worker processes, preload
template, multiprocess Prometheus files, a Unix socket shared by workers), and never more than
one worker (`--workers 1`). Tests of those keep using `Stack`. What a worker process owns alone
is shared with the test process here: loggers (set to --log-level while a deployment lives),
parser registries (a test that loads a parser plugin stays on `Stack`) and environment variables
(`env` sets them in this process while the deployment lives).

The interface is `Stack`'s (`port`, `base_url`, `logs()`, `wait_for`, `health`,
`freshest_engine_stats`, `terminate()` -> exit code, `stop()`, a context manager), so a test
reaches it over loopback HTTP with the official clients exactly as it reaches a `Stack`. The
log holds the lines the worker (`[worker 0] ...`) and the engine (`[engine] ...`) threads log,
formatted and escaped as the supervisor prints its children's lines.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
import threading
import time
from collections import deque

import uvloop

from tests.stack import Stack, free_port
from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.engine.handshake import HandshakeServer
from vllm_pyfrontend.server import worker as worker_module
from vllm_pyfrontend.server.connections import ConnectionGuard, GuardedSite
from vllm_pyfrontend.server.log_lines import LogLineFormatter, escape_line
from vllm_pyfrontend.server.tls import make_ssl_context
from vllm_pyfrontend.supervisor import cli
from vllm_pyfrontend.supervisor.deployment import Supervisor
from vllm_pyfrontend.supervisor.engine_launch import engine_launches
from vllm_pyfrontend.supervisor.keys_reload import KeysReloader
from vllm_pyfrontend.supervisor.runtime import RuntimeDir
from vllm_pyfrontend.supervisor.sim import __main__ as sim_main
from vllm_pyfrontend.supervisor.sim.engine import SimEngine
from vllm_pyfrontend.supervisor.sim.prefix_cache import attach_prefix_cache
from vllm_pyfrontend.supervisor.workers import WorkerSlot

SIM_MODULE = "vllm_pyfrontend.supervisor.sim"
# The formats of a worker's and of the simulated engine's lines (server/worker.py's
# _setup_logging, supervisor/sim/__main__.py), as the supervisor prints them.
WORKER_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
ENGINE_FORMAT = "%(asctime)s sim-engine[{index}] %(levelname)s %(message)s"

_names = itertools.count()

# What every worker of a deployment loads identically (tokenizer, chat template, generation
# defaults, model config): loaded once per test process and key, as a worker template loads it
# once for the workers it forks (`SharedParts`, server/worker.py). Only read after loading.
_shared: dict[tuple, worker_module.SharedParts] = {}
_shared_lock = threading.Lock()


def _shared_parts(config: WorkerConfig) -> worker_module.SharedParts:
    key = worker_module.SharedParts.key_of(config)
    with _shared_lock:
        parts = _shared.get(key)
        if parts is None:
            parts = _shared[key] = worker_module.SharedParts.load(config)
        return parts


class _ThreadLog(logging.Handler):
    """Keeps the records logged on one in-process deployment's threads, as the supervisor's
    log would show them: one line per line, prefixed with who wrote it."""

    def __init__(self, lines: deque[str], prefix: str, engine_formats: dict[str, logging.Formatter]):
        super().__init__(logging.DEBUG)
        self.lines = lines
        self.prefix = prefix  # the deployment's thread names start with it
        self.worker_format = LogLineFormatter(WORKER_FORMAT)
        self.engine_formats = engine_formats  # thread name -> (the engine's formatter)

    def emit(self, record: logging.LogRecord) -> None:
        thread = record.threadName or ""
        if not thread.startswith(self.prefix):
            return
        try:
            engine = self.engine_formats.get(thread)
            if engine is not None:
                who, formatter = engine
            else:
                who, formatter = "worker 0", self.worker_format
            for line in formatter.format(record).split("\n"):
                self.lines.append(f"[{who}] " + escape_line(line.encode()).decode("utf-8", "replace"))
        except Exception:  # noqa: BLE001 - logging never fails the caller
            self.handleError(record)


# The level of the product's loggers while in-process deployments run (a worker process sets
# its root logger to --log-level); restored when the last one stops.
_levels_lock = threading.Lock()
_levels: list[str] = []
_saved_level: int | None = None
PRODUCT_LOGGER = "vllm_pyfrontend"


def _push_level(level: str) -> None:
    global _saved_level
    with _levels_lock:
        logger = logging.getLogger(PRODUCT_LOGGER)
        if not _levels:
            _saved_level = logger.level
        _levels.append(level.upper())
        logger.setLevel(min(logging.getLevelName(lv) for lv in _levels))


def _pop_level(level: str) -> None:
    with _levels_lock:
        logger = logging.getLogger(PRODUCT_LOGGER)
        _levels.remove(level.upper())
        if _levels:
            logger.setLevel(min(logging.getLevelName(lv) for lv in _levels))
        else:
            logger.setLevel(_saved_level or logging.NOTSET)


class _EngineThread:
    """One simulated engine, built from the command the supervisor would run, in a thread."""

    def __init__(self, argv: list[str], thread_name: str):
        assert argv[1:3] == ["-m", SIM_MODULE], argv
        args = sim_main.build_parser().parse_args(argv[3:])
        self.index = args.engine_index
        self.engine = SimEngine(sim_main.config_from_args(args))
        attach_prefix_cache(self.engine, args)
        self.exit_code: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    def _run(self) -> None:
        try:
            self.exit_code = self.engine.run()
        except BaseException as e:  # reported by stop()
            self.error = e
            self.exit_code = 1
            logging.getLogger(SIM_MODULE).exception("simulated engine failed")

    def stop(self, timeout: float) -> int:
        self.engine.request_stop()
        self.thread.join(timeout)
        if self.thread.is_alive():
            return 1
        return self.exit_code if self.exit_code is not None else 1


class InProcessStack:
    """A one-worker deployment on the simulated engine inside this process (see the module's
    docstring); `args` is a `frontend-supervisor` command line without --host/--port."""

    def __init__(self, args: list[str], *, port: int | None = None, ready_timeout: float = 120.0,
                 env: dict[str, str] | None = None):
        """`env`: environment variables the deployment reads (a Stack's `env`): set in this
        process while it lives (module-scoped fixtures live while their module's tests run)."""
        self._saved_env = {k: os.environ.get(k) for k in env or {}}
        os.environ.update(env or {})
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log: deque[str] = deque(maxlen=2000)
        self.name = f"inprocess-{next(_names)}/"
        self.engines: list[_EngineThread] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.parts: worker_module.WorkerParts | None = None
        self._runner = None
        self._site = None
        self._grpc = None
        self._cert_refresher = None
        self._stopped = False
        self._code = 0
        self._engine_formats: dict[str, tuple[str, logging.Formatter]] = {}
        self._handler = _ThreadLog(self.log, self.name, self._engine_formats)
        logging.getLogger().addHandler(self._handler)
        self.runtime: RuntimeDir | None = None
        self._level: str | None = None
        try:
            self._start(args, ready_timeout)
        except BaseException:
            self._close(5.0)
            raise

    # ---------------------------------------------------------------- start

    def _start(self, args: list[str], ready_timeout: float) -> None:
        # The supervisor's command line, as `frontend-supervisor` reads it (cli.main).
        options = cli.parse_args(["--host", "127.0.0.1", "--port", str(self.port), *args])
        if options.engine != "sim":
            raise ValueError("the in-process tier runs the simulated engine only (--engine sim)")
        if options.workers != 1:
            raise ValueError("the in-process tier runs one worker: pass --workers 1 (or use Stack)")
        if options.uds:
            raise ValueError("--uds needs a Stack")
        options.model = cli.resolve_model(options.model, options.engine)
        if "hf" in (options.policy.tool_call_parser, options.policy.reasoning_parser):
            from vllm_pyfrontend.parsers.response_template import check_hf_model_dir

            check_hf_model_dir(options.policy.tool_call_parser, options.policy.reasoning_parser,
                               options.tokenizer or options.model)
        self._level = options.log_level
        _push_level(self._level)

        # The supervisor's runtime directory, key table and worker 0's config.
        supervisor = Supervisor(options)
        self.runtime = supervisor.runtime = RuntimeDir()
        if options.policy.api_keys_file:
            supervisor._keys = KeysReloader(options.policy.api_keys_file, self.runtime.path, options.api_keys,
                                            logging.getLogger("vllm_pyfrontend.supervisor"))
            supervisor._keys.start()
        slot = WorkerSlot(index=0, addresses=self.runtime.client_addresses(1)[0])
        config = WorkerConfig.from_json(supervisor._worker_config(slot).to_json())
        config.api_keys = [k for k in options.api_keys if k]  # (the worker's environment, in a process)
        self.config = config

        # The engines, joined through the supervisor's handshake.
        handshake = HandshakeServer("tcp://127.0.0.1:*")
        try:
            port = int(handshake.address.rsplit(":", 1)[1])
            for launch in engine_launches(options, "127.0.0.1", port):
                name = f"{self.name}{launch.name}"
                engine = _EngineThread(launch.argv, name)
                self._engine_formats[name] = (launch.name, LogLineFormatter(ENGINE_FORMAT.format(index=engine.index)))
                self.engines.append(engine)
                engine.thread.start()
            handshake.run(engine_indices=options.engine_indices, inputs=[slot.addresses.input],
                          outputs=[slot.addresses.output], timeout=ready_timeout,
                          is_alive=lambda: all(e.thread.is_alive() for e in self.engines))
        finally:
            handshake.close()

        # The worker, on its own event loop.
        shared = _shared_parts(config)
        self.loop = uvloop.new_event_loop()
        self.loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(thread_name_prefix=f"{self.name}executor"))
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"{self.name}worker", daemon=True)
        self.thread.start()
        self.call(self._serve(config, shared), ready_timeout)
        self.wait_healthy(ready_timeout)

    async def _serve(self, config: WorkerConfig, shared) -> None:
        """What run_worker does up to serving, minus what belongs to a process of its own
        (signal handlers, the garbage collector's tuning, the ready report)."""
        parts = self.parts = await worker_module.build_worker(config, shared)
        policy = config.policy
        self._runner = worker_module.make_runner(parts.app, policy)
        await self._runner.setup()
        sock = worker_module.make_listen_socket(config.host, config.port, reuse_port=False)
        guard = ConnectionGuard(policy.http_header_timeout, policy.max_connections_per_worker,
                                policy.h11_max_incomplete_event_size)
        ssl_context = make_ssl_context(policy)
        self._site = GuardedSite(self._runner, sock, guard, backlog=worker_module.LISTEN_BACKLOG,
                                 ssl_context=ssl_context)
        await self._site.start()
        if ssl_context is not None and policy.enable_ssl_refresh:
            from vllm_pyfrontend.server.tls_refresh import CertRefresher

            self._cert_refresher = CertRefresher(ssl_context, policy.ssl_keyfile, policy.ssl_certfile,
                                                 policy.ssl_ca_certs)
        if config.grpc_port is not None:
            from vllm_pyfrontend.api.grpc.server import GrpcFrontend

            self._grpc = GrpcFrontend(parts.state, config.host, config.grpc_port)
            await self._grpc.start()
        parts.state.multimodal.start_loading()
        parts.state.metrics.set_serving(True)

    def call(self, coro, timeout: float = 60.0):
        """Run `coro` on the worker's event loop and return its result (the worker's objects
        are only consistent there)."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    # ---------------------------------------------------------------- Stack's interface

    def logs(self) -> str:
        return "\n".join(self.log)

    # (Stack's own: they only speak HTTP to base_url and read logs())
    wait_for = Stack.wait_for
    health = Stack.health
    freshest_engine_stats = Stack.freshest_engine_stats

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.health() == 200:
                return
            time.sleep(0.05)
        raise TimeoutError(f"in-process worker not healthy after {timeout}s:\n{self.logs()}")

    def terminate(self, timeout: float = 60.0) -> int:
        """Stop serving, close the worker and stop the engines; 0 when all of it went cleanly
        (what `Stack.terminate` returns for a clean stop)."""
        return self._close(timeout)

    def stop(self) -> int:
        return self._close(10.0)

    def __enter__(self) -> "InProcessStack":
        return self

    def __exit__(self, *exc) -> None:
        self.terminate()

    # ---------------------------------------------------------------- stop

    async def _unserve(self) -> None:
        """What run_worker does once told to stop (the drain window aside: a test stops its
        deployment when its requests are done), then what asyncio.run does after it: the tasks
        still pending are cancelled and awaited, the executor is shut down."""
        if self._grpc is not None:
            await self._grpc.stop(1.0)
        if self._site is not None:
            await self._site.stop()
        if self._cert_refresher is not None:
            await self._cert_refresher.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self.parts is not None:
            await worker_module.close_worker(self.parts)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert self.loop is not None
        await self.loop.shutdown_asyncgens()
        await self.loop.shutdown_default_executor()

    def _wait_engines_idle(self) -> None:
        """Wait (a few steps at most) until no engine has a step due: the step after the last
        request ends (its scheduler stats) then reaches the worker while it still reads its
        socket. Sent to a worker already closed, it would hold the engine's exit for its output
        socket's linger (4 s)."""
        engines = [e.engine for e in self.engines if e.thread.is_alive()]
        if not engines:
            return
        deadline = time.monotonic() + 3 * max(e.config.step_time for e in engines) + 0.05
        while any(e.scheduler.has_work() for e in engines) and time.monotonic() < deadline:
            time.sleep(0.005)

    def _close(self, timeout: float) -> int:
        """Stop the worker's loop and the engines; 0 when everything stopped cleanly."""
        if self._stopped:
            return self._code
        self._stopped = True
        code = 0
        try:
            if self.loop is not None and self.thread is not None and self.thread.is_alive():
                self._wait_engines_idle()
                try:
                    self.call(self._unserve(), timeout)
                except Exception:  # noqa: BLE001 - reported in the log and the exit code
                    logging.getLogger("tests.inprocess").exception("closing the in-process worker failed")
                    self.log.append("[tests] closing the in-process worker failed (see the test's log)")
                    code = 1
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.thread.join(timeout)
                if self.thread.is_alive():
                    self.log.append("[tests] the worker's event loop did not stop")
                    code = 1
                else:
                    self.loop.close()
            for engine in self.engines:
                engine_code = engine.stop(timeout)
                if engine_code != 0:
                    self.log.append(f"[tests] engine thread ended with {engine_code}")
                    code = code or engine_code
        finally:
            logging.getLogger().removeHandler(self._handler)
            if self._level is not None:
                _pop_level(self._level)
            if self.runtime is not None:
                self.runtime.cleanup()
            for k, v in self._saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self._code = code
        return code

