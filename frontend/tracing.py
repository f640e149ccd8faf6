"""Request tracing (`--otlp-traces-endpoint`), as vLLM's API server does it.

One span per request, named and attributed as vLLM 0.32's `OutputProcessor.do_tracing`
(`vllm/v1/engine/output_processor.py`, attribute names from `vllm/tracing/utils.py`
`SpanAttributes`): span "llm_request", kind SERVER, starting at the request's arrival, a child
of the client's W3C `traceparent` (the same trace headers still go to the engine in
`EngineRequest.trace_headers`). Exported by OpenTelemetry's OTLP exporter through a batch
processor (off the event loop): gRPC by default, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=
http/protobuf` for HTTP, as vLLM's `get_span_exporter`.

This module is imported only when the flag is given (`frontend/server/worker.py`): without it
nothing of OpenTelemetry is loaded and the request path only tests `state.tracer is None`.
The OpenTelemetry packages are the `tracing` extra (`pip install vllm-pyfrontend[tracing]`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from vllm_pyfrontend import environment

SPAN_NAME = "llm_request"

# vLLM's SpanAttributes (vllm/tracing/utils.py), the names a trace backend already knows.
COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
MAX_TOKENS = "gen_ai.request.max_tokens"
TOP_P = "gen_ai.request.top_p"
TEMPERATURE = "gen_ai.request.temperature"
RESPONSE_MODEL = "gen_ai.response.model"
REQUEST_ID = "gen_ai.request.id"
N = "gen_ai.request.n"
NUM_SEQUENCES = "gen_ai.usage.num_sequences"
TIME_IN_QUEUE = "gen_ai.latency.time_in_queue"
TIME_TO_FIRST_TOKEN = "gen_ai.latency.time_to_first_token"
E2E = "gen_ai.latency.e2e"


def _exporter(endpoint: str):
    protocol = environment.otlp_traces_protocol()
    if protocol == "grpc":
        return GrpcExporter(endpoint=endpoint, insecure=True)
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint)
    raise ValueError(f"Unsupported OTLP protocol '{protocol}' is configured")


class RequestTracer:
    """This worker's tracer: `record` one finished request."""

    def __init__(self, endpoint: str, worker_index: int = 0):
        resource = Resource.create({
            "vllm.instrumenting_module_name": "vllm.llm_engine",  # vLLM's API server's name
            "vllm.process_id": str(os.getpid()),
            "vllm.process_kind": "api_server",
            "vllm.process_name": f"worker-{worker_index}",
        })
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(BatchSpanProcessor(_exporter(endpoint)))
        self._tracer = self._provider.get_tracer("vllm.llm_engine")
        self._propagator = TraceContextTextMapPropagator()

    def record(self, *, trace_headers: Mapping[str, str] | None, start_ns: int, end_ns: int,
               attributes: dict[str, Any], events: list[tuple[str, int, dict[str, Any]]] | None = None) -> None:
        """One finished request's span; `events`: (name, time in ns, attributes) on it, e.g. each
        move of the request to another engine ("request.migrated")."""
        context = self._propagator.extract(trace_headers) if trace_headers else None
        span = self._tracer.start_span(SPAN_NAME, context=context, kind=SpanKind.SERVER,
                                       start_time=start_ns, attributes=attributes)
        for name, at_ns, event_attributes in events or ():
            span.add_event(name, attributes=event_attributes, timestamp=at_ns)
        span.end(end_time=end_ns)

    def shutdown(self) -> None:
        """Flush what is batched (the worker's exit)."""
        self._provider.shutdown()


def request_attributes(*, request_id: str, model: str, prompt_tokens: int, completion_tokens: int, n: int,
                       ttft_s: float | None, e2e_s: float, queue_s: float | None,
                       sampling: Mapping[str, Any]) -> dict[str, Any]:
    """vLLM's attributes for one request (optional request parameters only when set, as vLLM)."""
    attrs: dict[str, Any] = {
        REQUEST_ID: request_id,
        RESPONSE_MODEL: model,
        PROMPT_TOKENS: prompt_tokens,
        COMPLETION_TOKENS: completion_tokens,
        NUM_SEQUENCES: n,
        E2E: e2e_s,
    }
    if ttft_s is not None:
        attrs[TIME_TO_FIRST_TOKEN] = ttft_s
    if queue_s is not None:
        attrs[TIME_IN_QUEUE] = queue_s
    if sampling.get("top_p"):
        attrs[TOP_P] = sampling["top_p"]
    if sampling.get("max_tokens"):
        attrs[MAX_TOKENS] = sampling["max_tokens"]
    if sampling.get("temperature"):
        attrs[TEMPERATURE] = sampling["temperature"]
    if n:
        attrs[N] = n
    return attrs
