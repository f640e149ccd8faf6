"""Prefix-aware routing end to end on the simulated engine: a deployment of two engines that
model a prefix cache and publish vLLM's KV events, two workers, the official `openai` SDK.

Three-turn conversations: each later turn resends the earlier ones, so it is cached where the
previous turn ran. With prefix-aware routing every later turn reports its previous turn's
prompt as cached (`usage.prompt_tokens_details.cached_tokens`). By load alone, conversations
held one at a time on an idle deployment alternate between the engines (equal engines take
turns), so no later turn is. (Many conversations at once are no fair baseline: a turn sent the
moment its previous turn ends finds that engine one request lighter, so load alone follows a
conversation more often than not, by timing.)
A prefix cache reset (AllBlocksCleared) leaves no stale entry: the next turn is routed and
reported as uncached. `/kv_event_sources` lists each rank's publisher.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.stack import REPO, Stack, free_port
from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4

MODEL = "dsv4"


def _ports() -> tuple[int, int]:
    """Two free consecutive ports (rank 1 publishes on the base port + 1)."""
    import socket

    while True:
        base = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", base + 1))
            except OSError:
                continue
        return base, base + 1


def _deployment(policy: str, model: str, env: dict | None = None) -> Stack:
    pub, _ = _ports()
    replay, _ = _ports()
    kv = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{pub}",
                     "replay_endpoint": f"tcp://*:{replay}"})
    return Stack(["--engine", "sim", "--workers", "2", "--data-parallel-size", "2", "--sim-step-time", "0.005",
                  "--max-model-len", "4096", "--served-model-name", MODEL, "--routing-policy", policy,
                  "--enable-prompt-tokens-details", "--kv-events-config", kv, "--block-size", "16", model],
                 ready_timeout=120, env=env)


@pytest.fixture(scope="module")
def model_dir():
    import os

    return materialize_deepseek_v4(os.path.join(REPO, ".cache", "demo-deepseek-v4"))


def _conversation(client: openai.OpenAI, topic: int) -> list[tuple[int, int]]:
    """(prompt tokens of the previous turn, cached tokens of this turn) for turns 2 and 3."""
    messages = [{"role": "user", "content": f"Conversation {topic}: tell me at length about subject {topic}. " * 8}]
    out = []
    previous = 0
    for turn in range(3):
        r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
        details = r.usage.prompt_tokens_details
        cached = details.cached_tokens if details is not None else None
        if turn:
            out.append((previous, cached))
        previous = r.usage.prompt_tokens
        messages = messages + [{"role": "assistant", "content": r.choices[0].message.content},
                               {"role": "user", "content": f"And part {turn + 2} of subject {topic}, please."}]
    return out


def _covered_share(base_url: str, n: int = 16, at_once: int = 8, first_topic: int = 0) -> float:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=60)
    topics = range(first_topic, first_topic + n)
    with ThreadPoolExecutor(at_once) as pool:
        turns = [t for conv in pool.map(lambda i: _conversation(client, i), topics) for t in conv]
    # Covered: everything but the previous turn's last partial block is cached.
    covered = [cached is not None and cached >= previous - 16 for previous, cached in turns]
    return sum(covered) / len(covered)


def test_prefix_aware_routing_keeps_conversations_on_their_cache(model_dir):
    with _deployment("prefix-aware", model_dir, env={"VLLM_SERVER_DEV_MODE": "1"}) as stack:
        sources = httpx.get(stack.base_url + "/kv_event_sources", timeout=10).json()
        assert [s["data_parallel_rank"] for s in sources] == [0, 1]
        assert int(sources[1]["endpoint"].rsplit(":", 1)[1]) == int(sources[0]["endpoint"].rsplit(":", 1)[1]) + 1
        assert _covered_share(stack.base_url, n=8, at_once=1, first_topic=100) == 1.0
        share = _covered_share(stack.base_url)
        # KV events reach each worker asynchronously: a turn sent the moment the previous answer
        # ends may beat that answer's events to the other worker and go by load (a miss, never a
        # wrong hit). Least-load covers about half (below).
        assert share >= 0.85, share

        # A cache reset on every engine: no stale hit afterwards.
        client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0, timeout=60)
        messages = [{"role": "user", "content": "A fresh topic to cache, told at length. " * 10}]
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
        again = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
        assert again.usage.prompt_tokens_details.cached_tokens > 0
        assert httpx.post(stack.base_url + "/reset_prefix_cache", timeout=10).status_code == 200
        after = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0)
        assert after.usage.prompt_tokens_details.cached_tokens == 0  # the engines' caches are empty
        assert _covered_share(stack.base_url, n=4) >= 0.85  # and the index learns them again


def test_least_load_alternates_idle_engines_whatever_they_cache(model_dir):
    with _deployment("least-load", model_dir) as stack:
        share = _covered_share(stack.base_url, n=8, at_once=1, first_topic=100)
        assert share < 0.5, share
