"""The engine-step families of /metrics on the whole stack (2 workers, the simulated engine, the
openai client), with the counts vLLM's own test expects of them
(tests/entrypoints/serve/instrumentator/test_metrics.py::test_metrics_counts):

- `vllm:iteration_tokens_total`: one observation per engine step that carried outputs, of the
  step's new tokens plus the prompt tokens computed for the requests it started; for requests
  sent one after another, `count = requests * max_tokens` and
  `sum = requests * (prompt tokens + max_tokens)`;
- the request phases on the engine's clock (queue, prefill, decode, inference, time per output
  token, preemptions): one observation per request;
- `vllm:cache_config_info` with the engine's KV cache size;
- every name of the list that test's `test_metrics_exist` looks for (`EXPECTED_METRICS_V1`).
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.metrics.test_metrics_stack import MODEL, scrape, total
from tests.stack import Stack

N_REQUESTS = 6
MAX_TOKENS = 5
PROMPT = [101, 102, 103, 104, 105, 106, 107, 108, 109]

# vLLM 0.32's tests/entrypoints/serve/instrumentator/test_metrics.py: EXPECTED_METRICS_V1.
EXPECTED_METRICS_V1 = [
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_waiting_by_reason",
    "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
    "vllm:num_preemptions_total", "vllm:admission_rejections_total", "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total", "vllm:iteration_tokens_total", "vllm:cache_config_info",
    "vllm:request_success_total",
    *(f"vllm:{family}_{suffix}" for family in (
        "request_prompt_tokens", "request_generation_tokens", "request_params_n", "request_params_max_tokens",
        "time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
        "request_queue_time_seconds", "request_inference_time_seconds", "request_prefill_time_seconds",
        "request_decode_time_seconds", "request_num_preemptions") for suffix in ("sum", "bucket", "count")),
]


@pytest.fixture(scope="module")
def stack():
    s = Stack(["--engine", "sim", "--workers", "2", "--sim-step-time", "0.002", "--max-model-len", "1024",
               "--served-model-name", "m", MODEL], ready_timeout=120)
    yield s
    s.terminate()


@pytest.fixture(scope="module")
def after_traffic(stack):
    client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0, timeout=30)
    for _ in range(N_REQUESTS):
        r = client.completions.create(model="m", prompt=PROMPT, max_tokens=MAX_TOKENS,
                                      extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == MAX_TOKENS
    deadline = time.monotonic() + 20
    while True:  # any worker answers; both must have written their requests' values
        s = scrape(stack.base_url)
        if total(s, "vllm:request_success_total") == N_REQUESTS or time.monotonic() > deadline:
            return s
        time.sleep(0.1)


def test_every_family_vllms_test_looks_for_is_there(stack, after_traffic):
    text = httpx.get(stack.base_url + "/metrics", timeout=10).text
    assert [name for name in EXPECTED_METRICS_V1 if name not in text] == []


def test_iteration_tokens_count_and_sum_are_vllms(after_traffic):
    s = after_traffic
    assert total(s, "vllm:iteration_tokens_total_count", model_name="m", engine=0) == N_REQUESTS * MAX_TOKENS
    assert total(s, "vllm:iteration_tokens_total_sum", engine=0) == N_REQUESTS * (len(PROMPT) + MAX_TOKENS)
    # every step of one running request holds 1 token, the first one 1 + the prompt's 9
    assert total(s, "vllm:iteration_tokens_total_bucket", engine=0, le="1.0") == N_REQUESTS * (MAX_TOKENS - 1)
    assert total(s, "vllm:iteration_tokens_total_bucket", engine=0, le="16.0") == N_REQUESTS * MAX_TOKENS


def test_request_phases_are_observed_once_per_request(after_traffic):
    s = after_traffic
    for family in ("vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
                   "vllm:request_decode_time_seconds", "vllm:request_inference_time_seconds",
                   "vllm:request_time_per_output_token_seconds", "vllm:request_num_preemptions"):
        assert total(s, family + "_count", model_name="m", engine=0) == N_REQUESTS, family
    # 5 tokens of 2 ms steps: the decode phase is 4 steps; inference = prefill + decode (the
    # simulated engine schedules a request in the step that prefills it: prefill time 0)
    decode = total(s, "vllm:request_decode_time_seconds_sum")
    prefill = total(s, "vllm:request_prefill_time_seconds_sum")
    assert decode > 0 and prefill >= 0
    assert total(s, "vllm:request_inference_time_seconds_sum") == pytest.approx(prefill + decode)
    assert total(s, "vllm:request_num_preemptions_sum") == 0
    assert total(s, "vllm:num_preemptions_total", model_name="m", engine=0) == 0


def test_cache_config_info_reports_the_engines_kv_cache(after_traffic):
    infos = [dict(labels) for (name, labels), v in after_traffic.items() if name == "vllm:cache_config_info"]
    assert infos and all(i["engine"] == "0" for i in infos)
    for i in infos:
        assert int(i["kv_cache_size_tokens"]) == int(i["num_gpu_blocks"]) * int(i["block_size"]) > 0
        assert float(i["kv_cache_max_concurrency"]) > 0


def test_a_request_ended_here_by_a_stop_string_has_its_phases(stack, after_traffic):
    """A stop string matched by the frontend ends the request at that step, as vLLM's output
    processor ends it: the request has its phases like one the engine finished."""
    before = scrape(stack.base_url)
    client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0, timeout=30)
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=200,
                                       stop=[" "], extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens < 200
    deadline = time.monotonic() + 20
    while True:
        s = scrape(stack.base_url)
        done = total(s, "vllm:request_success_total") - total(before, "vllm:request_success_total")
        if done == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for family in ("vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds"):
        assert total(s, family + "_count") - total(before, family + "_count") == 1, family
