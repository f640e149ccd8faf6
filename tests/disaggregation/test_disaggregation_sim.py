"""Prefill/decode disaggregation through HTTP, on simulated engines (in-process): one deployment
with a prefill and a decode engine (`--prefill-engines 1`, the simulated engine's
`--kv-transfer-config` kv_both), one colocated (two data parallel engines), the same flags
otherwise. Every API style answers the same through both; tool and reasoning parsing, stop
strings, logprobs and usage are unchanged; the decode engine reports the prompt as loaded; short
prompts skip the prefill engine; a KV load that fails is run again whole; a client that leaves
during the prefill phase ends it on the prefill engine.
"""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from tests.inprocess import InProcessStack
from tests.routing.test_prefix_routing_sim import _ports as two_ports
from tests.server.test_tools_sim import CALL, MESSAGES, TOOLS

MODEL = "dsv4"
COMMON = ["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "4096",
          "--served-model-name", MODEL, "--data-parallel-size", "2", "--enable-prompt-tokens-details",
          "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4", "--reasoning-parser", "deepseek_v4",
          "--shutdown-timeout", "5"]


def _kv(**extra) -> str:
    return json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both",
                       "kv_connector_extra_config": {"transfer_time_per_token": 1e-6, **extra}})


@pytest.fixture(scope="module")
def colocated():
    s = InProcessStack([*COMMON, "demo:deepseek-v4"])
    yield s
    s.terminate()


@pytest.fixture(scope="module")
def disaggregated():
    # KV events on, so that the prefill phase is routed by the prefix-aware policy.
    events = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{two_ports()[0]}"})
    s = InProcessStack([*COMMON, "--prefill-engines", "1", "--prefill-min-prompt-tokens", "8",
                        "--kv-transfer-config", _kv(), "--kv-events-config", events, "--enable-log-requests",
                        "demo:deepseek-v4"])
    yield s
    s.terminate()


def _client(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0, timeout=30)


def _metric(stack, name: str, **labels) -> float:
    text = httpx.get(stack.base_url + "/metrics", timeout=30).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _chat(client, stream: bool, text: str | None = None, **kw):
    extra = {"vllm_xargs": {"sim_text": text}} if text is not None else {}
    args = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me about rivers and stones. " * 4}],
                max_tokens=24, temperature=0, extra_body=extra, **kw)
    if not stream:
        out = client.chat.completions.create(**args)
        c = out.choices[0]
        calls = [(t.function.name, json.loads(t.function.arguments)) for t in c.message.tool_calls or []]
        reasoning = getattr(c.message, "reasoning", None) or (c.message.model_extra or {}).get("reasoning")
        lp = [(t.token, round(t.logprob, 4)) for t in c.logprobs.content] if c.logprobs else None
        return c.message.content, reasoning, calls, c.finish_reason, lp, out.usage.completion_tokens
    content, reasoning, calls, finish, lp, usage = "", "", {}, None, [], None
    for chunk in client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}):
        usage = chunk.usage or usage
        for c in chunk.choices:
            d = c.delta
            content += d.content or ""
            reasoning += (d.model_extra or {}).get("reasoning") or ""
            for t in d.tool_calls or []:
                cur = calls.setdefault(t.index, ["", ""])
                cur[0] += t.function.name or ""
                cur[1] += t.function.arguments or ""
            if c.logprobs and c.logprobs.content:
                lp += [(t.token, round(t.logprob, 4)) for t in c.logprobs.content]
            finish = c.finish_reason or finish
    return (content or None, reasoning or None, [(n, json.loads(a)) for n, a in calls.values()], finish,
            lp or None, usage.completion_tokens)


CASES = {
    "plain": dict(),
    "logprobs": dict(logprobs=True, top_logprobs=2),
    "stop": dict(stop=[" stones"]),
    "tools": dict(text=f"<think>Looking it up.</think>{CALL}", tools=TOOLS),
    "reasoning": dict(text="<think>A short thought.</think>The answer is here."),
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("case", list(CASES))
def test_chat_answers_as_colocated(colocated, disaggregated, case, stream):
    kw = dict(CASES[case])
    text = kw.pop("text", None)
    ours = _chat(_client(disaggregated), stream, text, **kw)
    assert ours == _chat(_client(colocated), stream, text, **kw)
    assert ours[0] or ours[1] or ours[2]  # (something was answered)


def test_every_style_answers_as_colocated(colocated, disaggregated):
    prompt = "Tell me about rivers and stones. " * 4

    def answers(stack):
        c = _client(stack)
        out = [c.completions.create(model=MODEL, prompt=prompt, max_tokens=16, temperature=0).choices[0].text]
        out.append(c.responses.create(model=MODEL, input=prompt, max_output_tokens=16, temperature=0).output_text)
        r = httpx.post(stack.base_url + "/v1/messages", timeout=30, json={
            "model": MODEL, "max_tokens": 16, "temperature": 0, "messages": [{"role": "user", "content": prompt}]})
        assert r.status_code == 200, r.text
        out.append("".join(b.get("text", "") for b in r.json()["content"]))
        return out

    before = _metric(disaggregated, "vllm:disagg_requests_total", path="two_phase")
    assert answers(disaggregated) == answers(colocated)
    assert _metric(disaggregated, "vllm:disagg_requests_total", path="two_phase") == before + 3


def test_the_decode_engine_reports_the_prompt_loaded(colocated, disaggregated):
    def usage(stack):
        r = _client(stack).completions.create(model=MODEL, prompt="A prompt nobody sent before, about owls. " * 6,
                                              max_tokens=4, temperature=0)
        return r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens

    prompt_tokens, cached = usage(disaggregated)
    assert cached == prompt_tokens  # transferred whole (the simulated connector moves every token)
    assert usage(colocated) == (prompt_tokens, 0)


def test_short_prompts_skip_the_prefill_engine(disaggregated):
    before = _metric(disaggregated, "vllm:disagg_requests_total", path="short")
    r = _client(disaggregated).completions.create(model=MODEL, prompt="Hi", max_tokens=4, temperature=0)
    assert r.usage.prompt_tokens < 8 and r.usage.prompt_tokens_details.cached_tokens == 0
    assert _metric(disaggregated, "vllm:disagg_requests_total", path="short") == before + 1


def test_roles_are_reported(disaggregated):
    load = httpx.get(disaggregated.base_url + "/load", timeout=30).json()
    assert {k: v["role"] for k, v in load["engines"].items()} == {"0": "prefill", "1": "decode"}
    sources = httpx.get(disaggregated.base_url + "/kv_event_sources", timeout=30).json()
    assert [(x["data_parallel_rank"], x["role"]) for x in sources] == [(0, "prefill"), (1, "decode")]
    assert _metric(disaggregated, "vllm:engine_role_info", engine="0", role="prefill") == 1
    assert _metric(disaggregated, "vllm:engine_role_info", engine="1", role="decode") == 1
    assert _metric(disaggregated, "vllm:disagg_prefill_phase_seconds_count", engine="0") >= 1
    assert _metric(disaggregated, "vllm:disagg_decode_first_token_seconds_count", engine="1") >= 1


def test_a_failed_kv_load_is_run_again_whole(colocated):
    """Every load fails on the decode engine (vLLM's default policy ends such a request with an
    error): the client still gets the colocated answer."""
    with InProcessStack([*COMMON, "--prefill-engines", "1", "--kv-transfer-config", _kv(fail_load_every=1),
                         "demo:deepseek-v4"]) as failing:
        for stream in (False, True):
            assert _chat(_client(failing), stream) == _chat(_client(colocated), stream)
        assert _metric(failing, "vllm:disagg_requests_total", path="recomputed") == 2


def test_a_client_leaving_in_the_prefill_phase_ends_it_there():
    """A long prefill (each prompt token costs engine time) and a client that leaves during it:
    the prefill engine drops the request and the decode engine never sees it."""
    with InProcessStack([*COMMON, "--prefill-engines", "1", "--kv-transfer-config", _kv(),
                         "--prefill-time-per-token", "0.002", "--max-num-batched-tokens", "64",
                         "demo:deepseek-v4"]) as stack:
        prefill, decode = (e.engine.scheduler for e in stack.engines)
        with httpx.stream("POST", stack.base_url + "/v1/completions", timeout=30, json={
                "model": MODEL, "prompt": "word " * 600, "max_tokens": 50, "stream": True}) as r:
            assert r.status_code == 200
            deadline = time.monotonic() + 10
            while not prefill.requests and time.monotonic() < deadline:
                time.sleep(0.01)
            assert prefill.requests
        deadline = time.monotonic() + 10
        while prefill.requests and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not prefill.requests and not decode.requests
        assert _metric(stack, "vllm:disagg_requests_total", path="two_phase") == 0


def test_the_request_log_names_both_engines(disaggregated):
    r = httpx.post(disaggregated.base_url + "/v1/completions", timeout=30, headers={"X-Request-Id": "both-engines"},
                   json={"model": MODEL, "prompt": "Tell me about rivers and stones. " * 4, "max_tokens": 4})
    assert r.status_code == 200, r.text

    def line():
        return next((json.loads(x[x.index("{"):]) for x in disaggregated.logs().splitlines()
                     if '"both-engines"' in x and '"event":"request"' in x), None)

    disaggregated.wait_for(lambda: line() is not None, 10, "the request's log line")
    assert line()["engines"] == [0, 1]  # the prefill engine, then the decode engine
