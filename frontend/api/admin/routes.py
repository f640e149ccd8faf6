"""Operator routes, with vLLM 0.32's gating: the development routes exist only with
`VLLM_SERVER_DEV_MODE=1` (vLLM's `register_vllm_dev_api_routers` and its RL router), the profiler
routes only when the deployment has a profiler configured, `/tokenizer_info` only with
`--enable-tokenizer-info-endpoint`; elsewhere they are 404, as in vLLM.

Where the engine does the work (sleep, wake up, pause, resume, cache resets, collective RPC,
profiling), the route is EngineCore utility calls: one to every engine of the deployment, from
whichever worker received the HTTP request, so it happens once per deployment. The state that
results (sleeping, paused) lives in the engines, so every worker sees the same answer to
`/is_sleeping` and `/is_paused`. `/abort_requests` (dev mode) reaches every worker through
`peer_abort.py`.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend import __version__, environment
from vllm_pyfrontend.engine.client import UtilityError
from vllm_pyfrontend.engine.kv_events import KvEventsConfig
from vllm_pyfrontend.engine.types import EngineDeadError
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.peer_abort import install as install_peer_abort
from vllm_pyfrontend.serving.peer_abort import ALL, PEER_ABORT, abort_owner
from vllm_pyfrontend.serving.state import STATE

_json = msgspec.json.encode
PAUSE_MODES = ("abort", "wait", "keep")


def dev_mode() -> bool:
    """vLLM's VLLM_SERVER_DEV_MODE (an int flag: "1" on, "0" or unset off)."""
    return environment.server_dev_mode()


def _ok(body: Any | None = None) -> web.Response:
    if body is None:
        return web.Response(status=200)
    return web.Response(body=_json(body), content_type="application/json")


def _query_int(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise APIError(400, f"Query parameter `{name}` must be an integer, got {raw!r}.", f"query.{name}") from None
    if not lo <= value <= hi:
        raise APIError(400, f"Query parameter `{name}` must be in [{lo}, {hi}], got {value}.", f"query.{name}")
    return value


def _query_bool(request: web.Request, name: str, default: bool) -> bool:
    raw = request.query.get(name)
    if raw is None:
        return default
    value = raw.lower()
    if value in ("true", "1", "yes", "on", "t", "y"):
        return True
    if value in ("false", "0", "no", "off", "f", "n"):
        return False
    raise APIError(400, f"Query parameter `{name}` must be a boolean, got {raw!r}.", f"query.{name}")


def _query_mode(request: web.Request) -> str:
    mode = request.query.get("mode", "abort")
    if mode not in PAUSE_MODES:
        raise APIError(400, f"Query parameter `mode` must be 'abort', 'wait' or 'keep', got {mode!r}.", "query.mode")
    return mode


async def _all_engines(request: web.Request, method: str, *args: Any, timeout: float = 300) -> list[Any]:
    """`EngineCore.<method>(*args)` on every engine (as vLLM's data-parallel client does)."""
    engine = request.app[STATE].engine
    try:
        return list(await asyncio.gather(*(engine.call_utility(method, *args, engine_index=i, timeout=timeout)
                                           for i in engine.engine_indices)))
    except UtilityError as e:
        raise APIError(500, f"The engine failed `{method}`: {e}") from None
    except EngineDeadError as e:
        raise APIError(503, f"The engine is not available: {e}") from None
    except TimeoutError:
        raise APIError(504, f"The engine did not answer `{method}` within {timeout:g} s.") from None


# -- sleep (vllm/entrypoints/serve/dev/sleep) -----------------------------------------------
async def handle_sleep(request: web.Request) -> web.Response:
    level = _query_int(request, "level", 1, 0, 2)
    mode = _query_mode(request)
    await _all_engines(request, "sleep", level, mode)
    return _ok({"status": "sleeping", "level": level})


async def handle_release_kv_cache_memory(request: web.Request) -> web.Response:
    await _all_engines(request, "release_kv_cache_memory")
    return _ok({"status": "kv_cache_released"})


async def handle_wake_up(request: web.Request) -> web.Response:
    tags = request.query.getall("tags", []) or None
    awake = all(await _all_engines(request, "wake_up", tags))
    return _ok({"status": "awake" if awake else "sleeping", "tags": tags})


async def handle_is_sleeping(request: web.Request) -> web.Response:
    return _ok({"is_sleeping": any(await _all_engines(request, "is_sleeping"))})


# -- caches (vllm/entrypoints/serve/dev/cache) ------------------------------------------------
async def handle_reset_prefix_cache(request: web.Request) -> web.Response:
    running = _query_bool(request, "reset_running_requests", False)
    external = _query_bool(request, "reset_external", False)
    return _ok({"success": bool(all(await _all_engines(request, "reset_prefix_cache", running, external)))})


async def handle_reset_mm_cache(request: web.Request) -> web.Response:
    await _all_engines(request, "reset_mm_cache")
    return _ok()


async def handle_reset_encoder_cache(request: web.Request) -> web.Response:
    await _all_engines(request, "reset_encoder_cache")
    return _ok()


# -- collective RPC (vllm/entrypoints/serve/dev/rpc) ------------------------------------------
async def handle_collective_rpc(request: web.Request) -> web.Response:
    body = await _json_body(request)
    if not isinstance(body, dict):
        raise APIError(400, "Request body must be a JSON object")
    method = body.get("method")
    if method is None:
        raise APIError(400, "Missing 'method' in request body")
    if not isinstance(method, str):
        raise APIError(400, "'method' must be a string (the name of a worker method).")
    args = body.get("args", [])
    kwargs = body.get("kwargs", {})
    timeout = body.get("timeout")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise APIError(400, "'args' must be a list and 'kwargs' an object.")
    results = (await _all_engines(request, "collective_rpc", method, timeout, args, kwargs))[0]
    if results is None:
        return _ok()
    out = [r if r is None or isinstance(r, (dict, list)) else str(r) for r in results]
    return _ok({"results": out})


# -- pause / resume (vllm/entrypoints/rl/online) ----------------------------------------------
async def handle_pause(request: web.Request) -> web.Response:
    mode = _query_mode(request)
    clear_cache = _query_bool(request, "clear_cache", True)
    try:
        await _all_engines(request, "pause_scheduler", mode, clear_cache)
    except APIError as e:
        return web.Response(status=e.status, body=_json({"error": e.message}), content_type="application/json")
    return _ok({"status": "paused"})


async def handle_resume(request: web.Request) -> web.Response:
    try:
        await _all_engines(request, "resume_scheduler")
    except APIError as e:
        return web.Response(status=500, body=_json({"error": f"Failed to resume generation: {e.message}"}),
                            content_type="application/json")
    return _ok({"status": "resumed"})


async def handle_is_paused(request: web.Request) -> web.Response:
    return _ok({"is_paused": any(await _all_engines(request, "is_scheduler_paused"))})


async def handle_dev_abort_requests(request: web.Request) -> web.Response:
    """Abort the given answered ids, or with none every request in flight, deployment-wide."""
    body = await _json_body(request, "Invalid JSON format")
    if not isinstance(body, dict):
        raise APIError(400, "Request body must be a JSON object")
    ids = body.get("request_ids")
    peers = request.app[PEER_ABORT]
    if ids:
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise APIError(400, "'request_ids' must be a list of strings.")
        peers.abort_everywhere(ids, abort_owner(request))
        return _ok({"status": "aborted", "aborted": len(ids)})
    count = peers.abort_everywhere([ALL], abort_owner(request))
    return _ok({"status": "aborted", "aborted": count})


# -- server info (vllm/entrypoints/serve/dev/server_info) -------------------------------------
async def handle_server_info(request: web.Request) -> web.Response:
    fmt = request.query.get("config_format", "text")
    if fmt not in ("text", "json"):
        raise APIError(400, f"Query parameter `config_format` must be 'text' or 'json', got {fmt!r}.",
                       "query.config_format")
    state = request.app[STATE]
    config = {
        "model": state.config.model,
        "served_model_name": state.model_names,
        "max_model_len": state.max_model_len,
        "engines": [i.to_json() for i in state.engine.engine_infos],
        "frontend": "vllm-pyfrontend",
        "frontend_version": __version__,
        "num_workers": state.config.num_workers,
    }
    # vLLM lists its VLLM_* settings, leaving out any whose name holds "KEY".
    env = environment.vllm_variables()
    system = {"python_version": sys.version, "python_platform": platform.platform(),
              "os": platform.system(), "machine": platform.machine(), "cpu_count": os.cpu_count()}
    return _ok({"vllm_config": json.dumps(config) if fmt == "text" else config, "vllm_env": env,
                "system_env": system})


# -- profiler (vllm/entrypoints/serve/profile) ------------------------------------------------
async def handle_start_profile(request: web.Request) -> web.Response:
    body = await request.read()
    overrides: dict[str, Any] = {}
    if body:
        data = await _json_body(request)
        if isinstance(data, dict):
            overrides = {k: data[k] for k in ("profile_prefix", "delay_iterations", "max_iterations")
                         if data.get(k) is not None}
    await _all_engines(request, "profile", True, overrides.get("profile_prefix"),
                       overrides.get("delay_iterations"), overrides.get("max_iterations"))
    return _ok()


async def handle_stop_profile(request: web.Request) -> web.Response:
    await _all_engines(request, "profile", False)
    return _ok()


# -- tokenizer info (vllm/entrypoints/serve/tokenize, --enable-tokenizer-info-endpoint) -------
_TOKENIZER_INFO_DROPPED = ("vocab_file", "merges_file", "add_bos_token", "add_eos_token", "tokenizer_class",
                           "auto_map")


def tokenizer_info(model_dir: str, tokenizer_source: str | None, chat_template: str | None) -> dict[str, Any]:
    """vLLM's TokenizerInfo: the tokenizer's init kwargs (tokenizer_config.json as the tokenizer
    loaded it), its class, the added tokens by id, and the server's chat template."""
    root = tokenizer_source or model_dir
    try:
        with open(os.path.join(root, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        cfg = {}
    info: dict[str, Any] = {"tokenizer_class": cfg.get("tokenizer_class") or "PreTrainedTokenizerFast"}
    for k, v in cfg.items():
        if k in _TOKENIZER_INFO_DROPPED or k == "added_tokens_decoder":
            continue
        info[k] = v.get("content", v) if isinstance(v, dict) and "content" in v else v
    info.setdefault("truncation_side", "right")
    info["name_or_path"] = root
    info["is_local"] = os.path.isdir(root)
    info["local_files_only"] = False
    added: dict[str, str] = {}
    try:
        with open(os.path.join(root, "tokenizer.json"), encoding="utf-8") as f:
            for tok in json.load(f).get("added_tokens") or []:
                added[str(tok["id"])] = tok["content"]
    except (OSError, ValueError, KeyError):
        for k, v in (cfg.get("added_tokens_decoder") or {}).items():
            added[str(k)] = v.get("content") if isinstance(v, dict) else v
    info["added_tokens_decoder"] = added
    info["backend"] = "tokenizers"
    if chat_template:
        info["chat_template"] = chat_template
    return info


def tokenizer_info_route(state) -> Any:
    """/tokenizer_info's handler: the answer is built once per worker (off the event loop, on
    the first call) and kept by the handler."""
    answer: list[dict[str, Any]] = []

    async def handle_tokenizer_info(request: web.Request) -> web.Response:
        if not answer:
            template = state.template.source if state.template is not None else None
            info = await asyncio.get_running_loop().run_in_executor(
                None, tokenizer_info, state.config.model, state.config.tokenizer, template)
            answer[:] = [info]
        return _ok(answer[0])

    return handle_tokenizer_info


async def _json_body(request: web.Request, message: str = "JSON decode error") -> Any:
    raw = await request.app[STATE].read_body(request)
    try:
        return json.loads(raw or b"null")
    except ValueError as e:
        raise APIError(400, f"{message}: {e}") from None


async def handle_kv_event_sources(request: web.Request) -> web.Response:
    """Where each engine publishes its KV cache events, for a gateway's cache-aware routing: a
    bare JSON array, one entry per data parallel rank (`data_parallel_rank`, `endpoint`,
    `replay_endpoint`, `topic`), as vLLM serves it, and each rank's `role` (prefill or decode)
    in a disaggregated deployment; empty when the engines publish none."""
    state = request.app[STATE]
    config = state.config
    events = KvEventsConfig.from_engine_args(config.engine_args)
    if events is None:
        return _ok([])
    sources = events.describe(config.engine_indices, config.policy.kv_events_host)
    roles = state.engine.roles
    if roles is not None:  # a disaggregated deployment: which ranks prefill, which decode
        for source in sources:
            source["role"] = roles.role(source["data_parallel_rank"])
    return _ok(sources)


def add_routes(app: web.Application) -> None:
    """Register the operator routes this deployment serves (see the module docstring)."""
    app.router.add_get("/kv_event_sources", handle_kv_event_sources)
    policy = app[STATE].config.policy
    if policy.enable_tokenizer_info_endpoint:
        app.router.add_get("/tokenizer_info", tokenizer_info_route(app[STATE]))
    if dev_mode():
        install_peer_abort(app)
        r = app.router
        r.add_get("/server_info", handle_server_info)
        r.add_post("/sleep", handle_sleep)
        r.add_post("/release_kv_cache_memory", handle_release_kv_cache_memory)
        r.add_post("/wake_up", handle_wake_up)
        r.add_get("/is_sleeping", handle_is_sleeping)
        r.add_post("/reset_prefix_cache", handle_reset_prefix_cache)
        r.add_post("/reset_mm_cache", handle_reset_mm_cache)
        r.add_post("/reset_encoder_cache", handle_reset_encoder_cache)
        r.add_post("/collective_rpc", handle_collective_rpc)
        r.add_post("/pause", handle_pause)
        r.add_post("/resume", handle_resume)
        r.add_get("/is_paused", handle_is_paused)
        r.add_post("/abort_requests", handle_dev_abort_requests)
    if policy.profiler_enabled:
        app.router.add_post("/start_profile", handle_start_profile)
        app.router.add_post("/stop_profile", handle_stop_profile)
