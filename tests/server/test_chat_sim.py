"""A worker on the simulated engine: openai client -> the in-process worker (tests/inprocess.py) -> sim engine."""

from __future__ import annotations

import json
import time
import urllib.request

import httpx
import openai
import pytest

from tests.inprocess import InProcessStack

MODEL = "demo:deepseek-v4"


@pytest.fixture(scope="module")
def stack():
    s = InProcessStack(
        ["--engine", "sim", "--workers", "1", "--sim-step-time", "0.005", "--max-model-len", "4096",
         "--served-model-name", "dsv4", "--shutdown-timeout", "5", MODEL],
        ready_timeout=120,
    )
    yield s
    code = s.terminate()
    assert code == 0, s.logs()


@pytest.fixture()
def client(stack):
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0, timeout=30)


def chat(client, **kw):
    kw.setdefault("model", "dsv4")
    kw.setdefault("messages", [{"role": "user", "content": "Hello there"}])
    return client.chat.completions.create(**kw)


def test_non_streaming_usage_and_length(client):
    r = chat(client, max_tokens=8, seed=1)
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert r.usage.completion_tokens == 8
    assert r.usage.prompt_tokens > 3
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8
    assert r.id.startswith("chatcmpl-")
    assert r.object == "chat.completion"


def test_streaming_matches_non_streaming(client):
    full = chat(client, max_tokens=24, seed=7, temperature=0)
    chunks = list(chat(client, max_tokens=24, seed=7, temperature=0, stream=True,
                       stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage.completion_tokens == 24
    assert usage_chunk.usage.prompt_tokens == full.usage.prompt_tokens


def test_stream_without_usage_has_no_usage_chunk(client):
    chunks = list(chat(client, max_tokens=4, stream=True))
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_stop_string_truncates_and_aborts(client):
    xargs = {"sim_text": "The quick brown fox jumps over the lazy dog and keeps running far away"}
    r = chat(client, max_tokens=50, stop=["lazy"], extra_body={"vllm_xargs": xargs})
    assert r.choices[0].message.content == "The quick brown fox jumps over the "
    assert r.choices[0].finish_reason == "stop"
    assert r.model_extra is not None
    assert r.choices[0].model_extra["stop_reason"] == "lazy"
    # Streaming gives the same text, split anywhere.
    chunks = list(chat(client, max_tokens=50, stop=["lazy"], stream=True, extra_body={"vllm_xargs": xargs}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The quick brown fox jumps over the "
    r2 = chat(client, max_tokens=50, stop=["lazy"], extra_body={"vllm_xargs": xargs, "include_stop_str_in_output": True})
    assert r2.choices[0].message.content == "The quick brown fox jumps over the lazy"


def test_eos_finishes_with_stop(client):
    r = chat(client, max_tokens=50, extra_body={"vllm_xargs": {"sim_eos_after": 5}})
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == 6  # five tokens, then EOS (counted, not shown)
    r = chat(client, max_tokens=12, extra_body={"vllm_xargs": {"sim_eos_after": 5}, "ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12


def test_models_health_version(stack):
    with urllib.request.urlopen(stack.base_url + "/v1/models") as r:
        body = json.load(r)
    assert body["object"] == "list" and body["data"][0]["id"] == "dsv4"
    assert body["data"][0]["max_model_len"] == 4096
    with urllib.request.urlopen(stack.base_url + "/version") as r:
        assert "version" in json.load(r)
    assert stack.health() == 200


@pytest.mark.parametrize(
    "body,status,param",
    [
        (b"{not json", 400, None),
        (json.dumps({"model": "dsv4"}).encode(), 400, "messages"),
        (json.dumps({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}).encode(), 404, "model"),
        (json.dumps({"model": "dsv4", "max_tokens": -1, "messages": [{"role": "user", "content": "hi"}]}).encode(), 400, "max_tokens"),
        (json.dumps({"model": "dsv4", "max_tokens": "five", "messages": [{"role": "user", "content": "hi"}]}).encode(), 400, "max_tokens"),
        (json.dumps({"model": "dsv4", "temperature": 9, "messages": [{"role": "user", "content": "hi"}]}).encode(), 400, "temperature"),
        (json.dumps({"model": "dsv4", "messages": [{"role": "wizard", "content": "hi"}]}).encode(), 400, "messages"),
        (json.dumps({"model": "dsv4", "messages": [{"role": "user", "content": "word " * 5000}]}).encode(), 400, None),
    ],
)
def test_bad_requests_get_openai_errors_and_engine_keeps_serving(stack, client, body, status, param):
    r = httpx.post(stack.base_url + "/v1/chat/completions", content=body,
                   headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status and err["message"]
    if param is not None:
        assert err["param"] == param
    # The engine is unharmed.
    assert chat(client, max_tokens=2).choices[0].finish_reason == "length"


def test_context_length_message_has_numbers(stack):
    body = {"model": "dsv4", "messages": [{"role": "user", "content": "word " * 5000}]}
    r = httpx.post(stack.base_url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400
    assert "4096" in r.json()["error"]["message"]


def test_unknown_route_is_json_404(stack):
    r = httpx.get(stack.base_url + "/v1/nothing-here")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == 404


def _engine_running(stack) -> int:
    """Running + waiting requests in the engine, from the freshest worker report."""
    best = stack.freshest_engine_stats()
    assert best is not None
    return best["num_running_reqs"] + best["num_waiting_reqs"]


def test_client_disconnect_aborts_engine_request(stack, client):
    with httpx.stream(
        "POST", stack.base_url + "/v1/chat/completions",
        json={"model": "dsv4", "max_tokens": 4000, "stream": True,
              "messages": [{"role": "user", "content": "go on forever"}]},
        timeout=30,
    ) as r:
        # Read a few events without leaving the iterator (closing it closes the response).
        lines = r.iter_lines()
        seen = 0
        while seen < 5:
            seen += next(lines).startswith("data: ")
        # Stats reach one worker per engine step: poll until a fresh sample shows the request.
        deadline = time.monotonic() + 10
        while _engine_running(stack) < 1:
            assert time.monotonic() < deadline, "the engine never reported the request running"
        r.close()  # the client goes away mid-stream
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _engine_running(stack) != 0:
        time.sleep(0.1)
    assert _engine_running(stack) == 0
