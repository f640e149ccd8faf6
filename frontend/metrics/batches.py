"""The Batch API's Prometheus families (recorded by every worker's batch runner).

- `vllm_frontend_batches{status}`: batches in the store by status. Each worker reads the counts
  from the shared store on its runner's poll and writes them with the read time as the sample's
  timestamp (`mostrecent`), so the merge reports the freshest read, whichever worker made it.
- `vllm_frontend_batches_ended_total{status}`: batches that reached a final status
  (`completed`, `failed`, `expired`, `cancelled`), counted once, by the worker that ended them.
- `vllm_frontend_batch_lines_total{result}`: lines answered (`completed`: a 2xx answer in the
  output file; `failed`: the error file), counted once, by the worker whose answer was recorded.
- `vllm_frontend_batch_lines_running`: lines running now, summed over live workers.

Batch lines run through the online handlers, so they are also in the request families
(`vllm:e2e_request_latency_seconds`, ...); the interactive latency beside a batch is measured
by `bench/batch_interactive.py`.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge

STATUSES = ("validating", "in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled")


class BatchMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.by_status = Gauge("vllm_frontend_batches", "Batches in the store, by status.", ["status"],
                               multiprocess_mode="mostrecent", registry=registry)
        self.ended = Counter("vllm_frontend_batches_ended", "Batches that reached a final status.",
                             ["status"], registry=registry)
        self.lines = Counter("vllm_frontend_batch_lines", "Batch lines answered, by result.", ["result"],
                             registry=registry)
        self.running = Gauge("vllm_frontend_batch_lines_running", "Batch lines running, summed over live workers.",
                             multiprocess_mode="livesum", registry=registry)
        self._done = self.lines.labels("completed")
        self._failed = self.lines.labels("failed")

    def line_done(self, failed: bool) -> None:
        (self._failed if failed else self._done).inc()

    def batch_ended(self, status: str) -> None:
        self.ended.labels(status).inc()

    def batches_by_status(self, counts: dict[str, int]) -> None:
        now = time.time()
        for status in STATUSES:
            self.by_status.labels(status)._value.set(float(counts.get(status, 0)), timestamp=now)

    def lines_running(self, n: int) -> None:
        self.running.set(n)
