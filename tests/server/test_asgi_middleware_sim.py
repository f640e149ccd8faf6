"""ASGI middleware on the aiohttp worker (frontend/server/asgi_middleware.py): vLLM's
`--middleware` (functions and classes) and a SageMaker customer script's hooks, on the
in-process worker and the simulated engine (tests/inprocess.py)."""

from __future__ import annotations

import json
import sys
import textwrap
import time

import httpx
import pytest

from tests.inprocess import InProcessStack
from vllm_pyfrontend.config import WorkerPolicy
from vllm_pyfrontend.server.asgi_middleware import arrange
from vllm_pyfrontend.supervisor.cli import parse_args

MODEL = "demo:deepseek-v4"
SIM = ["--engine", "sim", "--workers", "1", "--sim-step-time", "0.02", "--max-model-len", "4096",
       "--served-model-name", "dsv4", "--shutdown-timeout", "5"]
CHAT = {"model": "dsv4", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 8}

MIDDLEWARE = '''
import json

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse


async def add_header(request, call_next):
    response = await call_next(request)
    response.headers["X-Added"] = "yes"
    return response


async def rewrite_body(request, call_next):
    limit = request.headers.get("x-max-tokens")
    if limit is not None:
        body = json.loads(await request.body())
        body["max_tokens"] = int(limit)
        request._body = json.dumps(body).encode()
    return await call_next(request)


async def inject_key(request, call_next):
    if request.headers.get("x-inject-key"):
        request.scope["headers"].append((b"authorization", b"Bearer secret"))
    return await call_next(request)


async def throttle(request, call_next):
    if request.headers.get("x-throttle"):
        return JSONResponse({"error": "slow down"}, status_code=429)
    return await call_next(request)


async def explode(request, call_next):
    if request.headers.get("x-explode"):
        raise RuntimeError("middleware exploded")
    return await call_next(request)


class NeedsOptions:
    def __init__(self, app, limit):
        self.app = app


class Tagging(BaseHTTPMiddleware):
    async def dispatch(self, request, call_next):
        response = await call_next(request)
        response.headers["X-Tagged"] = request.method
        return response
'''


@pytest.fixture(scope="module")
def middleware_module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("asgi_mw")
    (folder / "asgi_mw_example.py").write_text(MIDDLEWARE)
    sys.path.insert(0, str(folder))
    yield "asgi_mw_example"
    sys.path.remove(str(folder))
    sys.modules.pop("asgi_mw_example", None)


@pytest.fixture(scope="module")
def stack(middleware_module):
    flags = [x for name in ("add_header", "rewrite_body", "throttle", "explode", "Tagging", "inject_key")
             for x in ("--middleware", f"{middleware_module}.{name}")]
    s = InProcessStack([*SIM, "--api-key", "secret", *flags, MODEL], ready_timeout=120)
    yield s
    assert s.terminate() == 0, s.logs()


@pytest.fixture()
def http(stack):
    with httpx.Client(base_url=stack.base_url, timeout=30,
                      headers={"Authorization": "Bearer secret"}) as client:
        yield client


def test_a_middleware_adds_a_response_header(http):
    r = http.get("/v1/models")
    assert r.status_code == 200 and r.json()["data"][0]["id"] == "dsv4"
    assert r.headers["x-added"] == "yes" and r.headers["x-tagged"] == "GET"  # (a function and a class)
    r = http.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200 and r.headers["x-added"] == "yes" and r.headers["x-tagged"] == "POST"
    assert r.json()["usage"]["completion_tokens"] == 8
    assert int(r.headers["content-length"]) == len(r.content)


def test_a_middleware_rewrites_the_request_body(http):
    r = http.post("/v1/chat/completions", json=CHAT, headers={"x-max-tokens": "3"})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 3


def test_header_changes_reach_the_server_inside_the_middleware(stack):
    """--middleware runs outside authentication, as in vLLM: a header it adds is checked."""
    with httpx.Client(base_url=stack.base_url, timeout=30) as client:
        denied = client.get("/v1/models")
        assert denied.status_code == 401 and denied.headers["x-added"] == "yes"
        assert denied.json()["error"]["code"] == 401
        assert client.get("/v1/models", headers={"x-inject-key": "1"}).status_code == 200


def test_a_middleware_answers_on_its_own(http):
    r = http.post("/v1/chat/completions", json=CHAT, headers={"x-throttle": "1"})
    assert r.status_code == 429 and r.json() == {"error": "slow down"}
    # the last one given is the outermost, as in vLLM: Tagging (given after throttle) is outside
    # it, add_header (given before) inside
    assert r.headers["x-tagged"] == "POST" and "x-added" not in r.headers


def test_a_failing_middleware_is_a_logged_500(http, stack):
    r = http.post("/v1/chat/completions", json=CHAT, headers={"x-explode": "1"})
    assert r.status_code == 500
    assert r.json()["error"] == {"message": "Internal server error.", "type": "InternalServerError",
                                 "param": None, "code": 500}
    stack.wait_for(lambda: "middleware exploded" in stack.logs(), 5, "the failure in the log")
    assert http.get("/v1/models").status_code == 200  # the worker carries on


def test_a_stream_still_streams_through_the_middleware(http):
    body = {**CHAT, "max_tokens": 24, "stream": True}
    arrivals = []
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-added"] == "yes" and r.headers["x-tagged"] == "POST"
        start = time.monotonic()
        for data in r.iter_raw():
            arrivals.append((time.monotonic() - start, data))
    text = b"".join(d for _, d in arrivals).decode()
    assert text.rstrip().endswith("data: [DONE]")
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    # 24 tokens at 20 ms a step: the chunks arrive as they are generated, not all at the end
    assert len(arrivals) >= 4, arrivals
    assert arrivals[-1][0] - arrivals[0][0] > 0.2, arrivals


def test_a_client_leaving_a_stream_through_the_middleware_ends_the_request(http, stack):
    body = {**CHAT, "max_tokens": 2000, "stream": True}  # (40 s at 20 ms a step)
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        chunks = r.iter_raw()
        next(chunks)
        assert http.get("/load").json()["worker_load"] == 1
    stack.wait_for(lambda: http.get("/load").json()["worker_load"] == 0, 10, "the request's end")


def test_nothing_configured_installs_nothing():
    def context():
        pass

    def error():
        pass

    assert arrange([context], error, WorkerPolicy()) == [context, error]


@pytest.mark.parametrize("path, reason", [
    ("no_such_module_here.mw", "--middleware no_such_module_here.mw: ModuleNotFoundError"),
    ("json.dumps", "--middleware json.dumps: must be an async function"),
    ("nodots", "--middleware nodots: expected an import path"),
])
def test_a_middleware_that_cannot_be_loaded_stops_the_start(path, reason, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--engine", "sim", "--middleware", path, MODEL])
    assert e.value.code == 2
    assert reason in capsys.readouterr().err


def test_a_class_that_does_not_take_the_app_alone_stops_the_start(middleware_module, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--engine", "sim", "--middleware", f"{middleware_module}.NeedsOptions", MODEL])
    assert "a middleware class must take the app alone" in capsys.readouterr().err


def test_the_dropin_passes_middleware_on():
    from vllm_pyfrontend.supervisor.frontend_flags import refused_serve_args

    assert refused_serve_args({"middleware": ["pkg.mw"]}) == []
    assert WorkerPolicy.from_mapping({"middleware": ["pkg.a", "pkg.b"]}).middleware == ["pkg.a", "pkg.b"]


# ---------------------------------------------------------------------------- SageMaker

SCRIPT = '''
import json

from fastapi import Request
from fastapi.responses import JSONResponse
import model_hosting_container_standards.sagemaker as sagemaker_standards
from model_hosting_container_standards.common.fastapi.middleware import (
    custom_middleware, input_formatter, output_formatter,
)


@custom_middleware("throttle")
async def customer_throttle(request, call_next):
    if request.headers.get("x-throttle"):
        return JSONResponse({"error": "throttled"}, status_code=429)
    response = await call_next(request)
    response.headers["X-Customer-Throttle"] = "applied"
    return response


@input_formatter
async def customer_input(request):
    if request.url.path == "/invocations":
        body = await request.json()
        body["max_tokens"] = 2
        request._body = json.dumps(body).encode()
    return request


@output_formatter
async def customer_output(response):
    response.headers["X-Customer-Processed"] = "true"
    return response


@sagemaker_standards.custom_ping_handler
async def customer_ping(raw_request: Request):
    return {"status": "customer ping", "path": raw_request.url.path}
'''


def _clear_sagemaker_registries():
    """The package's registries are per process: a worker fills them once (as vLLM's own test
    clears them between servers)."""
    from model_hosting_container_standards.common.fastapi.middleware import middleware_registry
    from model_hosting_container_standards.common.fastapi.middleware.source.decorator_loader import decorator_loader
    from model_hosting_container_standards.common.handler import handler_registry
    from model_hosting_container_standards.sagemaker.sagemaker_loader import SageMakerFunctionLoader

    middleware_registry.clear_middlewares()
    decorator_loader.clear()
    handler_registry.clear()
    SageMakerFunctionLoader._default_function_loader = None


@pytest.fixture(scope="module")
def sagemaker_stack(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sagemaker")
    (folder / "customer.py").write_text(textwrap.dedent(SCRIPT))
    _clear_sagemaker_registries()
    env = {"SAGEMAKER_MODEL_PATH": str(folder), "CUSTOM_SCRIPT_FILENAME": "customer.py",
           "SAGEMAKER_ENABLE_STATEFUL_SESSIONS": "true"}
    s = InProcessStack([*SIM, MODEL], ready_timeout=120, env=env)
    yield s
    assert s.terminate() == 0, s.logs()
    _clear_sagemaker_registries()


def test_sagemaker_throttle_and_formatters_on_invocations(sagemaker_stack):
    with httpx.Client(base_url=sagemaker_stack.base_url, timeout=30) as client:
        r = client.post("/invocations", json=CHAT)
        assert r.status_code == 200, r.text
        assert r.headers["x-customer-throttle"] == "applied"
        assert r.headers["x-customer-processed"] == "true"
        assert r.json()["usage"]["completion_tokens"] == 2  # (the input formatter's max_tokens)
        r = client.post("/v1/chat/completions", json=CHAT)  # (formatters run on every route)
        assert r.status_code == 200 and r.headers["x-customer-processed"] == "true"
        assert r.json()["usage"]["completion_tokens"] == 8
        r = client.post("/invocations", json=CHAT, headers={"x-throttle": "1"})
        assert r.status_code == 429 and r.json() == {"error": "throttled"}


def test_sagemaker_custom_ping_handler_and_unsupported_hooks(sagemaker_stack):
    with httpx.Client(base_url=sagemaker_stack.base_url, timeout=30) as client:
        r = client.get("/ping")
        assert r.status_code == 200 and r.json() == {"status": "customer ping", "path": "/ping"}
        assert r.headers["x-customer-throttle"] == "applied"
        assert client.post("/ping").content == b""  # (POST /ping stays the server's, as in vLLM)
    logs = sagemaker_stack.logs()
    assert "SageMaker hook not supported by this server, ignored: SAGEMAKER_ENABLE_STATEFUL_SESSIONS" in logs
