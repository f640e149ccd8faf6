"""Prefix-aware routing on two real vLLM CPU engines (the tiny model, prefix caching on, KV events
on), two workers, 32 three-turn conversations, the official `openai` SDK.

The share of turns 2-3 whose `usage.prompt_tokens_details.cached_tokens` (vLLM's own count from
its prefix cache) covers the previous turn's prompt: by load alone a turn lands on the engine
holding its history about half the time; prefix-aware, nearly always. One deployment per
policy: vLLM's headless engines join a frontend's handshake once, so the frontend cannot be
restarted alone in front of them.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from tests.e2e.tiny_model import ENGINE_ARGS, build_tiny_model
from tests.routing.test_prefix_routing_sim import _ports
from tests.stack import Stack

MODEL = "tiny"
BLOCK = 32  # the CPU attention backend takes multiples of 32


@pytest.fixture(scope="module", params=["least-load", "prefix-aware"])
def deployment(request):
    pub, _ = _ports()
    replay, _ = _ports()
    kv = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{pub}",
                     "replay_endpoint": f"tcp://*:{replay}"})
    with Stack(["--workers", "2", "--data-parallel-size", "2", "--served-model-name", MODEL, *ENGINE_ARGS,
                "--block-size", str(BLOCK), "--enable-prefix-caching", "--kv-events-config", kv,
                "--routing-policy", request.param, "--enable-prompt-tokens-details", "--shutdown-timeout", "5",
                build_tiny_model()], ready_timeout=900) as stack:
        yield request.param, stack


def _conversation(client: openai.OpenAI, i: int) -> list[bool]:
    messages = [{"role": "user", "content": f"Conversation {i} about subject number {i}, told at length. " * 6}]
    covered, previous = [], 0
    for turn in range(3):
        r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
        if turn:
            details = r.usage.prompt_tokens_details
            cached = (details.cached_tokens or 0) if details is not None else 0
            covered.append(cached >= previous - BLOCK)
        previous = r.usage.prompt_tokens
        messages = messages + [{"role": "assistant", "content": r.choices[0].message.content or "ok"},
                               {"role": "user", "content": f"Go on with part {turn + 2}, please."}]
    return covered


@pytest.mark.real_engine
@pytest.mark.on_demand  # two engine pairs: see tests/conftest.py
def test_turns_land_where_their_history_is_cached(deployment):
    policy, stack = deployment
    client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0, timeout=300)
    with ThreadPoolExecutor(8) as pool:
        covered = [c for conv in pool.map(lambda i: _conversation(client, i), range(32)) for c in conv]
    share = sum(covered) / len(covered)
    print(f"{policy}: {share:.2f} of turns 2-3 found the previous turn cached")
    if policy == "prefix-aware":
        assert share >= 0.9, share
    else:
        assert 0.2 <= share <= 0.8, share
