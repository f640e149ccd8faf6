"""frontend/server/middleware.py on a small aiohttp app: API keys, CORS, request ids, trace
headers, request logs (no secrets), HTTP metrics."""

from __future__ import annotations

import json
import logging

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from vllm_pyfrontend.config import WorkerConfig, WorkerPolicy
from vllm_pyfrontend.metrics import MULTIPROC_ENV, WorkerMetrics
from vllm_pyfrontend.server.app import error_middleware
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.server.middleware import ApiKeys, build_middlewares, install
from vllm_pyfrontend.tenants import ANONYMOUS, tenant_of
from prometheus_client.parser import text_string_to_metric_families


def make_config(**kw) -> WorkerConfig:
    """A config with `kw` set: WorkerPolicy's fields go into its policy, the rest on it."""
    policy = {k: kw.pop(k) for k in list(kw) if k in WorkerPolicy.__dataclass_fields__}
    return WorkerConfig(worker_index=0, num_workers=1, host="127.0.0.1", port=0, model="m",
                        served_model_names=["m"], input_address="", output_address="",
                        policy=WorkerPolicy(**policy), **kw)


async def echo(request: web.Request) -> web.Response:
    return web.json_response({
        "request_id": request.get("request_id"),
        "trace_headers": request.get("trace_headers"),
    })


async def stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b"data: x\n\n")
    await resp.write_eof()
    return resp


async def fail(request: web.Request) -> web.Response:
    raise APIError(400, "bad")


async def metrics_route(request: web.Request) -> web.Response:
    return web.Response(body=request.app["metrics"].render())


async def ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)


async def client_for(**kw) -> TestClient:
    config = make_config(**kw)
    metrics = WorkerMetrics("m", [0], 128)
    app = web.Application(middlewares=[*build_middlewares(config, metrics), error_middleware])
    app["metrics"] = metrics
    install(app, config)
    app.router.add_post("/v1/echo", echo)
    app.router.add_get("/v1/stream", stream)
    app.router.add_post("/v1/fail", fail)
    app.router.add_get("/metrics", metrics_route)
    app.router.add_get("/health", ok)
    app.router.add_post("/tokenize", ok)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


def test_api_keys_constant_time_shape():
    keys = ApiKeys(["alpha", "beta", ""])
    assert keys
    assert keys.check("Bearer alpha") and keys.check("bearer beta") and keys.check("Bearer  beta ")
    assert not keys.check("Bearer gamma")
    assert not keys.check("Bearer alph")
    assert not keys.check("Basic alpha")
    assert not keys.check("alpha")
    assert not keys.check(None) and not keys.check("")
    assert not ApiKeys([""])


def test_each_anonymous_key_is_its_own_owner_scope():
    keys = ApiKeys(["alpha", "beta"])
    a, b = keys.tenant("Bearer alpha"), keys.tenant(None, "beta")
    assert a is not None and b is not None
    assert a.owner.startswith("key:") and b.owner.startswith("key:") and a.owner != b.owner
    assert keys.tenant("Bearer alpha") == a and a.name == ""
    assert keys.tenant("Bearer gamma") is None
    assert tenant_of({}) == ANONYMOUS and ANONYMOUS.owner == ""


async def test_auth_guards_v1_not_health_and_metrics_only_when_asked():
    c = await client_for(api_keys=["s3cret-key", "other"])
    try:
        r = await c.post("/v1/echo")
        assert r.status == 401
        body = await r.json()
        assert body["error"]["code"] == 401 and body["error"]["type"] == "AuthenticationError"
        assert r.headers["WWW-Authenticate"] == "Bearer"
        assert (await c.post("/v1/echo", headers={"Authorization": "Bearer nope"})).status == 401
        assert (await c.post("/v1/echo", headers={"Authorization": "Bearer other"})).status == 200
        assert (await c.get("/v1/nonexistent")).status == 401  # no route probing without a key
        assert (await c.get("/health")).status == 200
        assert (await c.post("/tokenize")).status == 200  # vLLM guards /v1, /v2, /inference, /cohere
        assert (await c.get("/metrics")).status == 200
    finally:
        await c.close()
    c = await client_for(api_keys=["k"], metrics_require_api_key=True)
    try:
        assert (await c.get("/metrics")).status == 401
        assert (await c.get("/metrics", headers={"Authorization": "Bearer k"})).status == 200
    finally:
        await c.close()


async def test_request_id_echoed_on_plain_error_and_streaming_responses():
    c = await client_for(enable_request_id_headers=True)
    try:
        r = await c.post("/v1/echo", headers={"X-Request-Id": "abc-123"})
        assert r.headers["X-Request-Id"] == "abc-123"
        assert (await r.json())["request_id"] == "abc-123"
        r = await c.post("/v1/echo")
        rid = r.headers["X-Request-Id"]
        assert len(rid) == 32 and (await r.json())["request_id"] == rid
        r = await c.get("/v1/stream", headers={"X-Request-Id": "s-1"})
        assert r.headers["X-Request-Id"] == "s-1"
        assert await r.read() == b"data: x\n\n"
        r = await c.post("/v1/fail", headers={"X-Request-Id": "e-1"})
        assert r.status == 400 and r.headers["X-Request-Id"] == "e-1"
    finally:
        await c.close()
    c = await client_for()
    try:
        r = await c.post("/v1/echo", headers={"X-Request-Id": "abc"})
        assert "X-Request-Id" not in r.headers
    finally:
        await c.close()


async def test_trace_headers_reach_the_handler():
    c = await client_for()
    try:
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        r = await c.post("/v1/echo", headers={"traceparent": tp, "tracestate": "congo=t61rcWkgMzE"})
        assert (await r.json())["trace_headers"] == {"traceparent": tp, "tracestate": "congo=t61rcWkgMzE"}
        r = await c.post("/v1/echo")
        assert (await r.json())["trace_headers"] is None
    finally:
        await c.close()


async def test_cors_preflight_and_simple_requests():
    c = await client_for(allowed_origins=["https://app.example"], api_keys=["k"])
    try:
        r = await c.options("/v1/echo", headers={
            "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert r.status == 200  # preflight needs no key (browsers send none)
        assert r.headers["Access-Control-Allow-Origin"] == "https://app.example"
        assert "POST" in r.headers["Access-Control-Allow-Methods"]
        assert r.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
        r = await c.options("/v1/echo", headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert r.status == 400 and "Access-Control-Allow-Origin" not in r.headers
        r = await c.post("/v1/echo", headers={"Origin": "https://app.example", "Authorization": "Bearer k"})
        assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "https://app.example"
        r = await c.post("/v1/echo", headers={"Origin": "https://app.example"})
        assert r.status == 401 and r.headers["Access-Control-Allow-Origin"] == "https://app.example"
        r = await c.post("/v1/echo", headers={"Origin": "https://evil.example", "Authorization": "Bearer k"})
        assert "Access-Control-Allow-Origin" not in r.headers
    finally:
        await c.close()
    c = await client_for(allowed_origins=["*"], allow_credentials=False, allowed_methods=["GET"])
    try:
        r = await c.get("/v1/stream", headers={"Origin": "https://x.example"})
        assert r.headers["Access-Control-Allow-Origin"] == "*"
        r = await c.options("/v1/echo", headers={"Origin": "https://x.example",
                                                 "Access-Control-Request-Method": "POST"})
        assert r.status == 400
    finally:
        await c.close()
    c = await client_for()  # no --allowed-origins: no CORS headers at all (vLLM's default)
    try:
        r = await c.post("/v1/echo", headers={"Origin": "https://app.example"})
        assert "Access-Control-Allow-Origin" not in r.headers
    finally:
        await c.close()


async def test_request_log_is_structured_and_has_no_secrets(caplog):
    c = await client_for(api_keys=["s3cret-key"], enable_log_requests=True)
    try:
        with caplog.at_level(logging.INFO, logger="vllm_pyfrontend.requests"):
            await c.post("/v1/echo", headers={"Authorization": "Bearer s3cret-key", "X-Request-Id": "log-1",
                                              "traceparent": "00-aa-bb-01"}, json={"secret": "body"})
            await c.post("/v1/echo", headers={"Authorization": "Bearer wrong-key"})
    finally:
        await c.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "vllm_pyfrontend.requests"]
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["request_id"] == "log-1" and first["status"] == 200 and first["route"] == "/v1/echo"
    assert first["traceparent"] == "00-aa-bb-01" and first["duration_ms"] >= 0
    assert second["status"] == 401 and len(second["request_id"]) == 32
    text = "\n".join(lines)
    assert "s3cret" not in text and "wrong-key" not in text and "Bearer" not in text and "body" not in text


async def test_http_metrics_by_route_and_status():
    c = await client_for(api_keys=["k"])
    try:
        await c.post("/v1/echo", headers={"Authorization": "Bearer k"})
        await c.post("/v1/echo")
        await c.get("/health")
        await c.get("/not/a/route")
        text = await (await c.get("/metrics")).text()
    finally:
        await c.close()
    got = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "http_requests_total":
                got[(s.labels["handler"], s.labels["status"])] = s.value
    assert got[("/v1/echo", "2xx")] == 1
    assert got[("/v1/echo", "4xx")] == 1
    assert got[("none", "4xx")] == 1  # unmatched paths share one label value
    assert not any(h == "/health" for h, _ in got)  # vLLM's instrumentator skips these
