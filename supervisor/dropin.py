"""`vllm-pyfrontend frontend ...`: this frontend, launched by `vllm serve` in place of vLLM's own.

    VLLM_USE_RUST_FRONTEND=1 VLLM_RUST_FRONTEND_PATH=$(which vllm-pyfrontend) \\
        VLLM_PYFRONTEND_WORKERS=4 vllm serve <model> [vllm serve flags]

With those variables vLLM starts the engines, performs the engine handshake itself and then runs

    <exe> frontend --listen-fd N --input-listener-fd N --output-listener-fd N
          --engine-start-index S --engine-count C --data-parallel-size D
          [--coordinator-address A] --args-json '<non-default vllm serve args>'

(vllm/v1/utils.py, RustFrontendProcessManager). The HTTP listener is already bound to
`--host/--port`; the two ZMQ fds are listeners for ONE engine client (client_index 0).

Process tree under vLLM's API launcher:

    vllm-pyfrontend frontend ...        this module: spawns, watches, restarts, stops
     ├─ router (python -m vllm_pyfrontend.router)   owns the two ZMQ fds = the one client slot
     └─ worker 0 … N-1 (vllm_pyfrontend.server.worker)  share the inherited HTTP listener fd

The router waits for the engines' ready responses, then the workers start; each binds its own
ipc ROUTER/PULL pair in a private runtime directory, which the router connects to while playing
the engines (see frontend/router/router.py). Workers: `--workers N`, else VLLM_PYFRONTEND_WORKERS,
else the number of CPU cores.

On SIGTERM (vLLM's shutdown) workers drain for `--shutdown-timeout` (vLLM's flag, default 0),
then the router stops; vLLM allows at least 5 s before it kills the tree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_pyfrontend import environment
from vllm_pyfrontend.config import WorkerConfig, WorkerPolicy, tokenizer_backend_from_env
from vllm_pyfrontend.environment import WORKERS_ENV
from vllm_pyfrontend.server.tls import check_tls_files
from vllm_pyfrontend.supervisor.cli import default_workers
from vllm_pyfrontend.supervisor.flag_groups import human_readable_int
from vllm_pyfrontend.supervisor.frontend_flags import refused_serve_args
from vllm_pyfrontend.supervisor.process import Child, describe_exit, log_as, wait_all
from vllm_pyfrontend.supervisor.runtime import ClientAddresses, RuntimeDir
from vllm_pyfrontend.supervisor.workers import (
    WORKER_EVENTS, Fatal, WorkerPool, WorkerSlot, child_env, slot_config_fields,
)

log = logging.getLogger(__name__)

WORKER_READY_TIMEOUT_S = 120.0
VLLM_MIN_SHUTDOWN_WAIT_S = 5.0  # vLLM kills the frontend's tree this long after its SIGTERM
WORKER_KILL_GRACE_S = 2.5  # past the drain window (a loaded box exits slowly)
ROUTER_STOP_TIMEOUT_S = 1.0

# `vllm serve` frontend flags this frontend does not implement, set away from vLLM's default, are
# reported at startup (supervisor/frontend_flags.py), so a silently different server is no surprise.

# -------------------------------------------------------------------- command line


@dataclass
class FrontendArgs:
    """The `frontend` subcommand's flags, as vLLM passes them, plus our `--workers`."""

    listen_fd: int
    input_fd: int
    output_fd: int
    engine_start_index: int = 0
    engine_count: int = 1
    data_parallel_size: int = 1
    coordinator_address: str | None = None
    serve_args: dict[str, Any] = field(default_factory=dict)
    workers: int = 1
    log_level: str = "info"

    @property
    def engine_indices(self) -> list[int]:
        return list(range(self.engine_start_index, self.engine_start_index + self.engine_count))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vllm-pyfrontend frontend",
        description="Serve the OpenAI API for engines that `vllm serve` started "
        "(VLLM_USE_RUST_FRONTEND=1 VLLM_RUST_FRONTEND_PATH=<this executable>).",
    )
    p.add_argument("--listen-fd", type=int, required=True, help="bound HTTP listener")
    p.add_argument("--input-listener-fd", type=int, required=True, help="engine input ROUTER listener")
    p.add_argument("--output-listener-fd", type=int, required=True, help="engine output PULL listener")
    p.add_argument("--engine-start-index", type=int, default=0)
    p.add_argument("--engine-count", type=int, default=1)
    p.add_argument("--data-parallel-size", type=int, default=1)
    p.add_argument("--coordinator-address", default=None)
    p.add_argument("--grpc-listen-fd", type=int, default=None)
    p.add_argument("--args-json", default="{}", help="vllm serve's non-default args (JSON)")
    p.add_argument("--workers", type=int, default=None,
                   help=f"worker processes (default: ${WORKERS_ENV}, else the CPU cores)")
    return p


def parse_frontend_args(argv: Sequence[str], environ: dict[str, str] | None = None) -> FrontendArgs:
    """Parse the arguments after `frontend`. Unknown flags (a newer vLLM) are logged, not fatal.
    `environ`: instead of this process's environment."""
    ns, unknown = build_parser().parse_known_args(list(argv))
    if unknown:
        log.warning("ignoring frontend flags this version does not know: %s", " ".join(unknown))
    try:
        serve_args = json.loads(ns.args_json)
    except ValueError as e:
        raise SystemExit(f"--args-json is not JSON: {e}") from None
    if not isinstance(serve_args, dict):
        raise SystemExit("--args-json must be a JSON object")
    if ns.grpc_listen_fd is not None:
        log.warning("--grpc-port is not supported by this frontend; the gRPC listener is unused")
    workers = ns.workers
    if workers is None:
        try:
            workers = environment.workers(environ)
        except ValueError as e:
            raise SystemExit(str(e)) from None
    if workers is None:
        workers = default_workers()
    if workers < 1:
        raise SystemExit("the number of workers must be at least 1")
    return FrontendArgs(
        listen_fd=ns.listen_fd,
        input_fd=ns.input_listener_fd,
        output_fd=ns.output_listener_fd,
        engine_start_index=ns.engine_start_index,
        engine_count=ns.engine_count,
        data_parallel_size=ns.data_parallel_size,
        coordinator_address=ns.coordinator_address,
        serve_args=serve_args,
        workers=workers,
        log_level=environment.vllm_logging_level(environ).lower(),
    )


# -------------------------------------------------------------------- vllm serve args


@dataclass
class ServeSettings:
    """What the workers need from `vllm serve`'s arguments."""

    model: str  # local directory
    served_model_names: list[str]
    model_root: str | None = None  # the model as `vllm serve` was given it (/v1/models `root`)
    host: str = "0.0.0.0"
    port: int = 8000
    tokenizer: str | None = None
    chat_template: str | None = None
    max_model_len: int | None = None
    generation_config: str = "auto"
    pooler_config: dict | None = None  # vLLM's --pooler-config (the pooling routes' defaults)
    shutdown_timeout: float = 0.0
    engine_ready_timeout: float = 600.0
    api_keys: list[str] = field(default_factory=list, repr=False)  # never printed
    # vLLM's security, request-hygiene and parser flags, same names (see WorkerPolicy).
    policy: WorkerPolicy = field(default_factory=WorkerPolicy)
    # vLLM engine flags the workers' multimodal processor reads (WorkerConfig.engine_args).
    engine_args: list[str] = field(default_factory=list)


# `vllm serve` args that shape the multimodal processor and its model config: the workers build
# vLLM's ModelConfig from them (frontend/multimodal/model.py), as vLLM's API server does from
# the same flags (--model and --tokenizer go as the local directories resolved here); and
# `max_logprobs`, the bound the workers check logprobs requests against; `stream_interval`, the
# tokens a streamed chunk waits for.
PROCESSOR_SERVE_ARGS = (
    "limit_mm_per_prompt", "mm_processor_kwargs", "media_io_kwargs", "allowed_local_media_path",
    "allowed_media_domains", "mm_processor_cache_gb", "mm_processor_cache_type",
    "mm_shm_cache_max_object_size_mb", "enable_mm_embeds", "interleave_mm_strings", "trust_remote_code",
    "tokenizer_mode", "hf_overrides", "hf_config_path", "config_format", "max_model_len", "dtype",
    "max_logprobs", "stream_interval",
)


def processor_engine_args(args: dict[str, Any], tokenizer: str | None = None) -> list[str]:
    """The serve args of PROCESSOR_SERVE_ARGS (as vLLM jsonified them) back as vLLM engine flags."""
    out: list[str] = []
    for key in PROCESSOR_SERVE_ARGS:
        value = args.get(key)
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        elif isinstance(value, list):
            if value:
                out += [flag, *(str(v) for v in value)]
        else:
            out += [flag, str(value)]
    if tokenizer:
        out += ["--tokenizer", tokenizer]
    return out


def _str_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _pooler_config(value: Any) -> dict | None:
    """vLLM's jsonified `pooler_config`: a map, a JSON string, or nothing."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return dict(value) if isinstance(value, dict) else None


def _local_dir(name: str, revision: Any = None) -> str:
    """A model or tokenizer as a local directory: a path, or the HF cache vLLM downloaded into."""
    if os.path.isdir(name):
        return os.path.abspath(name)
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(name, revision=revision, local_files_only=True)
    except Exception as e:  # not installed, not cached, bad id: one clear message
        raise ValueError(f"{name!r} is neither a local directory nor in the Hugging Face cache "
                         f"({type(e).__name__}: {e})") from None


def serve_settings(args: dict[str, Any], environ: dict[str, str] | None = None) -> ServeSettings:
    """Map `vllm serve`'s argparse names (as vLLM jsonified them) onto the workers' settings."""
    model_arg = args.get("model_tag") or args.get("model")
    if not model_arg:
        raise ValueError("--args-json names no model (model_tag)")
    served = args.get("served_model_name")
    if isinstance(served, str):
        served = [served]
    max_model_len = args.get("max_model_len")
    if isinstance(max_model_len, str):
        max_model_len = human_readable_int(max_model_len)
    if isinstance(max_model_len, int) and max_model_len < 0:
        max_model_len = None  # -1 / auto: the engine decides, its ready response says
    tokenizer = args.get("tokenizer")
    for why in refused_serve_args(args):  # vLLM has started the engine already: warn, go on
        log.warning("ignored: %s", why)
    # vLLM: --api-key wins over VLLM_API_KEY.
    api_keys = [k for k in (_str_list(args.get("api_key")) or [environment.vllm_api_key(environ) or ""]) if k]
    profiler = args.get("profiler_config")
    # Under vLLM's launcher an engine's death ends the whole `vllm serve`: requests moved to wait
    # for a live engine would only wait for the shutdown, so they fail at once as vLLM's do.
    policy = WorkerPolicy.from_mapping({"migration_limit": 0, **args, "profiler_enabled": isinstance(profiler, dict)
                                        and profiler.get("profiler") is not None,
                                        "tokenizer_backend": tokenizer_backend_from_env(environ)})
    check_tls_files(policy)  # (vLLM bound the --uds socket, if any, and hands it over as listen_fd)
    tokenizer_dir = _local_dir(str(tokenizer), args.get("tokenizer_revision")) if tokenizer else None
    return ServeSettings(
        model=_local_dir(str(model_arg), args.get("revision")),
        served_model_names=list(served) if served else [str(model_arg)],
        model_root=str(model_arg),
        host=args.get("host") or "0.0.0.0",
        port=int(args.get("port") or 8000),
        tokenizer=tokenizer_dir,
        chat_template=args.get("chat_template"),
        max_model_len=max_model_len,
        generation_config=args.get("generation_config") or "auto",
        pooler_config=_pooler_config(args.get("pooler_config")),
        shutdown_timeout=float(args.get("shutdown_timeout") or 0),
        engine_ready_timeout=float(args.get("engine_ready_timeout_secs") or 600),
        api_keys=api_keys,
        policy=policy,
        engine_args=processor_engine_args(args, tokenizer_dir),
    )


# -------------------------------------------------------------------- the processes


def router_command(args: FrontendArgs, addresses: Sequence[ClientAddresses],
                   ready_timeout: float, status_fd: int, engine_info_path: str) -> list[str]:
    argv = [
        sys.executable, "-m", "vllm_pyfrontend.router",
        "--input-fd", str(args.input_fd),
        "--output-fd", str(args.output_fd),
        "--engine-start-index", str(args.engine_start_index),
        "--engine-count", str(args.engine_count),
        "--ready-timeout", str(ready_timeout),
        "--status-fd", str(status_fd),
        "--engine-info-path", engine_info_path,
        "--log-level", args.log_level,
    ]  # fmt: skip
    for a in addresses:
        argv += ["--worker-input", a.input, "--worker-output", a.output]
    return argv


class DropinSupervisor:
    """Router first (it waits for the engines), then the workers; stop in the reverse order."""

    def __init__(self, args: FrontendArgs, settings: ServeSettings):
        self.args = args
        self.settings = settings
        self._events: asyncio.Queue[tuple[str, Any, Any]] = asyncio.Queue()
        self._env = child_env()
        self._router: Child | None = None
        self._pool: WorkerPool | None = None  # made in run(), once the runtime directory exists
        self._runtime: RuntimeDir | None = None
        self._stopping = False

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        self._runtime = RuntimeDir()
        self._pool = WorkerPool(
            self._events, lambda kind, slot, child: (kind, slot, child),
            build_config=self._worker_config, runtime_dir=self._runtime.path, env=self._env,
            api_keys=self.settings.api_keys, pass_fds=(self.args.listen_fd,), logger=log,
        )
        try:
            try:
                await self._start_router()
                code = await self._event_loop()
            except Fatal as e:
                log.error("%s", e)
                code = 1
            except Exception:
                log.exception("frontend failure")
                code = 1
            await self._shutdown()
            return code
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            self._runtime.cleanup()

    # ---------------------------------------------------------------- startup

    async def _start_router(self) -> None:
        assert self._runtime is not None and self._pool is not None
        pool = self._pool
        pool.reset(self._runtime.client_addresses(self.args.workers))
        read_fd, write_fd = os.pipe()
        argv = router_command(self.args, [s.addresses for s in pool.slots],
                              self.settings.engine_ready_timeout, write_fd,
                              self._runtime.engine_info_path)
        try:
            self._router = await Child.spawn(
                "router", argv, env=self._env,
                pass_fds=(self.args.input_fd, self.args.output_fd, write_fd),
            )
        except OSError as e:
            os.close(read_fd)
            raise Fatal(f"cannot start the router: {e}") from None
        finally:
            os.close(write_fd)
            # The router owns the engine listeners now; our copies would keep them alive.
            for fd in (self.args.input_fd, self.args.output_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
        pool.watch(self._router, ("router_exit", None, self._router))
        pool.read_status(read_fd, ("router_ready", None, self._router))
        log.info("router started; waiting for engine(s) %s", self.args.engine_indices)

    @property
    def drain_timeout(self) -> float:
        """The workers' drain window. vLLM waits max(--shutdown-timeout, 5) s after its SIGTERM
        before it kills our tree; the drain, the kill grace and the router's stop fit inside."""
        t = self.settings.shutdown_timeout
        return max(0.0, min(t, max(t, VLLM_MIN_SHUTDOWN_WAIT_S) - WORKER_KILL_GRACE_S
                            - ROUTER_STOP_TIMEOUT_S - 0.5))

    def _worker_config(self, slot: WorkerSlot) -> WorkerConfig:
        s = self.settings
        assert self._runtime is not None
        return WorkerConfig(
            **slot_config_fields(slot, self._runtime),
            num_workers=self.args.workers,
            host=s.host,
            port=s.port,
            model=s.model,
            model_root=s.model_root,
            served_model_names=s.served_model_names,
            engine_indices=self.args.engine_indices,
            tokenizer=s.tokenizer,
            chat_template=s.chat_template,
            max_model_len=s.max_model_len,
            shutdown_timeout=self.drain_timeout,
            engine_ready_timeout=s.engine_ready_timeout,
            listen_fd=self.args.listen_fd,
            reuse_port=False,
            log_level=self.args.log_level,
            generation_config=s.generation_config,
            engine_client_index=0,
            pooler_config=s.pooler_config,
            policy=s.policy,
            engine_args=list(s.engine_args),
        )

    # ---------------------------------------------------------------- events

    async def _event_loop(self) -> int:
        pool = self._pool
        assert pool is not None
        serving = False
        deadline: float | None = None
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                kind, slot, child = await asyncio.wait_for(self._events.get(), timeout)
            except asyncio.TimeoutError:
                raise Fatal(f"workers {pool.not_ready()} not ready {WORKER_READY_TIMEOUT_S:.0f}s after "
                            "the engines") from None
            if kind == "signal":
                log.info("%s: shutting down", signal.Signals(slot).name)
                return 0
            if kind == "router_exit":
                assert self._router is not None
                await self._router.flush_output()
                raise Fatal(f"the router exited ({describe_exit(self._router.returncode)})")
            if kind == "router_ready":
                log.info("engines ready; starting %d worker(s)", len(pool.slots))
                await pool.spawn_all()
                deadline = time.monotonic() + WORKER_READY_TIMEOUT_S
            elif kind in WORKER_EVENTS:
                await pool.handle(kind, slot, child, serving=serving)
            if not serving and pool.all_ready:
                serving, deadline = True, None
                s = self.settings
                log.info("serving %s on http://%s:%d (%d workers behind one engine client)",
                         s.served_model_names[0], s.host, s.port, len(pool.slots))

    def _on_signal(self, sig: int) -> None:
        if not self._stopping:
            self._stopping = True
            self._events.put_nowait(("signal", sig, None))

    # ---------------------------------------------------------------- shutdown

    async def _shutdown(self) -> None:
        self._stopping = True
        workers: list[Child] = []
        if self._pool is not None:
            workers = await self._pool.stop(self.drain_timeout, WORKER_KILL_GRACE_S, kill_wait=2.0)
        router = self._router
        if router is not None:
            router.send_signal(signal.SIGTERM)
            if not await wait_all([router], ROUTER_STOP_TIMEOUT_S):
                log.warning("router did not exit: SIGKILL")
            router.kill_group(signal.SIGKILL)
            await wait_all([router], 2.0)
        for c in [*workers, *([router] if router else [])]:
            await c.flush_output(0.3)
        log.info("stopped")


# -------------------------------------------------------------------- entry point


USAGE = (
    "usage: vllm-pyfrontend frontend --listen-fd N --input-listener-fd N --output-listener-fd N "
    "[--engine-start-index S --engine-count C --data-parallel-size D] --args-json JSON [--workers N]\n"
    "Launched by vLLM: VLLM_USE_RUST_FRONTEND=1 VLLM_RUST_FRONTEND_PATH=<this executable> "
    "vllm serve <model> ..."
)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "frontend":
        print(USAGE, file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    log_as("pyfrontend", environment.vllm_logging_level())
    try:
        args = parse_frontend_args(argv[1:])
        settings = serve_settings(args.serve_args)
    except SystemExit as e:
        if isinstance(e.code, str):
            log.error("%s", e.code)
            return 2
        return e.code if isinstance(e.code, int) else 2
    except ValueError as e:
        log.error("%s", e)
        return 2
    if args.coordinator_address:
        log.warning("DP coordinator %s: request waves are not coordinated by this frontend",
                    args.coordinator_address)
    log.info("%d worker(s); engines %s; model %s", args.workers, args.engine_indices, settings.model)
    return asyncio.run(DropinSupervisor(args, settings).run())


if __name__ == "__main__":
    sys.exit(main())
