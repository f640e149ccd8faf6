"""Prometheus metrics of the frontend, aggregated across worker processes.

Every worker records into prometheus_client's multiprocess files (one mmap file per process and
metric type, in `PROMETHEUS_MULTIPROC_DIR`, which the supervisor points into its runtime dir and
sets in each worker's environment before Python starts, so prometheus_client picks its
multiprocess value class at import). Whichever worker answers `GET /metrics` merges all files:
counters and histograms are summed over processes, so a request is counted once, by the worker
that served it, and a dead worker's counts stay in the totals (its file stays; its restarted
successor has a new pid and a new file). Gauges that describe the worker pool (`live*` modes)
are dropped for dead workers: the supervisor calls `mark_process_dead` when a worker exits.

Names, label sets (`model_name`, `engine`) and histogram buckets follow vLLM's
`PrometheusStatLogger` (vllm/v1/metrics/loggers.py, buckets from vllm/v1/metrics/buckets.py), so
dashboards and alerts written for `vllm serve` work unchanged. Differences, all deliberate:

* Per-request values (token counts, TTFT, e2e latency, params) are observed once, when the
  request ends; vLLM counts prompt/generation tokens per engine step. Totals agree once requests
  finish.
* Inter-token latencies are measured per engine output (one per step, as vLLM does) but kept in
  a per-request bucket array and flushed into the histogram at request end: the hot path is an
  interval, a bisect and a list increment, with no lock and no shared-memory write.
* What the requests ending in one event-loop pass add to the values (counters, histogram
  buckets and sums, the HTTP families) is gathered and written once per value at the pass's
  end (`_Increments`): ~20 multiprocess writes per request become a few per pass. `/metrics`
  flushes first, so a worker's own answer never misses them.
* Requests the client abandoned are counted under `finished_reason="abort"` (vLLM does not
  count client-side aborts at all).
* The request phases (`vllm:request_queue_time_seconds`, `..._prefill_time_seconds`,
  `..._decode_time_seconds`, `..._inference_time_seconds`, `vllm:request_num_preemptions`,
  `vllm:request_time_per_output_token_seconds`) are computed as vLLM computes them, on the
  engine's clock: its QUEUED/SCHEDULED/PREEMPTED events and the timestamps of the steps that
  carried the request's first and last output (`EngineTiming`). They need the engine's events
  (stats logging on) and an engine-finished request; without them the families have no series
  rather than made-up values. `vllm:num_preemptions_total` adds each request's preemptions when
  it ends (vLLM: per step).
* `vllm:iteration_tokens_total` is observed once per engine output message a worker receives
  (vLLM: once per `EngineCoreOutputs`), with the same count: the new token ids plus the prompt
  tokens computed by the requests whose first output it carries (engine/delivery.py). With
  several workers each observes the part of a step sent to it, as vLLM's API servers do.
* `vllm:cache_config_info` carries the cache fields the engine's ready response reports
  (`block_size`, `num_gpu_blocks`, `kv_cache_size_tokens`, `kv_cache_max_concurrency`, ...),
  not every field of vLLM's `CacheConfig`: the engine's configuration is not sent here.
* Scheduler stats: the engine sends each step's `SchedulerStats` to one client (worker) only.
  The gauges (`num_requests_running`, `num_requests_waiting`, `kv_cache_usage_perc`) use
  prometheus_client's `mostrecent` multiprocess mode, as vLLM does: each worker writes the
  sample it received with the receipt time as the sample's timestamp, and the merge reports the
  freshest sample across workers — the engine's latest state, whichever worker got it. The
  prefix-cache counters are per-step deltas, so every worker adds the deltas it receives and
  the merge sums them: each step is counted exactly once.

Frontend-only families: `http_requests_total` / `http_request_duration_seconds` (the names and
labels prometheus-fastapi-instrumentator gives vLLM's server: `handler`, `method`, `status` as
`2xx`), `vllm_frontend_requests_in_flight`, `vllm_frontend_workers_draining` and
`vllm_frontend_workers_serving` (summed over live workers).
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST  # noqa: F401  (re-exported for the handler)

# (re-exported: the buckets, the batched writes, one request's timing)
from vllm_pyfrontend.metrics.increments import (  # noqa: F401
    INCREMENTS, STEP_FLUSH_SECONDS, _HistogramChild, _Increments, _StepHistogram,
)
from vllm_pyfrontend.metrics.buckets import (  # noqa: F401
    HTTP_LATENCY_BUCKETS, INTER_TOKEN_LATENCY_BUCKETS, ITERATION_TOKENS_BUCKETS, REQUEST_LATENCY_BUCKETS,
    REQUEST_NUM_PREEMPTIONS_BUCKETS, REQUEST_PARAMS_N_BUCKETS, TIME_TO_FIRST_TOKEN_BUCKETS, build_1_2_5_buckets,
)
from vllm_pyfrontend.metrics.request import EngineTiming, RequestMetrics  # noqa: F401
from vllm_pyfrontend import environment
from vllm_pyfrontend.environment import MULTIPROC_ENV  # noqa: F401  (PROMETHEUS_MULTIPROC_DIR)


def _use_remembered_pid() -> None:
    """prometheus_client's multiprocess values ask for the process id on every write, to
    notice a fork (a `getpid()` system call per counter increment and histogram bucket, ~20
    per request). The same answer, remembered and renewed in a forked child."""
    from prometheus_client import values

    if not getattr(values.ValueClass, "_multiprocess", False):
        return
    pid = [os.getpid()]
    os.register_at_fork(after_in_child=lambda: pid.__setitem__(0, os.getpid()))
    values.ValueClass = values.MultiProcessValue(process_identifier=lambda: pid[0])


_use_remembered_pid()

# The engine's ready-response fields that are also vLLM's `CacheConfig` fields, for
# `vllm:cache_config_info` (in vLLM's label order).
CACHE_CONFIG_FIELDS = ("block_size", "mamba_block_size", "num_gpu_blocks", "effective_attention_block_size",
                       "kv_cache_size_tokens", "kv_cache_max_concurrency")
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

# Routes vLLM's instrumentator leaves out of the HTTP families (plus our /ready).
UNINSTRUMENTED_ROUTES = frozenset({"/metrics", "/health", "/ready", "/load", "/ping", "/version"})


def multiprocess_dir() -> str | None:
    return environment.prometheus_multiproc_dir()


TENANT_FAMILIES = "vllm_frontend_tenant_"  # the per-tenant families' name prefix (`TenantMetrics`)


class _WithoutTenants:
    """A registry's families but the per-tenant ones (which name every tenant)."""

    def __init__(self, registry):
        self.registry = registry

    def collect(self):
        return (m for m in self.registry.collect() if not m.name.startswith(TENANT_FAMILIES))


def render_latest(registry: CollectorRegistry | None = None, tenant_series: bool = True) -> bytes:
    """The exposition text: merged from every worker's files in multiprocess mode, else
    `registry` (a single process: tests, or a worker started without the supervisor); without
    the per-tenant families unless `tenant_series`."""
    path = multiprocess_dir()
    if path is not None:
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=path)
    if registry is None:
        return b""
    return generate_latest(registry if tenant_series else _WithoutTenants(registry))


def mark_worker_dead(pid: int, path: str) -> None:
    """Drop a dead worker's live gauges (its counters and histograms stay in the totals)."""
    from prometheus_client.multiprocess import mark_process_dead

    mark_process_dead(pid, path)



class WorkerMetrics:
    """All metric families of one worker, with children bound to this deployment's labels.

    One instance per worker process (`ServerState.metrics`). Families live in a private
    registry so tests can build several in one process; in multiprocess mode the values go to
    the shared files regardless, and `render()` merges those. It is an engine client's observer
    (`vllm_pyfrontend.engine.observer.EngineObserver`: scheduler stats, iterations, migrations),
    directly or through a `MetricsRelay`.
    """

    def __init__(self, model_name: str, engine_indices: list[int], max_model_len: int):
        self.model_name = model_name
        self.registry = registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        engines = [str(i) for i in engine_indices] or ["0"]
        self._engines = engines
        tokens_buckets = build_1_2_5_buckets(max(1, max_model_len))

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=registry)

        def histogram(name: str, doc: str, buckets) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=registry)

        def gauge(name: str, doc: str, mode: str, labelnames=labels) -> Gauge:
            return Gauge(name, doc, labelnames, multiprocess_mode=mode, registry=registry)

        # -- request families (frontend-computed) ------------------------------------------
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.request_success = Counter(
            "vllm:request_success", "Count of successfully processed requests.",
            labels + ["finished_reason"], registry=registry,
        )
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens_buckets)
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens_buckets)
        self.request_params_n = histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", REQUEST_PARAMS_N_BUCKETS)
        self.request_params_max_tokens = histogram(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens_buckets)
        self.time_to_first_token = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            TIME_TO_FIRST_TOKEN_BUCKETS)
        self.inter_token_latency = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            INTER_TOKEN_LATENCY_BUCKETS)
        self.e2e_latency = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS)
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS)
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY_BUCKETS)
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS)
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS)
        self.time_per_output_token = histogram(
            "vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.",
            INTER_TOKEN_LATENCY_BUCKETS)
        self.request_num_preemptions = histogram(
            "vllm:request_num_preemptions", "Histogram of the number of times a request was preempted.",
            REQUEST_NUM_PREEMPTIONS_BUCKETS)
        self.num_preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION_TOKENS_BUCKETS)
        # -- engine scheduler stats ----------------------------------------------------------
        self.num_requests_running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", "mostrecent")
        self.num_requests_waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", "mostrecent")
        self.num_requests_waiting_by_reason = gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
            "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, "
            "blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            "mostrecent", labels + ["reason"])
        self.kv_cache_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "mostrecent")
        self.prefix_cache_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_cache_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        # -- frontend admission (serving/admission.py) -----------------------------------------
        self.admission_rejections = Counter(
            "vllm:admission_rejections", "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"], registry=registry,
        )
        # -- requests moved off an engine that went down (engine/migration.py) ----------------
        self.request_migrations = Counter(
            "vllm:request_migrations", "Number of requests moved to another engine after theirs went down, by reason.",
            ["model_name", "reason"], registry=registry,
        )
        self.request_migration_failures = Counter(
            "vllm:request_migration_failures",
            "Number of requests of an engine that went down that failed instead of moving, by reason.",
            ["model_name", "reason"], registry=registry,
        )
        # -- prefill/decode disaggregation (engine/disaggregation.py) ---------------------------
        self.disagg_prefill_phase = histogram(
            "vllm:disagg_prefill_phase_seconds",
            "Time from sending a request's prefill phase to a prefill engine until its KV is ready "
            "there (queue and prefill), by prefill engine.", TIME_TO_FIRST_TOKEN_BUCKETS)
        self.disagg_decode_first_token = histogram(
            "vllm:disagg_decode_first_token_seconds",
            "Time from sending a prefilled request to a decode engine until its first token "
            "(KV transfer and first step), by decode engine.", TIME_TO_FIRST_TOKEN_BUCKETS)
        self.disagg_requests = Counter(
            "vllm:disagg_requests",
            "Requests of a disaggregated deployment by path: two_phase (prefill engine, then decode "
            "engine), short (whole on a decode engine), fallback (whole on a decode engine after no "
            "prefill engine could compute it), recomputed (whole again after its decode engine could "
            "not load the KV).", ["model_name", "path"], registry=registry)
        self._engine_role_info: Gauge | None = None
        # -- HTTP and worker pool --------------------------------------------------------------
        self.http_requests = Counter(
            "http_requests_total", "Total number of requests by method, status and handler.",
            ["method", "status", "handler"], registry=registry,
        )
        self.http_duration = Histogram(
            "http_request_duration_seconds", "Latency with only few buckets by handler.",
            ["method", "handler"], buckets=HTTP_LATENCY_BUCKETS, registry=registry,
        )
        self.in_flight = gauge(
            "vllm_frontend_requests_in_flight", "Requests being served, summed over live workers.",
            "livesum", labelnames=[])
        self.draining = gauge(
            "vllm_frontend_workers_draining", "Workers draining for shutdown (live workers).",
            "livesum", labelnames=[])
        self.serving = gauge(
            "vllm_frontend_workers_serving", "Workers accepting requests (live workers).",
            "livesum", labelnames=[])

        # Children bound per engine: the hot path does no label lookups.
        self._per_engine: dict[str, _EngineChildren] = {e: _EngineChildren(self, e) for e in engines}
        self._http_children: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        # `vllm:iteration_tokens_total` per engine index (an int: read once per engine message).
        self._iteration: dict[int, _StepHistogram] = {}
        self._cache_config_info: Gauge | None = None

    # -- requests -------------------------------------------------------------------------------
    def start_request(self, engine: int | str = 0, arrival: float | None = None) -> "RequestMetrics":
        """A per-request recorder; `arrival` is a `time.monotonic()` value (default: now)."""
        children = self._per_engine.get(str(engine))
        if children is None:
            children = self._per_engine[str(engine)] = _EngineChildren(self, str(engine))
        return RequestMetrics(children, time.monotonic() if arrival is None else arrival)

    # -- engine scheduler stats -----------------------------------------------------------------
    def record_scheduler_stats(self, engine: int, stats: dict[str, Any], engine_time: float | None = None) -> None:
        """One `SchedulerStats` sample, as this worker received it (call on receipt).

        The gauges are "mostrecent" across workers: the sample with the latest timestamp wins.
        `engine_time` (the engine's clock on the step that sent the sample) is that timestamp
        when known: the engine sends each step's stats to one worker, and a worker reading an
        older step a few ms late must not win over the newer one (an idle engine sends nothing
        more, so the stale busy value would stay). Without it, the receipt time."""
        c = self._per_engine.get(str(engine))
        if c is None:
            c = self._per_engine[str(engine)] = _EngineChildren(self, str(engine))
        running = stats.get("num_running_reqs") or 0
        capacity = stats.get("num_waiting_reqs") or 0
        deferred = stats.get("num_skipped_waiting_reqs") or 0
        usage = stats.get("kv_cache_usage") or 0.0
        values = ((c.running, running), (c.waiting, capacity + deferred), (c.kv_cache_usage, usage),
                  (c.waiting_capacity, capacity), (c.waiting_deferred, deferred))
        if engine_time:
            # prometheus_client's Gauge.set stamps time.time(); its value store takes a timestamp.
            for gauge, v in values:
                gauge._value.set(float(v), timestamp=engine_time)
        else:
            for gauge, v in values:
                gauge.set(v)
        prefix = stats.get("prefix_cache_stats")
        if isinstance(prefix, dict):
            queries, hits = prefix.get("queries") or 0, prefix.get("hits") or 0
            if queries:
                c.prefix_queries.inc(queries)
            if hits:
                c.prefix_hits.inc(hits)

    def observe_iteration(self, engine: int, tokens: int) -> None:
        """One engine output message received (one step's outputs for this worker): its tokens,
        as vLLM's `vllm:iteration_tokens_total` counts them (engine/delivery.py). Once per
        message, kept in the worker until the next flush (`_StepHistogram`)."""
        h = self._iteration.get(engine)
        if h is None:
            h = self._iteration[engine] = _StepHistogram(self.iteration_tokens.labels(self.model_name, str(engine)))
        h.counts[bisect_left(h.bounds, tokens)] += 1
        h.sum += tokens
        if not h.queued:
            h.queued = True
            INCREMENTS.later(h)

    def record_cache_config(self, engine_infos: list[Any]) -> None:
        """`vllm:cache_config_info` (a gauge at 1, the configuration in its labels, as vLLM
        emulates an info metric) from each engine's ready response (`EngineInfo.raw`)."""
        for info in engine_infos:
            raw = getattr(info, "raw", None) or {}
            labels = {k: str(raw.get(k)) for k in CACHE_CONFIG_FIELDS}
            labels["engine"] = str(info.engine_index)
            if self._cache_config_info is None:
                self._cache_config_info = Gauge(
                    "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", list(labels),
                    multiprocess_mode="mostrecent", registry=self.registry)
            self._cache_config_info.labels(**labels).set(1)

    def record_admission_rejection(self, reason: str) -> None:
        self.admission_rejections.labels(self.model_name, reason).inc()

    def count_migration(self, reason: str) -> None:
        """A request moved to another engine (`vllm:request_migrations_total{reason}`)."""
        self.request_migrations.labels(self.model_name, reason).inc()

    def count_migration_failure(self, reason: str) -> None:
        """A request failed instead of moving (`vllm:request_migration_failures_total{reason}`)."""
        self.request_migration_failures.labels(self.model_name, reason).inc()

    def record_engine_roles(self, roles: dict[int, str]) -> None:
        """`vllm:engine_role_info{engine, role}` at 1: each engine's role in a disaggregated
        deployment (prefill or decode)."""
        if self._engine_role_info is None:
            self._engine_role_info = Gauge(
                "vllm:engine_role_info", "The role of each engine in a disaggregated deployment.",
                ["model_name", "engine", "role"], multiprocess_mode="mostrecent", registry=self.registry)
        for engine, role in roles.items():
            self._engine_role_info.labels(self.model_name, str(engine), role).set(1)

    def observe_disaggregation(self, path: str) -> None:
        self.disagg_requests.labels(self.model_name, path).inc()

    def observe_prefill_phase(self, engine: int | None, seconds: float) -> None:
        self.disagg_prefill_phase.labels(self.model_name, str(engine)).observe(seconds)

    def observe_decode_first_token(self, engine: int | None, seconds: float) -> None:
        self.disagg_decode_first_token.labels(self.model_name, str(engine)).observe(seconds)

    def tenant_recorder(self) -> "TenantMetrics":
        """The per-tenant families (named keys of --api-keys-file only), made on first use."""
        rec = getattr(self, "_tenant_metrics", None)
        if rec is None:
            rec = self._tenant_metrics = TenantMetrics(self.registry)
        return rec

    # -- HTTP -----------------------------------------------------------------------------------
    def observe_http(self, method: str, handler: str, status: int, duration_s: float) -> None:
        key = (method, handler, f"{status // 100}xx")
        pair = self._http_children.get(key)
        if pair is None:
            pair = self._http_children[key] = (
                self.http_requests.labels(method, key[2], handler),
                _HistogramChild(self.http_duration.labels(method, handler)),
            )
        INCREMENTS.add(pair[0], 1)  # (gathered: see _Increments)
        pair[1].observe(duration_s)
        INCREMENTS.done()

    # -- worker lifecycle -----------------------------------------------------------------------
    def set_serving(self, serving: bool) -> None:
        self.serving.set(1 if serving else 0)

    def set_draining(self, draining: bool) -> None:
        self.draining.set(1 if draining else 0)
        if draining:
            self.serving.set(0)

    def render(self, tenant_series: bool = True) -> bytes:
        """The exposition text (this worker's gathered increments must be flushed first, on
        the event loop's thread: `flush`); the per-tenant families only with `tenant_series`."""
        return render_latest(self.registry, tenant_series)

    @staticmethod
    def flush() -> None:
        """Write the gathered increments of finished requests now (`_Increments`)."""
        INCREMENTS.flush()


class TenantMetrics:
    """Per-tenant counters of the keys file's named keys (frontend/tenants), labelled by the
    tenant's name only: the keys file bounds the series. Anonymous keys have none. Written
    like the request families (gathered per event-loop pass, `_Increments`)."""

    def __init__(self, registry: CollectorRegistry):
        self.requests = Counter("vllm_frontend_tenant_requests", "Requests admitted, by tenant (named API key).",
                                ["tenant"], registry=registry)
        self.prompt_tokens = Counter("vllm_frontend_tenant_prompt_tokens", "Prompt tokens sent to the engine, "
                                     "by tenant.", ["tenant"], registry=registry)
        self.completion_tokens = Counter("vllm_frontend_tenant_completion_tokens", "Completion tokens generated, "
                                         "by tenant.", ["tenant"], registry=registry)
        self.rejections = Counter("vllm_frontend_tenant_rejections", "Requests refused by a tenant's limit, by "
                                  "tenant and limit (requests_per_second, tokens_per_minute, max_concurrency: "
                                  "429; max_tokens: 400).", ["tenant", "reason"], registry=registry)
        self.quota_store_errors = Counter("vllm_frontend_quota_store_errors", "Syncs of tenants' counts with the "
                                          "shared quota store (--quota-store) that failed; meanwhile limits hold "
                                          "per replica (or limited tenants get 503 with --quota-store-failure "
                                          "closed).", registry=registry)
        self._children: dict[str, tuple[Any, Any, Any]] = {}

    def quota_store_error(self) -> None:
        INCREMENTS.add(self.quota_store_errors, 1)
        INCREMENTS.done()

    def _of(self, name: str) -> tuple[Any, Any, Any]:
        c = self._children.get(name)
        if c is None:
            c = self._children[name] = (self.requests.labels(name), self.prompt_tokens.labels(name),
                                        self.completion_tokens.labels(name))
        return c

    def tenant_admitted(self, name: str) -> None:
        INCREMENTS.add(self._of(name)[0], 1)
        INCREMENTS.done()

    def tenant_tokens(self, name: str, prompt: int, completion: int) -> None:
        c = self._of(name)
        if prompt:
            INCREMENTS.add(c[1], prompt)
        if completion:
            INCREMENTS.add(c[2], completion)
        INCREMENTS.done()

    def tenant_rejected(self, name: str, reason: str) -> None:
        INCREMENTS.add(self.rejections.labels(name, reason), 1)
        INCREMENTS.done()


class _EngineChildren:
    """The label-bound children for one engine index."""

    __slots__ = (
        "prompt_tokens", "generation_tokens", "success", "prompt_hist", "generation_hist",
        "n_hist", "max_tokens_hist", "ttft", "itl", "e2e", "queue_time", "_m",
        "_labels", "running", "waiting", "kv_cache_usage", "prefix_queries", "prefix_hits",
        "waiting_capacity", "waiting_deferred", "preemptions", "phases",
    )

    def __init__(self, m: WorkerMetrics, engine: str):
        lv = (m.model_name, engine)
        self._labels = lv
        self.prompt_tokens = m.prompt_tokens.labels(*lv)
        self.generation_tokens = m.generation_tokens.labels(*lv)
        # Every finish reason exists from the start (at 0), as in vLLM.
        self.success = {r: m.request_success.labels(*lv, r) for r in FINISH_REASONS}
        # Observed once per request each (`RequestMetrics.on_finished`): straight to the values.
        self.prompt_hist = _HistogramChild(m.request_prompt_tokens.labels(*lv))
        self.generation_hist = _HistogramChild(m.request_generation_tokens.labels(*lv))
        self.n_hist = _HistogramChild(m.request_params_n.labels(*lv))
        self.max_tokens_hist = _HistogramChild(m.request_params_max_tokens.labels(*lv))
        self.ttft = _HistogramChild(m.time_to_first_token.labels(*lv))
        self.itl = _HistogramChild(m.inter_token_latency.labels(*lv))
        self.e2e = _HistogramChild(m.e2e_latency.labels(*lv))
        # Bound on first use: no queue-time or phase series until the engine's events are known.
        self.queue_time = None
        self.phases: tuple[_HistogramChild, ...] | None = None
        self._m = m
        self.preemptions = m.num_preemptions.labels(*lv)
        self.running = m.num_requests_running.labels(*lv)
        self.waiting = m.num_requests_waiting.labels(*lv)
        self.waiting_capacity = m.num_requests_waiting_by_reason.labels(*lv, "capacity")
        self.waiting_deferred = m.num_requests_waiting_by_reason.labels(*lv, "deferred")
        self.kv_cache_usage = m.kv_cache_usage.labels(*lv)
        self.prefix_queries = m.prefix_cache_queries.labels(*lv)
        self.prefix_hits = m.prefix_cache_hits.labels(*lv)

    def observe_queue_time(self, seconds: float) -> None:
        if self.queue_time is None:
            self.queue_time = _HistogramChild(self._m.queue_time.labels(*self._labels))
        self.queue_time.observe(seconds)

    def phase_children(self) -> tuple[_HistogramChild, ...]:
        """(prefill, decode, inference, time per output token, preemptions), bound on first use."""
        if self.phases is None:
            m, lv = self._m, self._labels
            self.phases = tuple(_HistogramChild(h.labels(*lv)) for h in (
                m.prefill_time, m.decode_time, m.inference_time, m.time_per_output_token,
                m.request_num_preemptions))
        return self.phases


class MetricsRelay:
    """The engine client's observer (`vllm_pyfrontend.engine.observer.EngineObserver`) for a
    worker that builds its `WorkerMetrics` after its engine client (`ServerState` owns them,
    and is built from the started client): it forwards each report to `metrics` once that is
    set, and drops the reports before (the engine's first stats samples, while the worker
    starts)."""

    __slots__ = ("metrics",)

    def __init__(self, metrics: WorkerMetrics | None = None):
        self.metrics = metrics

    def record_scheduler_stats(self, engine: int, stats: dict[str, Any], engine_time: float | None = None) -> None:
        if self.metrics is not None:
            self.metrics.record_scheduler_stats(engine, stats, engine_time)

    def observe_iteration(self, engine: int, tokens: int) -> None:
        if self.metrics is not None:
            self.metrics.observe_iteration(engine, tokens)

    def count_migration(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.count_migration(reason)

    def count_migration_failure(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.count_migration_failure(reason)

    def observe_disaggregation(self, path: str) -> None:
        if self.metrics is not None:
            self.metrics.observe_disaggregation(path)

    def observe_prefill_phase(self, engine: int | None, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_prefill_phase(engine, seconds)

    def observe_decode_first_token(self, engine: int | None, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_decode_first_token(engine, seconds)
