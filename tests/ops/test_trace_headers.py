"""W3C trace context: the client's `traceparent`/`tracestate` headers, picked up by the
middleware as `request["trace_headers"]` (what the completion handlers put in
EngineRequest.trace_headers), arrive in vLLM's EngineCoreRequest.trace_headers on the wire."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from vllm.v1.engine import EngineCoreRequest
from vllm.v1.serial_utils import MsgpackDecoder

from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.engine import wire
from vllm_pyfrontend.engine.types import EngineRequest
from vllm_pyfrontend.metrics import MULTIPROC_ENV
from vllm_pyfrontend.server.middleware import build_middlewares, install

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)


async def test_traceparent_reaches_the_engine_request():
    config = WorkerConfig(worker_index=0, num_workers=1, host="", port=0, model="m", served_model_names=["m"],
                          input_address="", output_address="")
    sent: list[bytes] = []

    async def handler(request: web.Request) -> web.Response:
        req = EngineRequest(request_id="r-1", prompt_token_ids=[1, 2], sampling_params={"max_tokens": 1},
                            arrival_time=0.0, trace_headers=request.get("trace_headers"))
        sent.append(wire.encode_add(req, wire.LAYOUT_0_32))
        return web.Response(text="ok")

    app = web.Application(middlewares=build_middlewares(config, None))
    install(app, config)
    app.router.add_post("/v1/x", handler)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        await client.post("/v1/x", headers={"traceparent": TRACEPARENT, "tracestate": "rojo=00f067aa0ba902b7"})
        await client.post("/v1/x")
    finally:
        await client.close()
    with_trace, without = (MsgpackDecoder(EngineCoreRequest).decode([p]) for p in sent)
    assert with_trace.trace_headers == {"traceparent": TRACEPARENT, "tracestate": "rojo=00f067aa0ba902b7"}
    assert without.trace_headers is None
