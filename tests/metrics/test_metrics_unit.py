"""vllm_pyfrontend.metrics on its own: vLLM's names and buckets, per-request recording, the batch ITL
flush, scheduler stats, and the multiprocess merge (real worker-like processes writing files)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.parser import text_string_to_metric_families

from vllm_pyfrontend.metrics import (
    INTER_TOKEN_LATENCY_BUCKETS,
    MULTIPROC_ENV,
    REQUEST_LATENCY_BUCKETS,
    TIME_TO_FIRST_TOKEN_BUCKETS,
    MetricsRelay,
    WorkerMetrics,
    build_1_2_5_buckets,
    render_latest,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def samples(text: bytes | str) -> dict[tuple[str, tuple], float]:
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(smp, name: str, **labels) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    total, found = 0.0, False
    for (n, lbls), v in smp.items():
        if n == name and all(dict(lbls).get(k) == str(x) for k, x in labels.items()):
            total += v
            found = True
    assert found, f"no sample {name} {labels}"
    return total


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)


def test_buckets_are_vllms():
    from vllm.v1.metrics import buckets as vb

    assert tuple(vb.REQUEST_LATENCY_BUCKETS) == REQUEST_LATENCY_BUCKETS
    assert tuple(vb.TIME_TO_FIRST_TOKEN_BUCKETS) == TIME_TO_FIRST_TOKEN_BUCKETS
    assert tuple(vb.INTER_TOKEN_LATENCY_BUCKETS) == INTER_TOKEN_LATENCY_BUCKETS
    for n in (1, 7, 4096, 16384, 131072):
        assert build_1_2_5_buckets(n) == vb.build_1_2_5_buckets(n)


def test_request_recording_names_labels_and_values():
    m = WorkerMetrics("my-model", [0], 4096)
    r = m.start_request(arrival=10.0)
    r.on_output(10.25)  # first token
    r.on_output(10.30)
    r.on_output(10.32)
    r.on_finished("length", 12, 3, max_tokens=3, now=11.0)
    r.on_finished("length", 12, 3, max_tokens=3, now=12.0)  # idempotent
    s = samples(m.render())
    lbl = {"model_name": "my-model", "engine": "0"}
    assert value(s, "vllm:request_success_total", finished_reason="length", **lbl) == 1
    assert value(s, "vllm:request_success_total", finished_reason="stop", **lbl) == 0
    assert value(s, "vllm:prompt_tokens_total", **lbl) == 12
    assert value(s, "vllm:generation_tokens_total", **lbl) == 3
    assert value(s, "vllm:time_to_first_token_seconds_sum", **lbl) == pytest.approx(0.25)
    assert value(s, "vllm:e2e_request_latency_seconds_sum", **lbl) == pytest.approx(1.0)
    assert value(s, "vllm:inter_token_latency_seconds_count", **lbl) == 2
    assert value(s, "vllm:request_params_max_tokens_count", **lbl) == 1
    assert value(s, "vllm:request_params_n_sum", **lbl) == 1
    assert value(s, "vllm:request_prompt_tokens_bucket", le="20.0", **lbl) == 1
    assert value(s, "vllm:request_prompt_tokens_bucket", le="10.0", **lbl) == 0
    # No queue time known: no series (rather than zeros pretending to be measurements).
    assert not any(n.startswith("vllm:request_queue_time_seconds") for n, _ in s)
    r2 = m.start_request(arrival=0.0)
    r2.on_finished("stop", 1, 0, queue_time_s=0.4, now=1.0)
    s = samples(m.render())
    assert value(s, "vllm:request_queue_time_seconds_count", **lbl) == 1
    # A request without an explicit max_tokens is not observed (as vLLM).
    assert value(s, "vllm:request_params_max_tokens_count", **lbl) == 1


def test_itl_batch_flush_equals_per_observation_histogram():
    """The per-request bucket array flushed at the end gives exactly what observing every
    inter-token latency would (boundaries included: `le` is inclusive)."""
    gaps = [0.001, 0.01, 0.0100001, 0.05, 0.2, 0.2, 1.0, 3.0, 79.0, 80.0, 81.0]
    m = WorkerMetrics("m", [0], 128)
    r = m.start_request(arrival=0.0)
    t = 1.0
    r.on_output(t)
    for g in gaps:
        t += g
        r.on_output(t)
    r.on_finished("stop", 1, len(gaps) + 1, now=t)
    ref_registry = CollectorRegistry()
    ref = Histogram("ref", "ref", buckets=INTER_TOKEN_LATENCY_BUCKETS, registry=ref_registry)
    t = 1.0
    prev = t
    for g in gaps:
        t += g
        ref.observe(t - prev)  # the same float arithmetic as the recorder
        prev = t
    got = samples(m.render())
    want = samples(render_latest(ref_registry))
    for (name, lbls), v in want.items():
        if not name.endswith(("_bucket", "_count", "_sum")):
            continue
        le = dict(lbls).get("le")
        ours = value(got, "vllm:inter_token_latency_seconds" + name[3:], **({"le": le} if le else {}))
        assert ours == pytest.approx(v), (name, le)


def test_direct_histogram_observe_equals_prometheus_client():
    """`_HistogramChild.observe` (a bisect straight to the bucket values) counts like
    prometheus_client's `Histogram.observe`, bounds included (`le` is inclusive)."""
    from vllm_pyfrontend.metrics import _HistogramChild

    amounts = [0, 1, 1.5, 2, 4.999, 5, 5.0001, 10, 99, 100, 1000, 1e9, 0.25, 7]
    buckets = [1, 2, 5, 10, 20, 50, 100]
    got_reg, want_reg = CollectorRegistry(), CollectorRegistry()
    ours = _HistogramChild(Histogram("h", "h", buckets=buckets, registry=got_reg))
    ref = Histogram("h", "h", buckets=buckets, registry=want_reg)
    for a in amounts:
        ours.observe(a)
        ref.observe(a)
    WorkerMetrics.flush()  # (observations are gathered until the loop pass ends or a flush)

    def counts(reg):
        return {k: v for k, v in samples(render_latest(reg)).items() if not k[0].endswith("_created")}

    assert counts(got_reg) == counts(want_reg)
    assert counts(got_reg)[("h_count", ())] == len(amounts)


async def test_finished_requests_are_written_at_the_end_of_the_loop_pass():
    """On a running loop, what finished requests add is gathered and written once per value
    when the loop pass ends (`_Increments`): nothing before, everything after; `/metrics`
    flushes first."""
    m = WorkerMetrics("m", [0], 128)
    lbl = {"model_name": "m", "engine": "0"}
    for k in range(3):
        r = m.start_request(arrival=0.0)
        r.on_output(0.5)
        r.on_output(0.75)
        r.on_finished("length", 10, 2 + k, max_tokens=8, now=1.0)
    s = samples(m.render())
    assert value(s, "vllm:request_success_total", finished_reason="length", **lbl) == 0
    await asyncio.sleep(0)  # the pass ends: one write per value
    s = samples(m.render())
    assert value(s, "vllm:request_success_total", finished_reason="length", **lbl) == 3
    assert value(s, "vllm:generation_tokens_total", **lbl) == 2 + 3 + 4
    assert value(s, "vllm:e2e_request_latency_seconds_count", **lbl) == 3
    assert value(s, "vllm:inter_token_latency_seconds_count", **lbl) == 3
    r = m.start_request(arrival=0.0)
    r.on_finished("stop", 1, 1, now=1.0)
    m.flush()  # what the /metrics handler does before it merges
    assert value(samples(m.render()), "vllm:request_success_total", finished_reason="stop", **lbl) == 1


def test_scheduler_stats_gauges_and_prefix_counters():
    m = WorkerMetrics("m", [0, 1], 128)
    m.record_scheduler_stats(1, {
        "num_running_reqs": 4, "num_waiting_reqs": 2, "num_skipped_waiting_reqs": 1,
        "kv_cache_usage": 0.25, "prefix_cache_stats": {"queries": 100, "hits": 40},
    })
    m.record_scheduler_stats(1, {
        "num_running_reqs": 3, "num_waiting_reqs": 0, "kv_cache_usage": 0.5,
        "prefix_cache_stats": {"queries": 10, "hits": 0},
    })
    s = samples(m.render())
    assert value(s, "vllm:num_requests_running", engine=1) == 3
    assert value(s, "vllm:num_requests_waiting", engine=1) == 0
    assert value(s, "vllm:kv_cache_usage_perc", engine=1) == 0.5
    assert value(s, "vllm:prefix_cache_queries_total", engine=1) == 110  # deltas add up
    assert value(s, "vllm:prefix_cache_hits_total", engine=1) == 40


def test_waiting_by_reason_splits_the_waiting_gauge():
    m = WorkerMetrics("m", [0], 128)
    m.record_scheduler_stats(0, {"num_running_reqs": 1, "num_waiting_reqs": 2, "num_skipped_waiting_reqs": 3})
    s = samples(m.render())
    assert value(s, "vllm:num_requests_waiting", engine=0) == 5
    assert value(s, "vllm:num_requests_waiting_by_reason", engine=0, reason="capacity") == 2
    assert value(s, "vllm:num_requests_waiting_by_reason", engine=0, reason="deferred") == 3


def _observed_client(observer):
    """An engine client (not started) built with `observer`, and a function that hands its
    output reader one engine message carrying a scheduler stats sample, as the engine sends it."""
    from vllm_pyfrontend.engine.client import EngineClient
    from vllm_pyfrontend.supervisor.sim import wire as sim_wire

    client = EngineClient(client_index=0, input_address="ipc:///nonexistent-in",
                          output_address="ipc:///nonexistent-out", engine_indices=[0], observer=observer)

    def receive(engine: int, stats: dict, timestamp: float = 1000.0) -> None:
        client._outputs.handle_message([sim_wire.pack_outputs(engine, [], timestamp, scheduler_stats=stats)])

    return client, receive


def test_the_engine_client_reports_every_stats_sample_once():
    m = WorkerMetrics("m", [0], 128)
    client, receive = _observed_client(m)
    for q in (5, 6, 7):
        receive(0, {"num_running_reqs": q, "prefix_cache_stats": {"queries": q, "hits": 0}})
    assert client.scheduler_stats[0]["num_running_reqs"] == 7  # the client's own view
    s = samples(m.render())
    assert value(s, "vllm:prefix_cache_queries_total") == 18
    assert value(s, "vllm:num_requests_running") == 7


def test_the_relay_forwards_once_the_metrics_exist():
    """A worker builds its metrics after its engine client: what the client reports before
    they exist is dropped, everything after reaches them."""
    m = WorkerMetrics("m", [0], 128)
    relay = MetricsRelay()
    client, receive = _observed_client(relay)
    receive(0, {"num_running_reqs": 1, "prefix_cache_stats": {"queries": 4, "hits": 0}})
    relay.metrics = m
    receive(0, {"num_running_reqs": 2, "prefix_cache_stats": {"queries": 3, "hits": 0}})
    relay.observe_iteration(0, 5)
    relay.count_migration("engine_down")
    relay.count_migration_failure("limit")
    assert client.scheduler_stats[0]["num_running_reqs"] == 2
    s = samples(m.render())
    assert value(s, "vllm:prefix_cache_queries_total") == 3
    assert value(s, "vllm:iteration_tokens_total_sum") == 5
    assert value(s, "vllm:request_migrations_total", reason="engine_down") == 1
    assert value(s, "vllm:request_migration_failures_total", reason="limit") == 1


_WORKER_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from vllm_pyfrontend.metrics import WorkerMetrics
    spec = json.loads(sys.argv[1])
    m = WorkerMetrics("m", [0], 4096)
    for i in range(spec["requests"]):
        r = m.start_request(arrival=0.0)
        r.on_output(0.1); r.on_output(0.2)
        r.on_finished("stop", 10, 2, max_tokens=16, now=1.0)
    m.set_serving(True)
    if spec.get("draining"):
        m.set_draining(True)
    time.sleep(spec["delay"])
    m.record_scheduler_stats(0, {"num_running_reqs": spec["running"], "num_waiting_reqs": 0,
                                 "kv_cache_usage": 0.1, "prefix_cache_stats": {"queries": 7, "hits": 1}},
                             spec.get("engine_time"))
    m.observe_http("POST", "/v1/chat/completions", 200, 0.05)
    print("ok", flush=True)
""")


def _run_worker(path: str, **spec) -> int:
    env = {**os.environ, MULTIPROC_ENV: path, "PYTHONPATH": REPO}
    p = subprocess.Popen([sys.executable, "-c", _WORKER_SCRIPT, json.dumps(spec)], env=env,
                         stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and "ok" in out
    return p.pid


def test_multiprocess_merge_no_double_counting_freshest_gauge_dead_worker(tmp_path, monkeypatch):
    path = str(tmp_path)
    pid_a = _run_worker(path, requests=3, running=5, delay=0.0)
    pid_b = _run_worker(path, requests=4, running=9, delay=0.05, draining=True)  # later sample
    monkeypatch.setenv(MULTIPROC_ENV, path)
    s = samples(render_latest())
    assert value(s, "vllm:request_success_total", finished_reason="stop") == 7
    assert value(s, "vllm:prompt_tokens_total") == 70
    assert value(s, "vllm:e2e_request_latency_seconds_count") == 7
    assert value(s, "vllm:inter_token_latency_seconds_count") == 7
    assert value(s, "vllm:prefix_cache_queries_total") == 14
    assert value(s, "http_requests_total", handler="/v1/chat/completions", status="2xx") == 2
    # One sample per engine: the freshest (worker b's), not a sum or one per process.
    running = [v for (n, lbls), v in s.items() if n == "vllm:num_requests_running"]
    assert running == [9]
    assert value(s, "vllm_frontend_workers_serving") == 1  # b is draining
    assert value(s, "vllm_frontend_workers_draining") == 1
    # Worker b dies: its pool gauges go, its counts stay.
    from vllm_pyfrontend.metrics import mark_worker_dead

    mark_worker_dead(pid_b, path)
    s = samples(render_latest())
    assert value(s, "vllm:request_success_total", finished_reason="stop") == 7
    assert value(s, "vllm_frontend_workers_draining") == 0
    assert value(s, "vllm_frontend_workers_serving") == 1
    assert pid_a != pid_b


_FORK_SCRIPT = textwrap.dedent("""
    import os
    calls = [0]
    real_getpid = os.getpid
    def counting_getpid():
        calls[0] += 1
        return real_getpid()
    os.getpid = counting_getpid  # (before prometheus_client binds it)
    from vllm_pyfrontend.metrics import WorkerMetrics
    m = WorkerMetrics("m", [0], 4096)  # made before the fork, as a worker template does
    def one():
        r = m.start_request(arrival=0.0)
        r.on_output(0.1)
        r.on_finished("stop", 10, 2, now=1.0)
    pid = os.fork()
    if pid == 0:
        one(); one()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
    before = calls[0]
    one()
    assert calls[0] == before, calls  # no process id asked per write
    print("ok", pid, flush=True)
""")



def test_multiprocess_values_follow_a_fork_without_asking_the_pid_per_write(tmp_path, monkeypatch):
    """Values remember the process id (renewed in a forked child): a child's counts go to its
    own files, the parent's to its, and the merge sums both."""
    path = str(tmp_path)
    env = {**os.environ, MULTIPROC_ENV: path, "PYTHONPATH": REPO}
    p = subprocess.Popen([sys.executable, "-c", _FORK_SCRIPT], env=env, stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and out.startswith("ok"), out
    child = int(out.split()[1])
    files = set(os.listdir(path))
    assert f"counter_{p.pid}.db" in files and f"counter_{child}.db" in files
    monkeypatch.setenv(MULTIPROC_ENV, path)
    s = samples(render_latest())
    assert value(s, "vllm:request_success_total", finished_reason="stop") == 3


def test_multiprocess_gauge_is_the_engines_newest_step_not_the_latest_receipt(tmp_path, monkeypatch):
    # The engine sends each step's stats to one worker. Worker a gets the newer step (idle, the
    # clients left); worker b reads the older step (4 running) later. Once idle the engine sends
    # nothing more: the merged gauge must say what the engine said last, by its own clock.
    path = str(tmp_path)
    _run_worker(path, requests=0, running=0, delay=0.0, engine_time=1000.005)
    _run_worker(path, requests=0, running=4, delay=0.05, engine_time=1000.0)  # received later
    monkeypatch.setenv(MULTIPROC_ENV, path)
    running = [v for (n, lbls), v in samples(render_latest()).items() if n == "vllm:num_requests_running"]
    assert running == [0]


def test_the_engine_client_reports_the_engines_clock_with_each_sample():
    m = WorkerMetrics("m", [0], 128)
    seen = []
    m.record_scheduler_stats = lambda idx, stats, engine_time=None: seen.append((idx, engine_time))
    client, receive = _observed_client(m)
    receive(0, {"num_running_reqs": 1}, timestamp=1234.5)
    assert seen == [(0, 1234.5)] and client.scheduler_stats_engine_time == {0: 1234.5}


def test_steps_delivered_at_once_count_as_steps():
    """A drained backlog delivers several engine steps of a stream at once (on_steps): TTFT is
    the first step's arrival, ITL has one observation per step after the first, their sum the
    time from the first arrival to the last."""
    m = WorkerMetrics("m", [0], 128)
    r = m.start_request(arrival=0.0)
    r.on_steps(0.5, 0.5 + 0.004 * 4, 5)  # first token, then 4 steps 4 ms apart
    r.on_output(0.6)
    r.on_finished("length", 1, 6, now=0.6)
    s = samples(m.render())
    lbl = {"model_name": "m", "engine": "0"}
    assert value(s, "vllm:time_to_first_token_seconds_sum", **lbl) == pytest.approx(0.5)
    assert value(s, "vllm:inter_token_latency_seconds_count", **lbl) == 5
    assert value(s, "vllm:inter_token_latency_seconds_sum", **lbl) == pytest.approx(0.1)
    assert value(s, "vllm:inter_token_latency_seconds_bucket", le="0.01", **lbl) == 4


def test_buckets_of_the_engine_step_families_are_vllms():
    from vllm.v1.metrics.buckets import histogram_buckets

    from vllm_pyfrontend.metrics import ITERATION_TOKENS_BUCKETS, REQUEST_NUM_PREEMPTIONS_BUCKETS

    assert list(ITERATION_TOKENS_BUCKETS) == list(histogram_buckets("iteration_tokens"))
    assert list(REQUEST_NUM_PREEMPTIONS_BUCKETS) == list(histogram_buckets("request_num_preemptions"))


def test_request_phases_are_vllms_on_the_engine_clock():
    """Queue, prefill, decode and inference time, time per output token and preemptions from
    the engine's events and step times (vLLM's RequestStateStats -> FinishedRequestStats); a
    request the engine never finished (a client abort) or without events gets no phases."""
    from vllm_pyfrontend.metrics import EngineTiming

    m = WorkerMetrics("m", [0], 128)
    lbl = {"model_name": "m", "engine": "0"}
    t = EngineTiming()
    t.queue_time, t.scheduled_at, t.first_token_at, t.last_token_at = 0.5, 100.0, 100.25, 101.25
    t.preemptions, t.finished = 2, True
    m.start_request(arrival=0.0).on_finished("length", 3, 5, now=2.0, timing=t)
    unfinished = EngineTiming()
    unfinished.scheduled_at, unfinished.first_token_at, unfinished.last_token_at = 1.0, 2.0, 3.0
    m.start_request(arrival=0.0).on_finished("abort", 3, 2, now=2.0, timing=unfinished)
    m.start_request(arrival=0.0).on_finished("stop", 3, 1, now=2.0)
    s = samples(m.render())
    for name, want in (("queue_time", 0.5), ("prefill_time", 0.25), ("decode_time", 1.0),
                       ("inference_time", 1.25)):
        assert value(s, f"vllm:request_{name}_seconds_count", **lbl) == 1, name
        assert value(s, f"vllm:request_{name}_seconds_sum", **lbl) == pytest.approx(want), name
    assert value(s, "vllm:request_time_per_output_token_seconds_sum", **lbl) == pytest.approx(0.25)
    assert value(s, "vllm:request_num_preemptions_count", **lbl) == 1
    assert value(s, "vllm:request_num_preemptions_sum", **lbl) == 2
    assert value(s, "vllm:num_preemptions_total", **lbl) == 2
    assert value(s, "vllm:request_success_total", **lbl) == 3


def test_iteration_tokens_one_observation_per_engine_message():
    m = WorkerMetrics("m", [0, 1], 128)
    for tokens in (12, 1, 1, 300):
        m.observe_iteration(0, tokens)
    m.observe_iteration(1, 8)
    s = samples(m.render())
    e0 = {"model_name": "m", "engine": "0"}
    assert value(s, "vllm:iteration_tokens_total_count", **e0) == 4
    assert value(s, "vllm:iteration_tokens_total_sum", **e0) == 314
    assert value(s, "vllm:iteration_tokens_total_bucket", le="1.0", **e0) == 2
    assert value(s, "vllm:iteration_tokens_total_bucket", le="16.0", **e0) == 3
    assert value(s, "vllm:iteration_tokens_total_count", model_name="m", engine="1") == 1


def test_cache_config_info_from_the_engines_ready_response():
    from vllm_pyfrontend.engine.types import EngineInfo

    m = WorkerMetrics("m", [0], 128)
    raw = {"block_size": 16, "num_gpu_blocks": 1024, "kv_cache_size_tokens": 16384,
           "kv_cache_max_concurrency": 8.0, "effective_attention_block_size": 16}
    m.record_cache_config([EngineInfo(engine_index=0, max_model_len=2048, vllm_version="0.32.0", raw=raw)])
    (labels, v), = [(dict(k[1]), v) for k, v in samples(m.render()).items() if k[0] == "vllm:cache_config_info"]
    assert v == 1
    assert labels == {"engine": "0", "block_size": "16", "num_gpu_blocks": "1024", "kv_cache_size_tokens": "16384",
                      "kv_cache_max_concurrency": "8.0", "effective_attention_block_size": "16",
                      "mamba_block_size": "None"}
