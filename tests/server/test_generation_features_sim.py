"""Beam search and logprob plumbing on the simulated engine (fast; the real-engine comparison
with vLLM is tests/e2e/test_generation_features.py): answers, refusals, and a client that leaves
mid-search leaves nothing running in the engine."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.inprocess import InProcessStack

MODEL = "demo:deepseek-v4"


@pytest.fixture(scope="module")
def stack():
    s = InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.005", "--max-model-len", "4096",
               "--served-model-name", "dsv4", "--shutdown-timeout", "5", MODEL], ready_timeout=120)
    yield s
    assert "unhandled error" not in s.logs() and "failed" not in s.logs(), s.logs()
    assert s.terminate() == 0, s.logs()


def _post(stack, route: str, body: dict, timeout: float = 60) -> httpx.Response:
    return httpx.post(stack.base_url + route, json={"model": "dsv4", **body}, timeout=timeout)


def test_beam_search_completions(stack):
    r = _post(stack, "/v1/completions", {"prompt": ["Hello", "Bye"], "use_beam_search": True, "n": 3,
                                         "max_tokens": 4, "logprobs": 1, "return_token_ids": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["index"] for c in body["choices"]] == list(range(6))
    for c in body["choices"]:
        assert len(c["logprobs"]["tokens"]) == len(c["token_ids"]) and c["finish_reason"] in ("length", "stop")
    assert body["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in body["choices"])


def test_beam_search_chat_streamed(stack):
    r = _post(stack, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "use_beam_search": True,
                                              "n": 2, "max_tokens": 3, "stream": True, "logprobs": True,
                                              "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    events = [json.loads(line[6:]) for line in r.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    finished = {c["index"] for e in events for c in e["choices"] if c.get("finish_reason")}
    assert finished == {0, 1} and events[-1]["usage"]["completion_tokens"] > 0
    assert r.text.rstrip().endswith("data: [DONE]")


def test_echo_logprobs_and_prompt_logprobs(stack):
    r = _post(stack, "/v1/completions", {"prompt": "Hello world", "echo": True, "logprobs": 1, "max_tokens": 3,
                                         "prompt_logprobs": 1})
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["logprobs"]["token_logprobs"][0] is None and c["prompt_logprobs"][0] is None
    assert c["logprobs"]["text_offset"][0] == 0 and c["text"].startswith("Hello world")


@pytest.mark.parametrize("route,body", [
    ("/v1/completions", {"prompt": "Hi", "use_beam_search": True, "n": 11}),  # 22 logprobs > 20
    ("/v1/completions", {"prompt": "Hi", "use_beam_search": True, "n": 0}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "use_beam_search": True, "n": 11}),
    ("/v1/completions", {"prompt": "Hi", "prompt_logprobs": 1, "stream": True}),
])
def test_refusals(stack, route, body):
    assert _post(stack, route, {"max_tokens": 3, **body}).status_code == 400


def test_client_leaving_mid_search_leaves_the_engine_idle(stack):
    body = {"model": "dsv4", "prompt": "Hello", "use_beam_search": True, "n": 4, "max_tokens": 400,
            "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(stack.base_url + "/v1/completions", json=body, timeout=1.0)
    deadline = time.monotonic() + 30
    while True:
        stats = stack.freshest_engine_stats()
        if stats and stats["num_running_reqs"] == 0 and stats["num_waiting_reqs"] == 0:
            time.sleep(1.0)  # and it stays idle: no further steps of the abandoned search
            again = stack.freshest_engine_stats()
            if again["num_running_reqs"] == 0 and again["num_waiting_reqs"] == 0:
                break
        assert time.monotonic() < deadline, stats
        time.sleep(0.3)
