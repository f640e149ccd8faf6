"""vLLM's per-request timing metrics (`--enable-per-request-metrics`): the `metrics` object of
chat, completion and Responses answers (a Response has the key only with the flag).

vLLM 0.32 builds it from the request's `RequestStateStats` (`build_per_request_timing_metrics`):
four timestamps on the engine's clock, the QUEUED and first SCHEDULED events and the engine
steps of the first and last outputs, which `llm.Generation` keeps in its `timing`
(`metrics.EngineTiming`: the queue time, the SCHEDULED event, the first and last output steps),
and the response's completion tokens. The fields, in milliseconds:

- `time_to_first_token_ms`: first output - scheduled (prefill; the queue is not in it),
- `generation_time_ms`: last output - first output (decode),
- `queue_time_ms`: scheduled - queued,
- `mean_itl_ms`: decode time / (tokens - 1), with more than one token,
- `tokens_per_second`: tokens / (last output - scheduled).

A field whose timestamps are unknown is null. The object describes one generation stream, so
vLLM gives it only to a request of one choice (one prompt, `n` 1): `metrics` is null
otherwise. A body lists every field (null ones too); the usage chunk of a stream, the only chunk
that carries it, lists the known ones. `speculative_decoding` (a draft model's acceptance
stats, which vLLM adds whenever the engine reports them) is not read from the engine's outputs
here: it is null.

The chat and completion formatters write it when made with `per_request_metrics` (the flag,
per request); off, they write `"metrics": null`.
"""

from __future__ import annotations

from typing import Any

from vllm_pyfrontend.llm.generation import Generation


def timing_metrics(gen: Generation | None, num_generation_tokens: int) -> dict[str, Any]:
    """vLLM's `PerRequestMetrics` of one generation, every field (None: unknown)."""
    t = gen.timing if gen is not None else None
    if t is None:
        queue_s, scheduled, first, last = None, 0.0, 0.0, 0.0
    else:
        queue_s, scheduled = t.queue_time, t.scheduled_at or 0.0
        first, last = t.first_token_at or 0.0, t.last_token_at or 0.0
    ttft = generation = queue = itl = tps = None
    if scheduled > 0 and first > 0:
        ttft = (first - scheduled) * 1000
    if first > 0 and last > 0:
        generation = (last - first) * 1000
        if num_generation_tokens > 1:
            itl = (last - first) / (num_generation_tokens - 1) * 1000
    if queue_s is not None and scheduled > 0:  # (the engine's SCHEDULED - QUEUED)
        queue = queue_s * 1000
    if scheduled > 0 and last > 0:
        inference_ms = (last - scheduled) * 1000
        if inference_ms > 0:
            tps = num_generation_tokens / inference_ms * 1000
    return {
        "time_to_first_token_ms": ttft,
        "generation_time_ms": generation,
        "queue_time_ms": queue,
        "mean_itl_ms": itl,
        "tokens_per_second": tps,
        "speculative_decoding": None,
    }


def body_metrics(choices: list, completion_tokens: int) -> dict[str, Any] | None:
    """A response body's `metrics`: None when the request has several choices, or when its one
    choice is no engine generation (beam search)."""
    if len(choices) != 1 or choices[0].gen is None:
        return None
    return timing_metrics(choices[0].gen, completion_tokens)


def stream_metrics(choices: list, completion_tokens: int) -> dict[str, Any] | None:
    """The usage chunk's `metrics` (vLLM writes it without its null fields), or None."""
    metrics = body_metrics(choices, completion_tokens)
    if metrics is None:
        return None
    return {k: v for k, v in metrics.items() if v is not None}
