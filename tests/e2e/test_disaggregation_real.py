"""Prefill/decode disaggregation on two of vLLM's own CPU EngineCores.

This frontend runs two data parallel ranks of the tiny model with vLLM's ExampleConnector
(`kv_both`: each engine writes the KV it computes to a shared folder, and reads what is there for
a prompt it is given) and `--prefill-engines 1`: rank 0 computes each prompt (its prefill phase:
one token, remote decode asked), then rank 1 generates, reading the prompt's KV instead of
computing it. The reference is vLLM's own server on one colocated engine (the session pair).

What it shows: greedy answers through the two phases equal vLLM's colocated ones, token ids and
logprobs, streaming and not, chat and completions; the decode engine reports the prompt's full
blocks as cached (`usage.prompt_tokens_details.cached_tokens`: 256 of a 300-token prompt, the
CPU engine's blocks being 128 tokens), where vLLM's colocated engine computed all 300; and the
deployment says which engine has which role (/load, /metrics).
"""

from __future__ import annotations

import json
import random

import httpx
import pytest

from tests.e2e.tiny_model import ENGINE_ARGS, build_tiny_model
from tests.e2e.vllm_pair import MODEL
from tests.stack import Stack

# Two engine starts of its own (about 100 s on the 2-core CI machine): on demand, beside the
# in-process tests of the same paths on the simulated engine (tests/disaggregation).
pytestmark = pytest.mark.on_demand

PROMPT_LEN = 300  # two full 128-token blocks go through the connector
BLOCKS = 256


@pytest.fixture(scope="module")
def disaggregated(tmp_path_factory):
    model = build_tiny_model()
    folder = tmp_path_factory.mktemp("kv")
    kv = {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
          "kv_connector_extra_config": {"shared_storage_path": str(folder)}}
    stack = Stack(["--workers", "1", "--shutdown-timeout", "5", "--served-model-name", MODEL, *ENGINE_ARGS,
                   "--data-parallel-size", "2", "--prefill-engines", "1", "--enable-prompt-tokens-details",
                   "--kv-transfer-config", json.dumps(kv), model], ready_timeout=900)
    try:
        yield stack
    finally:
        stack.terminate(120)


def _prompt(seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000, 100000) for _ in range(PROMPT_LEN)]


def _completion(base: str, prompt: list[int], stream: bool) -> tuple[list[int], list[float], dict]:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 0.0, "logprobs": 1,
            "ignore_eos": True, "stream": stream}
    if not stream:
        r = httpx.post(base + "/v1/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        out = r.json()
        choice = out["choices"][0]
        return (choice["logprobs"]["tokens"], [round(x, 3) for x in choice["logprobs"]["token_logprobs"]],
                out["usage"])
    body["stream_options"] = {"include_usage": True}
    tokens, logprobs, usage = [], [], None
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=300) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk["choices"]:
                if choice.get("logprobs"):
                    tokens += choice["logprobs"]["tokens"]
                    logprobs += [round(x, 3) for x in choice["logprobs"]["token_logprobs"]]
            usage = chunk.get("usage") or usage
    return tokens, logprobs, usage


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_two_phase_completion_equals_vllm_colocated(disaggregated, tiny_pair, stream):
    prompt = _prompt(1 + stream)
    ours = _completion(disaggregated.base_url, prompt, stream)
    theirs = _completion(tiny_pair.vllm, prompt, stream)
    # The same tokens; logprobs within bf16 noise (the decode engine computes the prompt's last
    # 44 tokens against loaded KV, a colocated engine all 300 in one pass).
    assert ours[0] == theirs[0]
    assert all(abs(a - b) < 0.05 for a, b in zip(ours[1], theirs[1], strict=True)), (ours[1], theirs[1])
    assert ours[2]["prompt_tokens"] == theirs[2]["prompt_tokens"] == PROMPT_LEN
    assert ours[2]["completion_tokens"] == 8
    # The decode engine read the prompt's full blocks; it computed only the rest.
    assert ours[2]["prompt_tokens_details"]["cached_tokens"] == BLOCKS


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_two_phase_chat_equals_vllm_colocated(disaggregated, tiny_pair, stream):
    words = random.Random(7 + stream).choices(["alpha", "beta", "gamma", "delta", "river", "stone"], k=220)
    body = {"model": MODEL, "messages": [{"role": "user", "content": " ".join(words)}], "max_tokens": 6,
            "temperature": 0.0, "stream": stream}

    def text(base: str) -> str:
        if not stream:
            r = httpx.post(base + "/v1/chat/completions", json=body, timeout=300)
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["message"]["content"]
        out = ""
        with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=300) as r:
            assert r.status_code == 200, r.read()
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    for choice in json.loads(line[6:])["choices"]:
                        out += choice["delta"].get("content") or ""
        return out

    assert text(disaggregated.base_url) == text(tiny_pair.vllm)


def test_roles_and_phases_are_reported(disaggregated):
    load = httpx.get(disaggregated.base_url + "/load", timeout=30).json()
    assert {k: v["role"] for k, v in load["engines"].items()} == {"0": "prefill", "1": "decode"}
    metrics = httpx.get(disaggregated.base_url + "/metrics", timeout=30).text
    assert 'vllm:engine_role_info{engine="0",model_name="tiny",role="prefill"} 1.0' in metrics
    assert 'vllm:engine_role_info{engine="1",model_name="tiny",role="decode"} 1.0' in metrics
    two_phase = [line for line in metrics.splitlines() if line.startswith('vllm:disagg_requests_total{')
                 and 'path="two_phase"' in line]
    assert two_phase and float(two_phase[0].rsplit(" ", 1)[1]) >= 1, metrics
    assert 'vllm:disagg_prefill_phase_seconds_count{engine="0"' in metrics
    assert 'vllm:disagg_decode_first_token_seconds_count{engine="1"' in metrics
