"""What an engine client reports as it happens, to whoever watches it (the worker's metrics).

An `EngineObserver` is given to `EngineClient(observer=...)` when it is built; the client calls
it on the event loop, from its parts:

- `record_scheduler_stats(engine, stats, engine_time)`: each `SchedulerStats` sample as the
  output reader decodes it (the engine sends each step's stats to one client), with the
  engine's own timestamp of the message that carried it (`EngineCoreOutputs.timestamp`);
- `observe_iteration(engine, tokens)`: once per engine output message with outputs, its new
  token ids plus the prompt tokens computed (vLLM's `vllm:iteration_tokens_total`, see
  engine/delivery.py);
- `count_migration(reason)`: a request moved off an engine that went down (engine/migration.py);
- `count_migration_failure(reason)`: a request of such an engine that failed instead of moving;
- with prefill/decode disaggregation (engine/disaggregation.py), when the observer has them:
  `observe_disaggregation(path)`, `observe_prefill_phase(engine, seconds)` and
  `observe_decode_first_token(engine, seconds)`.

`vllm_pyfrontend.metrics.WorkerMetrics` implements it (the names are its own), and so does
`metrics.MetricsRelay`, which forwards to the `WorkerMetrics` a worker builds after its engine
client. An exception from the first two is logged and dropped: metrics never stop the output
path.
"""

from __future__ import annotations

from typing import Any, Protocol


class EngineObserver(Protocol):
    def record_scheduler_stats(self, engine: int, stats: dict[str, Any], engine_time: float | None = None) -> None: ...

    def observe_iteration(self, engine: int, tokens: int) -> None: ...

    def count_migration(self, reason: str) -> None: ...

    def count_migration_failure(self, reason: str) -> None: ...
