"""Operational endpoints: `/metrics` (Prometheus, all workers merged), `/health` and `/ready`.

`/health` answers "is this process alive and its engine connected": a liveness probe, with
vLLM's status codes (200, or 503 with the engine gone) and vLLM's empty body while all is well.
Degraded but serving, it stays 200 and its JSON body says what is wrong:
`{"status": "degraded", "engines_down": [...], "response_store": "<reason>"}` (each key only
when it applies): an engine down while another serves, or a response store that fails (only
stored responses answer 503 then; every other route serves), so a load balancer keeps the worker.
`/ready` adds "and accepting new work": 503 while the worker drains for shutdown, so a load
balancer or Kubernetes readiness probe takes the pod out of rotation while in-flight requests
finish, and while a queue bound (`--max-num-queued-reqs` / `-tokens`) is reached
("overloaded"). With several engines, one that is down (stalled, or its socket gone) leaves both at
200 while another serves, and both name it (`engines_down`). Both answer without authentication
(as vLLM's /health); `/metrics` requires an API key only with `--metrics-require-api-key`, and
with a keys file it shows the per-tenant series only then, or to an admin key.
"""

from __future__ import annotations

import asyncio

import msgspec
from aiohttp import web

from vllm_pyfrontend.api.responses.service import store_degraded
from vllm_pyfrontend.metrics import CONTENT_TYPE_LATEST
from vllm_pyfrontend.serving.state import STATE

_json = msgspec.json.encode


def tenant_series_allowed(request: web.Request, state) -> bool:
    """Whether /metrics shows the per-tenant series (named keys and their usage): with no keys
    file, behind --metrics-require-api-key, or to an admin key (`admin: true`)."""
    if state.tenants is None or state.config.policy.metrics_require_api_key:
        return True
    found = state.tenants.lookup(request.headers.get("Authorization"), request.headers.get("x-api-key"))
    return found is not None and found[0].admin


async def handle_metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.metrics.flush()  # this worker's gathered increments first (on the loop's thread)
    # Merging reads every worker's mmap files: off the event loop, it never delays outputs.
    body = await asyncio.get_running_loop().run_in_executor(
        None, state.metrics.render, tenant_series_allowed(request, state))
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def handle_health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    # Liveness: the process answers and its engine is connected. Draining is /ready's business.
    if not state.engine.healthy:
        return web.Response(status=503)
    body: dict = {}
    down = state.engine.engines_down
    if down:  # data parallel: still serving on the other engines
        body["engines_down"] = down
    store = store_degraded(request.app)
    if store is not None:
        body["response_store"] = store
    if not body:
        return web.Response(status=200)
    return web.Response(body=_json({"status": "degraded", **body}), content_type="application/json")


async def handle_ready(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.draining:
        reason = "draining"
    elif not state.engine.healthy:
        reason = "engine unavailable"
    elif state.admission is not None and state.admission.overloaded():
        reason = "overloaded"  # a queue bound is reached: new requests get 503 until it drains
    else:
        body = {"status": "ready"}
        if state.engine.engines_down:  # data parallel, degraded: the other engines serve
            body["engines_down"] = state.engine.engines_down
        return web.Response(body=_json(body), content_type="application/json")
    return web.Response(status=503, body=_json({"status": "not ready", "reason": reason}),
                        content_type="application/json")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/ready", handle_ready)
    app.router.add_get("/health", handle_health)
