"""/metrics on the whole stack: 2 workers on the simulated engine, the openai client.

After traffic, `/metrics` from any worker shows totals equal to the requests all workers served;
a killed worker's counts stay and its pool gauges go; a real Prometheus server scrapes the stack
and a rate query returns a value; the drain is visible in /ready and /metrics.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.stack import Stack, free_port
from tests.stack import worker_pids as stack_worker_pids

MODEL = "demo:deepseek-v4"
N_PLAIN = 8
N_STREAM = 4
LONG = 1500  # tokens of the request in flight during the drain (~7.5 s of 5 ms sim steps)


def scrape(base_url: str) -> dict[tuple[str, tuple], float]:
    text = httpx.get(base_url + "/metrics", timeout=10).text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(smp, name: str, **labels) -> float:
    return sum(v for (n, lbls), v in smp.items()
               if n == name and all(dict(lbls).get(k) == str(x) for k, x in labels.items()))


def worker_pids(stack: Stack) -> list[int]:
    return stack_worker_pids(stack.proc.pid)


@pytest.fixture(scope="module")
def stack():
    s = Stack(
        ["--engine", "sim", "--workers", "2", "--sim-step-time", "0.005", "--max-model-len", "4096",
         "--served-model-name", "dsv4", "--shutdown-timeout", "60", "--enable-log-requests", MODEL],
        ready_timeout=120,
    )
    yield s
    s.terminate()


@pytest.fixture(scope="module")
def served(stack):
    """Traffic through both workers; returns the number of chat completions served."""
    client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0, timeout=30)
    for i in range(N_PLAIN):
        # A fresh connection each time (the openai client would reuse one): SO_REUSEPORT
        # spreads them over the workers.
        with httpx.Client(timeout=30) as h:
            r = h.post(stack.base_url + "/v1/chat/completions", json={
                "model": "dsv4", "messages": [{"role": "user", "content": f"hello {i}"}], "max_tokens": 4 + i,
            })
            assert r.status_code == 200, r.text
    for i in range(N_STREAM):
        chunks = list(client.chat.completions.create(
            model="dsv4", messages=[{"role": "user", "content": "stream"}], max_tokens=6, stream=True))
        assert chunks
    n = N_PLAIN + N_STREAM
    # A streamed response is complete for the client a moment before its handler returns (and
    # is logged and counted): wait for the last ones.
    _wait(lambda: sum(_served_by_worker(stack).values()) >= n, 20, "request logs")
    return n


def _served_by_worker(stack: Stack) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in stack.logs().splitlines():
        m = re.match(r"\[(worker \d+)\].*\"path\":\"/v1/chat/completions\".*\"status\":200", line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def test_totals_equal_requests_served_by_all_workers(stack, served):
    by_worker = _served_by_worker(stack)
    assert sum(by_worker.values()) == served
    assert len(by_worker) == 2, f"traffic reached only {by_worker} (SO_REUSEPORT spread)"
    # Any worker answers /metrics with the same totals.
    for _ in range(6):
        s = scrape(stack.base_url)
        assert total(s, "http_requests_total", handler="/v1/chat/completions", status="2xx") == served
        assert total(s, "vllm_frontend_workers_serving") == 2
        assert total(s, "vllm_frontend_requests_in_flight") == 0
        assert total(s, "vllm:prefix_cache_queries_total", engine=0) > 0
        assert total(s, "vllm:num_requests_running", engine=0) == 0  # the freshest sample: idle
        assert total(s, "vllm:request_success_total") == served
        assert total(s, "vllm:e2e_request_latency_seconds_count") == served
        assert total(s, "vllm:generation_tokens_total") == sum(4 + i for i in range(N_PLAIN)) + 6 * N_STREAM


def test_dead_worker_counts_stay_and_pool_gauges_go(stack, served):
    before = scrape(stack.base_url)
    pids = worker_pids(stack)
    assert len(pids) == 2
    again = stack.logs().count("ready again")
    os.kill(pids[0], signal.SIGKILL)
    _wait(lambda: stack.logs().count("ready again") > again, 60, "the worker's restart")
    for _ in range(6):
        s = scrape(stack.base_url)
        assert total(s, "http_requests_total", handler="/v1/chat/completions", status="2xx") == \
            total(before, "http_requests_total", handler="/v1/chat/completions", status="2xx")
        assert total(s, "vllm_frontend_workers_serving") == 2  # not 3: the dead one's is gone


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what} (last: {last!r})")


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus server not installed (.ci/install)")
def test_real_prometheus_scrapes_and_rate_query_returns_a_value(stack, served, tmp_path):
    prom_port = free_port()
    host_port = stack.base_url.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: vllm-pyfrontend\n    scrape_interval: 1s\n"
        f"    static_configs:\n      - targets: ['{host_port}']\n"
    )
    log = open(tmp_path / "prometheus.log", "w")
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    api = f"http://127.0.0.1:{prom_port}"
    stop = threading.Event()

    def traffic():
        with httpx.Client(timeout=30) as h:
            while not stop.is_set():
                h.post(stack.base_url + "/v1/chat/completions", json={
                    "model": "dsv4", "messages": [{"role": "user", "content": "tick"}], "max_tokens": 3})
                stop.wait(0.3)

    t = threading.Thread(target=traffic, daemon=True)
    try:
        _wait(lambda: _ok(api + "/-/ready"), 60, "prometheus ready")
        t.start()
        _wait(lambda: _target_up(api), 60, "the stack's target to be up")
        metric = "vllm:request_success_total"
        query = f'sum(rate({{__name__="{metric}"}}[1m]))'
        value = _wait(lambda: _query_positive(api, query), 60, query)
        assert value > 0
        # A scheduler-stats gauge made it through as well.
        assert _wait(lambda: _query_has_series(api, '{__name__="vllm:kv_cache_usage_perc"}'), 30, "gauge")
    finally:
        stop.set()
        t.join(10)
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _target_up(api: str) -> bool:
    try:
        targets = httpx.get(api + "/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
    except (httpx.HTTPError, KeyError, ValueError):
        return False
    return any(t.get("health") == "up" for t in targets)


def _query(api: str, q: str) -> list:
    try:
        r = httpx.get(api + "/api/v1/query", params={"query": q}, timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return []
    return r.get("data", {}).get("result", []) if r.get("status") == "success" else []


def _query_positive(api: str, q: str) -> float | None:
    result = _query(api, q)
    if result:
        v = float(result[0]["value"][1])
        if v > 0:
            return v
    return None


def _query_has_series(api: str, q: str) -> bool:
    return bool(_query(api, q))


def test_drain_is_visible_in_ready_and_metrics(stack, served):
    """Last in this module: SIGTERM with a request in flight. While the workers drain they
    still answer: /ready 503, /health 200, new work 503, /metrics shows both draining; the
    in-flight request completes."""
    result: dict = {}

    def long_request():
        with httpx.Client(timeout=60) as h:
            r = h.post(stack.base_url + "/v1/chat/completions", json={
                "model": "dsv4", "messages": [{"role": "user", "content": "long"}], "max_tokens": LONG,
                "ignore_eos": True})
            result["status"] = r.status_code
            result["body"] = r.json()

    t = threading.Thread(target=long_request)
    t.start()
    _wait(lambda: total(scrape(stack.base_url), "vllm_frontend_requests_in_flight") == 1, 20, "in flight")
    stack.proc.send_signal(signal.SIGTERM)
    _wait(lambda: _status(stack.base_url + "/ready") == 503, 20, "/ready 503")
    assert _status(stack.base_url + "/health") == 200
    s = _wait(lambda: (lambda s: s if total(s, "vllm_frontend_workers_draining") == 2 else None)(
        scrape(stack.base_url)), 20, "draining gauge")
    assert total(s, "vllm_frontend_workers_serving") == 0
    r = httpx.post(stack.base_url + "/v1/chat/completions", timeout=10, json={
        "model": "dsv4", "messages": [{"role": "user", "content": "late"}], "max_tokens": 2})
    assert r.status_code == 503
    t.join(90)
    assert result.get("status") == 200, result
    assert result["body"]["usage"]["completion_tokens"] == LONG
    assert stack.proc.wait(60) == 0


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.HTTPError:
        return None
