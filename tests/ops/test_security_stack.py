"""Security on the whole stack (2 workers, simulated engine): API keys on every /v1 route (raw
httpx and the openai client), keys never on a command line or in the logs, /metrics behind the
key on request, request templates refused by default, X-Request-Id, health endpoints open."""

from __future__ import annotations

import types

import httpx
import openai
import pytest

from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.metrics import WorkerMetrics
from vllm_pyfrontend.server.app import build_app
from tests.metrics.test_metrics_stack import worker_pids
from tests.stack import Stack

MODEL = "demo:deepseek-v4"
KEYS = ("key-one-5f1b0c", "key-two-9a77d2")


def v1_routes() -> list[tuple[str, str]]:
    """Every (method, path) the app registers under /v1 (so a new route is covered here)."""
    config = WorkerConfig(worker_index=0, num_workers=1, host="", port=0, model="m", served_model_names=["m"],
                          input_address="", output_address="")
    fake_state = types.SimpleNamespace(config=config, metrics=WorkerMetrics("m", [0], 16), tenants=None, keys=None,
                                       loras=None, multimodal=None)
    app = build_app(fake_state)
    routes = set()
    for route in app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if path.startswith("/v1") and route.method not in ("HEAD", "OPTIONS"):
            routes.add((route.method, path))
    assert ("POST", "/v1/chat/completions") in routes and ("GET", "/v1/models") in routes
    return sorted(routes)


@pytest.fixture(scope="module")
def stack():
    s = Stack(
        ["--engine", "sim", "--workers", "2", "--sim-step-time", "0.005", "--max-model-len", "4096",
         "--served-model-name", "dsv4", "--api-key", *KEYS, "--metrics-require-api-key",
         "--enable-request-id-headers", "--enable-log-requests", MODEL],
        ready_timeout=120,
    )
    yield s
    s.terminate()


HI = [{"role": "user", "content": "hi"}]


def _body_for(path: str) -> dict:
    if path.endswith("/chat/completions"):
        return {"model": "dsv4", "messages": HI, "max_tokens": 2}
    if path.endswith("/completions"):
        return {"model": "dsv4", "prompt": "hi", "max_tokens": 2}
    if path == "/v1/responses":
        return {"model": "dsv4", "input": "hi", "max_output_tokens": 2}
    if path == "/v1/messages":
        return {"model": "dsv4", "messages": HI, "max_tokens": 2}
    if path == "/v1/messages/count_tokens":
        return {"model": "dsv4", "messages": HI}
    return {}


def _status_past_the_key(path: str, method: str = "GET") -> int:
    """What a valid key gets on this stack (a generation model, scale-out routes off)."""
    if path in ("/v1/embeddings", "/v1/score", "/v1/rerank"):
        return 400  # pooling routes on a generation model
    if "/render" in path or "/derender" in path:
        return 403  # vLLM's answer while --enable-scale-out is off
    if "{response_id}" in path or "{file_id}" in path or "{batch_id}" in path:
        return 404  # no such stored response, file or batch
    if path in ("/v1/files", "/v1/batches") and method == "POST":
        return 400  # an upload is multipart; a batch needs input_file_id, endpoint, completion_window
    if path.startswith("/v1/audio/"):
        return 404  # a text-only model has no speech routes (as vLLM registers none)
    return 200


@pytest.mark.parametrize("method,path", v1_routes())
def test_every_v1_route_needs_a_valid_key(stack, method, path):
    url = stack.base_url + path.replace("{response_id}", "resp_unknown").replace(
        "{file_id}", "file-unknown").replace("{batch_id}", "batch_unknown")
    body = _body_for(path)
    anthropic = path.startswith("/v1/messages")
    with httpx.Client(timeout=30) as h:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEYS[0]}"},
                        {"Authorization": f"Bearer {KEYS[0]}x"}, {"x-api-key": "wrong"}):
            r = h.request(method, url, json=body if method == "POST" else None, headers=headers)
            assert r.status_code == 401, (method, path, headers, r.text)
            if anthropic:  # Anthropic's error shape on its routes
                assert r.json()["error"]["type"] == "authentication_error", r.text
            else:
                assert r.json()["error"]["code"] == 401
        for key in KEYS:
            for headers in ({"Authorization": f"Bearer {key}"}, {"x-api-key": key}):
                r = h.request(method, url, json=body if method == "POST" else None, headers=headers)
                assert r.status_code == _status_past_the_key(path, method), (method, path, r.text)


def test_openai_client_needs_a_valid_key(stack):
    bad = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="not-a-key", max_retries=0, timeout=30)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="dsv4", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="dsv4", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                    stream=True)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="dsv4", prompt="hi", max_tokens=2)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    for key in KEYS:
        good = openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0, timeout=30)
        r = good.chat.completions.create(model="dsv4", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
        assert r.usage.completion_tokens == 3
        assert [m.id for m in good.models.list()] == ["dsv4"]


def test_unauthenticated_endpoints_and_metrics_behind_the_key(stack):
    with httpx.Client(timeout=10) as h:
        assert h.get(stack.base_url + "/health").status_code == 200
        assert h.get(stack.base_url + "/ready").status_code == 200
        assert h.get(stack.base_url + "/metrics").status_code == 401
        r = h.get(stack.base_url + "/metrics", headers={"Authorization": f"Bearer {KEYS[1]}"})
        assert r.status_code == 200 and "vllm:num_requests_running" in r.text


def test_request_chat_template_refused_by_default(stack):
    client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key=KEYS[0], max_retries=0, timeout=30)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="dsv4", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       extra_body={"chat_template": "{{ messages[0].content }}"})
    assert e.value.status_code == 400
    assert e.value.body["param"] == "chat_template"


def test_request_id_header_on_streaming_and_errors(stack):
    with httpx.Client(timeout=30) as h:
        with h.stream("POST", stack.base_url + "/v1/chat/completions", json={**_body_for("/chat/completions"),
                      "stream": True}, headers={"Authorization": f"Bearer {KEYS[0]}", "X-Request-Id": "trace-me-1"}) as r:
            assert r.status_code == 200 and r.headers["x-request-id"] == "trace-me-1"
            assert b"[DONE]" in r.read()
        r = h.post(stack.base_url + "/v1/chat/completions", json={"model": "nope", "messages": []},
                   headers={"Authorization": f"Bearer {KEYS[0]}"})
        assert r.status_code in (400, 404) and len(r.headers["x-request-id"]) == 32
        assert h.get(stack.base_url + "/v1/models").headers["x-request-id"]  # 401s carry it too


def test_keys_are_not_on_command_lines_or_in_logs(stack):
    # Traffic with and without keys happened above; logs are structured and keyless.
    with httpx.Client(timeout=10) as h:
        h.get(stack.base_url + "/v1/models", headers={"Authorization": f"Bearer {KEYS[0]}"})
        h.get(stack.base_url + "/v1/models", headers={"Authorization": "Bearer attempted-guess"})
    logs = stack.logs()
    assert '"status":401' in logs and "trace-me-1" in logs
    for secret in (*KEYS, "attempted-guess", "Bearer"):
        assert secret not in logs
    pids = worker_pids(stack)
    assert len(pids) == 2
    for pid in pids:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().decode(errors="replace")
        assert "vllm_pyfrontend.server.worker" in cmdline
        assert not any(k in cmdline for k in KEYS)  # argv is world-readable; the environment is not
