"""A worker process: one aiohttp server on a shared port + one engine client slot.

Started by the supervisor as `python -m vllm_pyfrontend.server.worker --config-json '<WorkerConfig>'`.
Signals: SIGTERM/SIGINT drain (stop accepting, let in-flight requests finish up to
`shutdown_timeout`, then cancel the rest, which aborts them in the engine); SIGUSR1 means the
supervisor saw the engine die (fail in-flight requests, /health turns 503); SIGHUP (with
--api-keys-file) swaps in the key table the supervisor published (frontend/tenants).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from vllm_pyfrontend.chat.template import load_chat_template
from vllm_pyfrontend import environment
from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.engine.client import EngineClient
from vllm_pyfrontend.engine.types import EngineInfo
from vllm_pyfrontend.llm.sampling import GenerationDefaults
from vllm_pyfrontend.metrics import MetricsRelay
from vllm_pyfrontend.model_config import ModelConfig
from vllm_pyfrontend.server import log_lines
from vllm_pyfrontend.server.app import build_app
from vllm_pyfrontend.api.pooling.model import POOLING_TASKS, PoolingModel, engine_tasks
from vllm_pyfrontend.server.connections import ConnectionGuard, GuardedSite
from vllm_pyfrontend.server.malloc_heap import release_free_heap
from vllm_pyfrontend.server.tls import make_ssl_context
from vllm_pyfrontend.serving.lora import lora_store
from vllm_pyfrontend.serving.state import ServerState
from vllm_pyfrontend.text.tokenizer import Tokenizer

log = logging.getLogger("vllm_pyfrontend.server.worker")

ENGINE_INFO_FILE = "engine-info.json"
LISTEN_BACKLOG = 4096


def make_listen_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, type_, proto, _, addr = infos[0]
    sock = socket.socket(family, type_, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(addr)
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


def _write_engine_infos(runtime_dir: str, infos: list[EngineInfo]) -> None:
    path = os.path.join(runtime_dir, ENGINE_INFO_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump([i.to_json() for i in infos], f)
    os.replace(tmp, path)


# Young-generation threshold of the cyclic garbage collector (CPython's default is 700).
GC_GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Keep the cyclic collector off the per-token path. Everything built at startup (tokenizer
    tables, the chat template, parsers, the aiohttp app: ~80k objects) is frozen out of its reach,
    and the young generation is collected every 50k net container allocations instead of 700.
    Per-token work allocates short-lived lists and dicts that reference counting frees; with the
    default threshold the collector still ran hundreds of times a second under 1024 streams and
    promoted each stream's objects into the old generation, whose full collections took 80-140 ms
    each (16 per worker in a 25 s decode run), stalling every stream of the worker. Cyclic
    garbage is still collected, just in larger batches."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)
    release_free_heap()


@dataclass
class SharedParts:
    """What every worker of a deployment builds identically from its config: loaded once in a
    worker template (server/preload.py) and inherited by the workers it forks."""

    tokenizer: Tokenizer
    template: Any
    defaults: GenerationDefaults
    model_config: ModelConfig
    key: tuple

    @staticmethod
    def key_of(config: WorkerConfig) -> tuple:
        """The config fields the shared parts are built from."""
        return (config.model, config.tokenizer, config.chat_template, config.generation_config,
                config.policy.tokenizer_backend)

    @classmethod
    def load(cls, config: WorkerConfig) -> "SharedParts":
        tokenizer = Tokenizer.load(config.tokenizer or config.model, backend=config.policy.tokenizer_backend)
        tokenizer.detokenizer_vocab.build_tables()  # (shared by the forked workers)
        template = load_chat_template(config.model, config.chat_template)
        tokenizer.use_prompt_anchors(template.source if template is not None else None)
        return cls(
            tokenizer=tokenizer,
            template=template,
            defaults=GenerationDefaults.load(config.model, config.generation_config),
            model_config=ModelConfig.load(config.model),
            key=cls.key_of(config),
        )


@dataclass
class WorkerParts:
    """A worker's objects, as `build_worker` makes them: `run_worker` serves `app`, and
    `close_worker` closes them once the HTTP server has stopped (the in-process test tier,
    tests/inprocess.py, serves and closes the same objects)."""

    engine: EngineClient
    state: ServerState
    app: web.Application
    kv_events: Any  # the KV event subscriber of prefix-aware routing, or None


async def build_worker(config: WorkerConfig, shared: SharedParts | None = None) -> WorkerParts:
    """The engine client (started: the engines' ready responses read), the serving state and
    the aiohttp app of one worker. `shared`: the parts loaded by a worker template before it
    forked this worker (loaded here when absent or built from other config fields)."""
    if shared is None or shared.key != SharedParts.key_of(config):
        shared = SharedParts.load(config)
    tokenizer, template = shared.tokenizer, shared.template
    defaults, model_config = shared.defaults, shared.model_config
    log.info("tokenizer backend: %s; chat template: %s", tokenizer.backend, "yes" if template else "none")

    # The engine's reports (scheduler stats, iterations, migrations) go to the metrics `state`
    # owns, once it is built from the started engine (below).
    observer = MetricsRelay()
    engine = EngineClient(
        client_index=(config.worker_index if config.engine_client_index is None
                      else config.engine_client_index),
        input_address=config.input_address,
        output_address=config.output_address,
        engine_indices=config.engine_indices,
        vocab_size=model_config.vocab_size or tokenizer.vocab_size,
        engine_timeout=config.engine_timeout,
        max_logprobs=int(config.engine_flag("--max-logprobs") or 20),  # the engine's flag (vLLM's default 20)
        migration_limit=config.policy.migration_limit,
        migration_timeout=config.policy.migration_timeout,
        observer=observer,
        prefill_engines=config.policy.prefill_engines,
        prefill_min_prompt_tokens=config.policy.prefill_min_prompt_tokens,
    )
    known = [EngineInfo.from_json(d) for d in config.engine_infos] if config.engine_infos else None
    infos = await engine.start(engine_infos=known, timeout=config.engine_ready_timeout)
    try:
        _write_engine_infos(config.runtime_dir, infos)
    except OSError as e:
        log.warning("could not record engine info: %s", e)

    kv_events = engine.start_prefix_routing(config.engine_args, config.policy.routing_policy,
                                            config.policy.routing_prefix_weight, config.policy.kv_events_host)
    tracer = None
    if config.policy.otlp_traces_endpoint:
        from vllm_pyfrontend.tracing import RequestTracer  # OpenTelemetry only with the flag

        tracer = RequestTracer(config.policy.otlp_traces_endpoint, config.worker_index)
    supported_tasks = await engine_tasks(engine)
    pooling_model = None
    if any(t in POOLING_TASKS for t in supported_tasks):
        import numpy  # noqa: F401 - the pooling routes' (imported where used), loaded before a request needs it

        overrides = config.engine_flag("--hf-overrides")
        pooling_model = PoolingModel.load(config.model, supported_tasks, config.pooler_config,
                                          json.loads(overrides) if overrides else None)
        log.info("pooling model: tasks %s, pooling task %s", supported_tasks, pooling_model.pooling_task)
    state = ServerState(config, tokenizer, template, engine, defaults, model_config, tracer=tracer,
                        supported_tasks=supported_tasks, pooling_model=pooling_model, loras=lora_store(config))
    engine.drain_hooks = state.drain.hooks  # one write per stream per drain
    observer.metrics = state.metrics
    state.metrics.record_cache_config(engine.engine_infos)  # vllm:cache_config_info
    if engine.roles is not None:  # vllm:engine_role_info
        state.metrics.record_engine_roles({e: engine.roles.role(e) for e in engine.engine_indices})
    app = build_app(state)
    return WorkerParts(engine, state, app, kv_events)


def make_runner(app: web.Application, policy) -> web.AppRunner:
    """The aiohttp runner of a worker's app, with the worker's HTTP settings (`policy`)."""
    return web.AppRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        # Our own drain window runs first (wait_idle below); this bound only covers the
        # final close of connections, after which remaining handlers are cancelled.
        shutdown_timeout=1.0,
        # Idle connections close after this; 0 closes them after each response (as uvicorn).
        keepalive_timeout=policy.http_timeout_keep_alive,
        # vLLM's h11 limits: a head of up to --h11-max-incomplete-event-size bytes (the
        # ConnectionGuard bounds the whole head; aiohttp's per-line limits, 8190 bytes by
        # default, must not refuse earlier) and --h11-max-header-count header lines.
        max_line_size=policy.h11_max_incomplete_event_size,
        max_field_size=policy.h11_max_incomplete_event_size,
        max_headers=policy.h11_max_header_count,
    )


async def close_worker(parts: WorkerParts) -> None:
    """Close what `build_worker` made, once nothing is served any more."""
    if parts.kv_events is not None:
        await parts.kv_events.close()
    await parts.engine.close()
    if parts.state.tracer is not None:
        parts.state.tracer.shutdown()  # flush the batched spans


async def run_worker(config: WorkerConfig, shared: SharedParts | None = None) -> int:
    """Serve until SIGTERM/SIGINT (`shared`: see build_worker)."""
    loop = asyncio.get_running_loop()
    worker = await build_worker(config, shared)
    engine, state, app = worker.engine, worker.state, worker.app
    policy = config.policy
    runner = make_runner(app, policy)
    await runner.setup()
    if config.listen_fd is not None:
        sock = socket.socket(fileno=config.listen_fd)
        sock.setblocking(False)
    else:
        sock = make_listen_socket(config.host, config.port, config.reuse_port)
    # The site listen()s again with this backlog (a socket handed over may have a smaller one):
    # bursts of connections (1024 streams opening at once) would overflow it and wait for SYN
    # retransmits.
    guard = ConnectionGuard(policy.http_header_timeout, policy.max_connections_per_worker,
                            policy.h11_max_incomplete_event_size)
    ssl_context = make_ssl_context(policy)
    site = GuardedSite(runner, sock, guard, backlog=LISTEN_BACKLOG, ssl_context=ssl_context,
                       shared=config.listen_fd is not None)
    await site.start()
    cert_refresher = None
    if ssl_context is not None and policy.enable_ssl_refresh:
        from vllm_pyfrontend.server.tls_refresh import CertRefresher

        cert_refresher = CertRefresher(ssl_context, policy.ssl_keyfile, policy.ssl_certfile, policy.ssl_ca_certs)
    grpc_frontend = None
    if config.grpc_port is not None:
        from vllm_pyfrontend.api.grpc.server import GrpcFrontend  # grpcio only with --grpc-port

        # As vLLM: gRPC follows the HTTP host, or IPv4 loopback when HTTP is a Unix socket.
        grpc_host = "127.0.0.1" if sock.family == socket.AF_UNIX else config.host
        grpc_frontend = GrpcFrontend(state, grpc_host, config.grpc_port)
        await grpc_frontend.start()

    state.multimodal.start_loading()  # a vision/audio model's processor, while already serving
    tune_gc()
    stop = asyncio.Event()

    def on_term() -> None:
        log.info("draining: stop accepting, waiting up to %.0fs for %d in-flight request(s)",
                 config.shutdown_timeout, state.in_flight)
        state.draining = True
        state.metrics.set_draining(True)
        stop.set()

    def on_engine_dead() -> None:
        log.error("supervisor reports the engine died: failing in-flight requests")
        engine.mark_dead("The engine died.")

    def on_engine_restarting() -> None:
        log.warning("supervisor restarts the engine: requests wait for it")
        engine.engine_restarting()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_term)
    loop.add_signal_handler(signal.SIGUSR1, on_engine_dead)
    loop.add_signal_handler(signal.SIGUSR2, on_engine_restarting)
    if state.tenants is not None:  # the supervisor published a new key table (--api-keys-file)
        loop.add_signal_handler(signal.SIGHUP, state.tenants.reload)

    if config.status_fd is not None:
        try:
            os.write(config.status_fd, b"ready\n")
        except OSError:
            pass
    if sock.family == socket.AF_UNIX:
        where = f"unix:{sock.getsockname()}"
    else:
        where = "%s:%s" % sock.getsockname()[:2]
    log.info("serving on %s%s (engine vLLM %s, max_model_len %d)", where, " (https)" if policy.ssl_certfile else "",
             engine.vllm_version, state.max_model_len)
    state.metrics.set_serving(True)

    await stop.wait()
    # The drain window: in-flight requests finish while the worker still answers, so the drain
    # is visible (/ready 503, new /v1 requests 503, /metrics vllm_frontend_workers_draining);
    # then stop listening.
    # (wait_for with a 0 s drain window times out even when nothing is in flight)
    drained = state.in_flight == 0 or await state.wait_idle(config.shutdown_timeout)
    if not drained:
        log.warning("drain timeout: cancelling %d request(s)", state.in_flight)
    if grpc_frontend is not None:
        await grpc_frontend.stop(1.0)
    await site.stop()
    if cert_refresher is not None:
        await cert_refresher.stop()
    await runner.cleanup()
    await close_worker(worker)
    return 0


def _setup_logging(config: WorkerConfig) -> None:
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # the supervisor prefixes [worker i]
    logging.basicConfig(level=config.log_level.upper(), format=fmt, stream=sys.stderr)
    log_lines.install(fmt)  # a client's string in a message cannot start a line of its own
    # vLLM's --uvicorn-log-level: the HTTP server's own logs (aiohttp's here)
    level = config.policy.uvicorn_log_level.upper()
    logging.getLogger("aiohttp").setLevel("DEBUG" if level == "TRACE" else level)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm_pyfrontend.server.worker")
    parser.add_argument("--config-json", required=True)
    args = parser.parse_args(argv)
    config = WorkerConfig.from_json(args.config_json)
    # API keys come through the environment (never argv); don't leave them there.
    keys = environment.take_api_keys()
    if keys is not None:
        config.api_keys = keys
    _setup_logging(config)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        pass
    return asyncio.run(run_worker(config))


if __name__ == "__main__":
    sys.exit(main())
