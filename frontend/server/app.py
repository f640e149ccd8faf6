"""aiohttp application: routes and the error middleware."""

from __future__ import annotations

import logging
import time

import msgspec
from aiohttp import web

from vllm_pyfrontend import __version__, environment
from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.api.anthropic import add_anthropic_routes
from vllm_pyfrontend.api.openai.chat_routes import chat_completions, handle_chat_completions
from vllm_pyfrontend.api.openai.completion_routes import completions, handle_completions
from vllm_pyfrontend.api.openai.tokenize_routes import handle_detokenize, handle_tokenize
from vllm_pyfrontend.errors import APIError, client_error
from vllm_pyfrontend.server.asgi_middleware import arrange as arrange_asgi_middleware
from vllm_pyfrontend.server.middleware import build_middlewares, error_response
from vllm_pyfrontend.server.middleware import install as install_middleware_hooks
from vllm_pyfrontend.serving.lora import add_lora_routes, model_cards as lora_model_cards
from vllm_pyfrontend.server.ops import add_routes as add_ops_routes
from vllm_pyfrontend.api.responses import add_responses_routes
from vllm_pyfrontend.api.responses.routes import create_response
from vllm_pyfrontend.api.responses.service import RESPONSES
from vllm_pyfrontend.api.pooling import add_pooling_routes
from vllm_pyfrontend.api.pooling.routes import embeddings
from vllm_pyfrontend.server.openapi import openapi_bytes
from vllm_pyfrontend.server.root_path import RootPathRouter, normalize_root
from vllm_pyfrontend.serving.state import ServerState
from vllm_pyfrontend.api.admin import routes as admin
from vllm_pyfrontend.api.openai import generate_routes as generate_tokens
from vllm_pyfrontend.api.openai import render_routes as render
from vllm_pyfrontend.api.openai import sagemaker_routes as sagemaker
from vllm_pyfrontend.api.speech import add_speech_routes
from vllm_pyfrontend.api.batches import add_batch_routes
from vllm_pyfrontend.serving.responder import ERROR_FRAMES
from vllm_pyfrontend.serving.state import STATE

log = logging.getLogger(__name__)
_json = msgspec.json.encode


def batch_endpoints(app: web.Application) -> dict:
    """What a batch line of each url runs: the endpoint that url's HTTP route calls."""
    async def responses(state, scope, body: bytes):
        return await create_response(state, app[RESPONSES], scope, body)

    return {"/v1/chat/completions": chat_completions, "/v1/completions": completions,
            "/v1/embeddings": embeddings, "/v1/responses": responses}


@web.middleware
async def error_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except (APIError, InvalidRequestError) as e:  # (the latter raised by frontend/llm's lowering)
        error = client_error(e)
        _log_stack(request, error.status)
        return _error(request, error)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        message = e.text or e.reason
        if e.status == 413:
            message = f"Request body too large: {e.text}"
        elif e.status == 404:
            message = f"Not found: {request.path}"
        elif e.status == 405:
            message = f"Method {request.method} not allowed on {request.path}"
        return _error(request, APIError(e.status, message))
    except ConnectionError:
        # The client left while the response was being prepared (reset, half-close): there is
        # nobody to answer, and aiohttp drops whatever is returned on a closed connection.
        log.debug("client gone during %s %s", request.method, request.path)
        return web.Response(status=400, text="client disconnected")
    except RecursionError as e:  # a body nested too deeply: the client's doing, not ours
        return _error(request, client_error(e))
    except Exception:  # noqa: BLE001 - every failure is an answer, never a dropped request
        log.exception("unhandled error on %s %s", request.method, request.path)
        return _error(request, APIError(500, "Internal server error."))


def _error(request: web.Request, error: APIError) -> web.Response:
    """`error` framed once, in the shape of the API style the path belongs to."""
    state = request.app.get(STATE)
    return error_response(request, error, normalize_root(state.config.policy.root_path) if state is not None else "")


def _log_stack(request: web.Request, status: int) -> None:
    """vLLM's --log-error-stack: the stack trace of an error response, in the worker's log."""
    state = request.app.get(STATE)
    if state is not None and state.config.policy.log_error_stack:
        log.error("error response %d on %s %s", status, request.method, request.path, exc_info=True)


async def handle_models(request: web.Request) -> web.Response:
    state: ServerState = request.app[STATE]
    created = int(time.time())
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": state.config.model_root or state.config.model,
            "parent": None,
            "max_model_len": state.max_model_len,
            "permission": [],
        }
        for name in state.model_names
    ]
    data.extend(lora_model_cards(state, created))
    return web.Response(body=_json({"object": "list", "data": data}), content_type="application/json")


async def handle_version(request: web.Request) -> web.Response:
    state: ServerState = request.app[STATE]
    body = {"version": state.engine.vllm_version, "frontend_version": __version__}
    if environment.use_rust_frontend():
        # Selected by vLLM's launcher in place of its Rust frontend: that frontend reports the
        # vLLM release it serves under this name (vLLM's tests compare it with vLLM's version).
        body["rust_frontend_version"] = state.engine.vllm_version
    return web.Response(body=_json(body), content_type="application/json")


def engine_load(engine) -> dict[str, dict]:
    """Each engine's latest scheduler stats as this worker received them, for /load: stats go
    to one worker per engine step, so callers compare `engine_timestamp` across workers (the
    engine's clock on the step that sent them); `timestamp` is this worker's receipt time."""
    times = engine.scheduler_stats_time
    engine_times = engine.scheduler_stats_engine_time
    roles = engine.roles
    out = {
        str(idx): {
            "num_running_reqs": stats.get("num_running_reqs", 0),
            "num_waiting_reqs": stats.get("num_waiting_reqs", 0),
            "kv_cache_usage": stats.get("kv_cache_usage", 0.0),
            "timestamp": times.get(idx, 0.0),
            "engine_timestamp": engine_times.get(idx, 0.0),
        }
        for idx, stats in engine.scheduler_stats.items()
    }
    if roles is not None:  # a disaggregated deployment: each engine's role (prefill or decode)
        for idx in roles.prefill + roles.decode:
            out.setdefault(str(idx), {})["role"] = roles.role(idx)
    return out


async def handle_load(request: web.Request) -> web.Response:
    """vLLM's /load (`server_load` = the deployment's in-flight requests, every worker's;
    `worker_load` this worker's), plus the engine's
    latest scheduler stats as this worker last received them (`engine_load`), and with
    admission control the deployment's queue against its bounds."""
    state: ServerState = request.app[STATE]
    engines = engine_load(state.engine)
    body = {"server_load": state.server_load, "worker": state.worker_index, "worker_load": state.in_flight,
            "engines": engines}
    admission = state.admission
    if admission is not None:  # the deployment-wide queue, against its bounds
        reqs, tokens = admission.totals()
        body["queue"] = {"num_unfinished_reqs": reqs, "max_num_queued_reqs": admission.max_reqs,
                         "num_prefill_tokens": tokens, "max_num_queued_tokens": admission.max_tokens}
    return web.Response(body=_json(body), content_type="application/json")


async def handle_openapi(request: web.Request) -> web.Response:
    return web.Response(body=openapi_bytes(), content_type="application/json")


def build_app(state: ServerState) -> web.Application:
    root = normalize_root(state.config.policy.root_path)
    app = web.Application(
        # (with --middleware or a SageMaker customer script: their ASGI middleware among these)
        middlewares=arrange_asgi_middleware(build_middlewares(state.config, state.metrics, state.keys),
                                            error_middleware, state.config.policy,
                                            announce=state.config.worker_index == 0),
        client_max_size=state.config.max_request_body_bytes,
        router=RootPathRouter(root) if root else None,
    )
    app[STATE] = state
    app[ERROR_FRAMES] = {}  # (API styles register their error shapes: add_anthropic_routes)
    install_middleware_hooks(app, state.config)
    add_ops_routes(app)
    app.router.add_post("/v1/chat/completions", handle_chat_completions)
    app.router.add_post("/v1/completions", handle_completions)
    app.router.add_post("/tokenize", handle_tokenize)
    app.router.add_post("/detokenize", handle_detokenize)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/version", handle_version)
    app.router.add_get("/load", handle_load)
    app.router.add_get("/openapi.json", handle_openapi)
    # API styles and route families beside chat/completions, each its own module.
    add_responses_routes(app)  # /v1/responses (api/responses, frontend/store)
    add_anthropic_routes(app)  # /v1/messages (api/anthropic)
    add_pooling_routes(app)  # embeddings, classify, score, rerank (api/pooling)
    add_lora_routes(app)  # runtime LoRA load/unload
    generate_tokens.add_routes(app)  # /inference/v1/generate, abort (scale-out)
    render.add_routes(app)  # render / derender (scale-out)
    admin.add_routes(app)  # dev-mode, profiler and tokenizer-info routes
    sagemaker.add_routes(app, chat=handle_chat_completions, completion=handle_completions)  # /ping, /invocations
    add_speech_routes(app, state.multimodal)  # /v1/audio/transcriptions, /v1/audio/translations (frontend/api/speech)
    add_batch_routes(app, batch_endpoints(app))  # /v1/files, /v1/batches; the batch runner (frontend/api/batches)
    add_quota_sync(app, state)  # tenants' counts shared with the other replicas (frontend/tenants/quota_sync.py)
    return app


def add_quota_sync(app: web.Application, state: ServerState) -> None:
    """With a keys file and a quota store shared by replicas, worker 0 of each replica keeps the
    tenants' counts in step with the other replicas' while the app runs."""
    url = state.config.policy.quota_store_url()
    if state.tenants is None or url is None or state.worker_index != 0:
        return
    from vllm_pyfrontend.tenants.quota_sync import QuotaSync

    sync = QuotaSync(state.tenants.quotas, url, recorder=state.metrics.tenant_recorder())

    async def start(_app: web.Application) -> None:
        sync.start()

    async def stop(_app: web.Application) -> None:
        await sync.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
