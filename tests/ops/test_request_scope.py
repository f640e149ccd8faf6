"""Every API style and every path runs in one request scope (serving/scope.py): over one worker
and the simulated engine in this process (the in-process tier, tests/inprocess.py: the request
scope is the worker's) with a keys file, request logs, OTLP traces and the gRPC port, each path
below gets a span, a request log line, the request metrics and its tenant's tokens charged; the
paths a client can leave are aborted when it does."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time

import grpc
import httpx
import pytest
from smg_grpc_proto import vllm_engine_pb2 as pb
from smg_grpc_proto import vllm_engine_pb2_grpc as pb_grpc

from tests.batches import helpers as batches
from tests.ops.otlp_receiver import otlp_receiver
from tests.inprocess import InProcessStack
from tests.reliability.helpers import SERVED, sim_args, wait_for
from tests.stack import free_port

KEY = "key-scoped"
KEYS = f"""- {{name: scoped, key: {KEY}, tokens_per_minute: 100000000}}
- {{name: ops, key: key-ops, admin: true}}
- {{name: single, key: key-single, max_concurrency: 1}}
- {{name: capped, key: key-capped, max_tokens: 8}}
"""
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys.yaml"
    keys.write_text(KEYS)
    grpc_port = free_port()
    with otlp_receiver() as (endpoint, receiver):
        args = sim_args("--api-keys-file", str(keys), "--enable-log-requests", "--otlp-traces-endpoint", endpoint,
                        "--grpc-port", str(grpc_port), workers=1, step=0.01)
        stack = InProcessStack(args, env={"OTEL_BSP_SCHEDULE_DELAY": "100"}, ready_timeout=120)
        try:
            yield stack, receiver, f"127.0.0.1:{grpc_port}"
        finally:
            stack.stop()


def _post(stack: InProcessStack, path: str, body: dict) -> dict:
    r = httpx.post(stack.base_url + path, json=body, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _chat(stack, **kw):
    return _post(stack, "/v1/chat/completions", {"model": SERVED, "max_tokens": 4,
                                                 "messages": [{"role": "user", "content": "Hello"}], **kw})


def _completions(stack, **kw):
    return _post(stack, "/v1/completions", {"model": SERVED, "prompt": "Hello", "max_tokens": 4, **kw})


def _messages(stack):
    return _post(stack, "/v1/messages", {"model": SERVED, "max_tokens": 4,
                                         "messages": [{"role": "user", "content": "Hello"}]})


def _responses(stack, **kw):
    body = _post(stack, "/v1/responses", {"model": SERVED, "input": "Hello", "max_output_tokens": 4, **kw})
    if kw.get("background"):
        wait_for(lambda: httpx.get(f"{stack.base_url}/v1/responses/{body['id']}", headers=AUTH,
                                   timeout=10).json()["status"] in ("completed", "incomplete"), 30,
                 "the background response", stack)
    return body


def _grpc_request(max_tokens: int, stream: bool) -> pb.GenerateRequest:
    return pb.GenerateRequest(request_id=f"scope-{time.monotonic_ns()}", tokenized=pb.TokenizedInput(
        input_ids=[5, 6, 7, 8]), sampling_params=pb.SamplingParams(max_tokens=max_tokens, temperature=0),
        stream=stream)


def _grpc(target: str):
    async def go():
        async with grpc.aio.insecure_channel(target) as ch:
            call = pb_grpc.VllmEngineStub(ch).Generate(_grpc_request(4, False), metadata=(("authorization",
                                                                                         f"Bearer {KEY}"),))
            return [r async for r in call]
    out = asyncio.run(go())
    return {"id": None, "grpc": out}


def _batch_line(stack):
    c = batches.client(stack.base_url, KEY)
    b = batches.submit(c, "/v1/chat/completions", [batches.line("a", "/v1/chat/completions", {
        "model": SERVED, "max_tokens": 4, "messages": [{"role": "user", "content": "Hello"}]})])
    b = batches.wait(c, b.id)
    assert b.status == "completed", b
    out = c.files.content(b.output_file_id).text
    return json.loads(out.splitlines()[0])["response"]["body"]


PATHS = {
    "chat": ("chat.completions", lambda s, t: _chat(s)),
    "completions": ("completions", lambda s, t: _completions(s)),
    "responses": ("responses", lambda s, t: _responses(s, store=False)),
    "responses-background": ("responses", lambda s, t: _responses(s, background=True, store=True)),
    "messages": ("messages", lambda s, t: _messages(s)),
    "grpc": ("grpc", lambda s, t: _grpc(t)),
    "batch-line": ("batch", lambda s, t: _batch_line(s)),
    "beam-search": ("chat.completions", lambda s, t: _chat(s, use_beam_search=True, n=2)),
}


def _lines(stack: InProcessStack) -> list[dict]:
    out = []
    for m in re.finditer(r"vllm_pyfrontend\.requests: (\{.*\})$", stack.logs(), re.M):
        out.append(json.loads(m.group(1)))
    return out


def _metric(stack: InProcessStack, name: str, label: str = "") -> float:
    # (an admin key: /metrics shows the per-tenant series to it)
    text = httpx.get(stack.base_url + "/metrics", timeout=10, headers={"Authorization": "Bearer key-ops"}).text
    return sum(float(m.group(2)) for m in re.finditer(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", text, re.M)
               if label in (m.group(1) or ""))


@pytest.mark.parametrize("path", list(PATHS))
def test_every_path_runs_in_the_request_scope(env, path):
    stack, receiver, grpc_target = env
    style, send = PATHS[path]
    receiver.drain()
    lines_before = len(_lines(stack))
    finished = _metric(stack, "vllm:request_success_total")
    tenant_prompt = _metric(stack, "vllm_frontend_tenant_prompt_tokens_total", 'tenant="scoped"')
    tenant_completion = _metric(stack, "vllm_frontend_tenant_completion_tokens_total", 'tenant="scoped"')

    send(stack, grpc_target)

    def line():
        return next((x for x in _lines(stack)[lines_before:] if x.get("style") == style), None)

    record = wait_for(line, 30, f"the request log line of {path}", stack)
    assert record["tenant"] == "scoped" and record["status"] == 200, record
    assert record["prompt_tokens"] > 0 and record["completion_tokens"] > 0, record
    span = receiver.spans.get(timeout=20)
    assert span.name == "llm_request"
    wait_for(lambda: _metric(stack, "vllm:request_success_total") > finished, 10, "the request metrics", stack)
    wait_for(lambda: _metric(stack, "vllm_frontend_tenant_prompt_tokens_total", 'tenant="scoped"') > tenant_prompt,
             10, "the tenant's prompt tokens", stack)
    assert _metric(stack, "vllm_frontend_tenant_completion_tokens_total", 'tenant="scoped"') > tenant_completion
    wait_for(lambda: httpx.get(stack.base_url + "/load", timeout=10).json()["server_load"] == 0, 10,
             "nothing left in flight", stack)


def _leave_http(stack: InProcessStack, path: str, body: dict) -> None:
    """Send a long streaming request and close the connection after its first bytes."""
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", stack.port), timeout=30) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: "
                     f"Bearer {KEY}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")


def _leave_grpc(target: str) -> None:
    async def go():
        async with grpc.aio.insecure_channel(target) as ch:
            call = pb_grpc.VllmEngineStub(ch).Generate(_grpc_request(800, True), metadata=(
                ("authorization", f"Bearer {KEY}"),))
            async for _ in call:
                call.cancel()
                break
    asyncio.run(go())


LONG = {"max_tokens": 800, "ignore_eos": True, "stream": True}
LEAVING = {
    "chat": ("chat.completions", lambda s, t: _leave_http(s, "/v1/chat/completions", {
        "model": SERVED, "messages": [{"role": "user", "content": "Hello"}], **LONG})),
    "completions": ("completions", lambda s, t: _leave_http(s, "/v1/completions", {
        "model": SERVED, "prompt": "Hello", **LONG})),
    "responses": ("responses", lambda s, t: _leave_http(s, "/v1/responses", {
        "model": SERVED, "input": "Hello", "max_output_tokens": 800, "stream": True, "store": False,
        "ignore_eos": True})),
    "messages": ("messages", lambda s, t: _leave_http(s, "/v1/messages", {
        "model": SERVED, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 800, "stream": True})),
    "grpc": ("grpc", lambda s, t: _leave_grpc(t)),
}


@pytest.mark.parametrize("path", list(LEAVING))
def test_a_client_that_leaves_aborts_its_request(env, path):
    stack, _, grpc_target = env
    style, leave = LEAVING[path]
    lines_before = len(_lines(stack))
    leave(stack, grpc_target)

    def line():
        return next((x for x in _lines(stack)[lines_before:] if x.get("style") == style), None)

    record = wait_for(line, 30, f"the request log line of {path}", stack)
    assert record["status"] in (499, 500), record  # (gRPC: the cancelled call)
    assert record["completion_tokens"] < 800, record
    wait_for(lambda: httpx.get(stack.base_url + "/load", timeout=10).json()["server_load"] == 0, 10,
             "nothing left in flight", stack)


# -- a hostile tenant finds no path around its limits ------------------------------------------------

def test_a_background_response_holds_its_concurrency_slot_until_it_ends(env):
    stack, _, _ = env
    auth = {"Authorization": "Bearer key-single"}
    r = httpx.post(stack.base_url + "/v1/responses", headers=auth, timeout=30, json={
        "model": SERVED, "input": "Hello", "max_output_tokens": 300, "ignore_eos": True, "background": True,
        "store": True})
    assert r.status_code == 200, r.text
    rid = r.json()["id"]
    # The HTTP answer is out, the response runs: the tenant's one slot is still taken.
    refused = httpx.post(stack.base_url + "/v1/chat/completions", headers=auth, timeout=30, json={
        "model": SERVED, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
    assert refused.status_code == 429, refused.text
    assert "Concurrency limit" in refused.json()["error"]["message"]
    wait_for(lambda: httpx.get(f"{stack.base_url}/v1/responses/{rid}", headers=auth, timeout=10).json()["status"]
             in ("completed", "incomplete"), 30, "the background response", stack)
    wait_for(lambda: httpx.post(stack.base_url + "/v1/chat/completions", headers=auth, timeout=30, json={
        "model": SERVED, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}).status_code == 200,
        10, "the slot given back", stack)


def test_a_client_that_leaves_gives_its_slot_back(env):
    stack, _, _ = env
    data = json.dumps({"model": SERVED, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 800,
                       "ignore_eos": True, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", stack.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer key-single\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")
    wait_for(lambda: httpx.post(stack.base_url + "/v1/chat/completions", headers={
        "Authorization": "Bearer key-single"}, timeout=30, json={"model": SERVED, "max_tokens": 2, "messages": [
            {"role": "user", "content": "Hi"}]}).status_code == 200, 10, "the slot given back", stack)


def test_batch_lines_hold_the_owners_max_tokens(env):
    stack, _, _ = env
    c = batches.client(stack.base_url, "key-capped")
    chat = {"model": SERVED, "messages": [{"role": "user", "content": "Hello"}], "ignore_eos": True}
    b = batches.submit(c, "/v1/chat/completions", [
        batches.line("asked", "/v1/chat/completions", {**chat, "max_tokens": 100}),
        batches.line("unset", "/v1/chat/completions", chat)])
    b = batches.wait(c, b.id)
    assert b.status == "completed", b
    out = {json.loads(x)["custom_id"]: json.loads(x) for x in c.files.content(b.output_file_id).text.splitlines()}
    errors = {json.loads(x)["custom_id"]: json.loads(x) for x in c.files.content(b.error_file_id).text.splitlines()}
    assert out["unset"]["response"]["body"]["usage"]["completion_tokens"] == 8
    asked = errors["asked"]["response"]
    assert asked["status_code"] == 400 and "limit of 8" in asked["body"]["error"]["message"], asked


def test_grpc_asks_for_a_key_and_holds_the_tenants_limits(env):
    _, _, target = env

    async def go(metadata, max_tokens=4):
        async with grpc.aio.insecure_channel(target) as ch:
            call = pb_grpc.VllmEngineStub(ch).Generate(_grpc_request(max_tokens, False), metadata=metadata)
            return [r async for r in call]

    with pytest.raises(grpc.aio.AioRpcError) as e:
        asyncio.run(go(()))
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as e:
        asyncio.run(go((("authorization", "Bearer key-capped"),), max_tokens=100))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "limit of 8" in e.value.details()
    out = asyncio.run(go((("authorization", "Bearer key-capped"),), max_tokens=8))
    assert out[0].complete.completion_tokens == 8


# -- pooling and speech: the same guarantees on the simulated engine's other runners ------------------

def _runner_stack(tmp_path_factory, endpoint: str, *args: str) -> InProcessStack:
    keys = tmp_path_factory.mktemp("keys") / "keys.yaml"
    keys.write_text(KEYS)
    return InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.01", "--shutdown-timeout",
                           "5", "--api-keys-file", str(keys), "--enable-log-requests", "--otlp-traces-endpoint",
                           endpoint, *args], env={"OTEL_BSP_SCHEDULE_DELAY": "100"}, ready_timeout=120)


@pytest.fixture(scope="module")
def runners(tmp_path_factory):
    """A pooling model and a transcription model, each on its own one-worker deployment in this
    process (the in-process tier, tests/inprocess.py: the request scope is the worker's)."""
    from tests.e2e.tiny_whisper import build_tiny_whisper

    with otlp_receiver() as (endpoint, receiver):
        pooling = _runner_stack(tmp_path_factory, endpoint, "--max-model-len", "1024", "--served-model-name",
                                SERVED, "--runner", "pooling", "demo:deepseek-v4")
        try:
            speech = _runner_stack(tmp_path_factory, endpoint, "--max-model-len", "448", "--served-model-name",
                                   "whisper", build_tiny_whisper())
            try:
                # The speech worker loads vLLM's processor in the background from its start, and
                # vLLM's EngineArgs parsing in that load turns INFO logging off in the whole
                # process while it runs (vllm.logger.suppress_logging): harmless in a worker
                # process of its own, here it would drop the pooling deployment's request log
                # lines. One transcription waits for the load to end before the tests.
                _transcription(speech)
                yield {"pooling": pooling, "speech": speech}, receiver
            finally:
                speech.stop()  # (last started, first stopped: each puts back the environment it found)
        finally:
            pooling.stop()


def _wav() -> bytes:
    import io

    import numpy as np
    import soundfile as sf

    from tests.e2e.tiny_whisper import SAMPLE_RATE

    audio = 0.3 * np.random.default_rng(0).standard_normal(SAMPLE_RATE)
    buf = io.BytesIO()
    sf.write(buf, audio.astype(np.float32), SAMPLE_RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _embeddings(stack: InProcessStack) -> None:
    _post(stack, "/v1/embeddings", {"model": SERVED, "input": ["Hello", "Hi there"]})


def _transcription(stack: InProcessStack) -> None:
    r = httpx.post(stack.base_url + "/v1/audio/transcriptions", headers=AUTH, timeout=120,
                   files={"file": ("a.wav", _wav(), "audio/wav")}, data={"model": "whisper", "language": "en"})
    assert r.status_code == 200, r.text


RUNNER_PATHS = {"pooling": ("embeddings", _embeddings, False), "speech": ("audio.transcriptions", _transcription, True)}


@pytest.mark.parametrize("path", list(RUNNER_PATHS))
def test_pooling_and_speech_run_in_the_request_scope(runners, path):
    stacks, receiver = runners
    stack = stacks[path]
    style, send, generates = RUNNER_PATHS[path]
    receiver.drain()
    lines_before = len(_lines(stack))
    finished = _metric(stack, "vllm:request_success_total")
    tenant_prompt = _metric(stack, "vllm_frontend_tenant_prompt_tokens_total", 'tenant="scoped"')

    send(stack)

    def line():
        return next((x for x in _lines(stack)[lines_before:] if x.get("style") == style), None)

    record = wait_for(line, 60, f"the request log line of {path}", stack)
    assert record["tenant"] == "scoped" and record["status"] == 200, record
    assert record["prompt_tokens"] > 0 and (record["completion_tokens"] > 0) == generates, record
    assert receiver.spans.get(timeout=20).name == "llm_request"
    wait_for(lambda: _metric(stack, "vllm:request_success_total") > finished, 10, "the request metrics", stack)
    wait_for(lambda: _metric(stack, "vllm_frontend_tenant_prompt_tokens_total", 'tenant="scoped"') > tenant_prompt,
             10, "the tenant's prompt tokens", stack)
    wait_for(lambda: httpx.get(stack.base_url + "/load", timeout=10).json()["server_load"] == 0, 10,
             "nothing left in flight", stack)
