"""What the OpenAI generation routes (chat and text completions) share.

The routes turn their request struct into `llm` typed inputs (`options_from`: OpenAI's field
names to `SamplingOptions`), lower them with `frontend/llm`, submit the engine requests of
every choice (`submit_choices`) and answer from the one `RequestRun` pipeline, as SSE or JSON
(`respond`). Lowering itself (sampling, structured outputs, prompts, n) lives in `llm`, so
other API styles reuse it without importing this module.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend.engine.types import EngineDeadError
from vllm_pyfrontend.llm.sampling import SamplingOptions
from vllm_pyfrontend.llm.submission import Submission
from vllm_pyfrontend.server.errors import APIError
from vllm_pyfrontend.server.request_pipeline import Choice, RequestRun
from vllm_pyfrontend.server.sse import SSEWriter
from vllm_pyfrontend.text.text_stream import TextStream

_json = msgspec.json.encode


def options_from(req: Any, max_tokens: int | None) -> SamplingOptions:
    """Sampling options from a chat or completion request struct (same field names)."""
    stop = req.stop
    if isinstance(stop, str):
        stop = [stop]
    logit_bias = None
    if req.logit_bias:
        try:
            logit_bias = {int(k): v for k, v in req.logit_bias.items()}
        except ValueError:
            raise APIError(400, "`logit_bias` keys must be token ids.", "logit_bias") from None
    extra = dict(req.vllm_xargs) if req.vllm_xargs else {}
    if req.kv_transfer_params:
        extra["kv_transfer_params"] = req.kv_transfer_params
    return SamplingOptions(
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        min_p=req.min_p,
        seed=req.seed,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        repetition_penalty=req.repetition_penalty,
        min_tokens=req.min_tokens,
        stop=[s for s in (stop or []) if s],
        stop_token_ids=list(req.stop_token_ids or []),
        ignore_eos=req.ignore_eos,
        include_stop_str_in_output=req.include_stop_str_in_output,
        skip_special_tokens=req.skip_special_tokens,
        spaces_between_special_tokens=req.spaces_between_special_tokens,
        logit_bias=logit_bias,
        allowed_token_ids=req.allowed_token_ids,
        extra_args=extra or None,
    )


def stream_flags(req: Any) -> tuple[bool, bool, bool]:
    stream = bool(req.stream)
    so = req.stream_options
    if so is not None and not stream and (so.include_usage or so.continuous_usage_stats):
        raise APIError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
    return stream, bool(so and so.include_usage), bool(so and so.continuous_usage_stats)


def new_choice(state, index: int, prompt_ids: list[int], opts: SamplingOptions, assistant) -> Choice:
    return Choice(
        index,
        TextStream(
            state.tokenizer.new_detokenizer(
                prompt_ids,
                skip_special_tokens=opts.skip_special_tokens,
                spaces_between_special_tokens=opts.spaces_between_special_tokens,
            ),
            opts.stop,
            include_stop_str_in_output=opts.include_stop_str_in_output,
            min_tokens=opts.min_tokens,
        ),
        assistant,
    )


def new_sse(state, run_id: str, model: str, created: int, object_name: str) -> SSEWriter:
    sse = SSEWriter(run_id, model, created, object_name)
    sse.set_fingerprint(state.system_fingerprint)
    return sse


def submit_choices(
    state, request: web.Request, run: RequestRun, items: list[tuple[Choice, list[int], dict[str, Any]]], *,
    priority: int, cache_salt: str | None,
) -> Submission:
    """One engine request per (choice, prompt ids, sampling map), all sent or none."""
    sub = Submission(state.engine, state.worker_index, run, run.response_id.split("-", 1)[0])
    arrival = time.monotonic()
    trace = request.get("trace_headers")
    for choice, prompt_ids, sampling in items:
        choice.gen = sub.add(choice.index, prompt_ids, sampling, external_id=run.response_id, priority=priority,
                             cache_salt=cache_salt, trace_headers=trace)
        choice.metrics = state.metrics.start_request(arrival=arrival)
    try:
        sub.submit()
    except EngineDeadError as e:
        raise APIError(503, f"The engine is not available: {e}") from None
    return sub


async def respond(state, request: web.Request, run: RequestRun, sub: Submission, *,
                  role_chunks: bool) -> web.StreamResponse:
    """Wait for the run's end and answer: SSE as it goes (streaming) or one JSON body."""
    run.system_fingerprint = state.system_fingerprint
    state.request_started()
    try:
        if run.stream:
            resp = web.StreamResponse(
                status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            resp.enable_chunked_encoding()
            try:
                await resp.prepare(request)
            except ConnectionError:  # the client left before the headers went out
                run.cancel()
                return resp
            sse = run.sse
            assert sse is not None
            first = b"".join(sse.role_chunk(c.index) for c in run.choices) if role_chunks else b""
            if run.echo_text:
                first += b"".join(sse.content_chunk_bytes(c.index, run.echo_text) for c in run.choices)
            sse.attach(request.transport, first_chunk=first)
            if not sse.alive:
                run.cancel()
            interval = state.config.policy.sse_keep_alive_interval
            if interval > 0:
                sse.keep_alive(interval)
            try:
                await run.done
            finally:
                sse.stop_keep_alive()
            if sse.alive:
                await resp.write_eof(sse.last_frame())
            return resp
        await run.done
        if run.error is not None:
            raise run.error
        return web.Response(body=_json(run.formatter.body(run, run.system_fingerprint)),
                            content_type="application/json")
    except asyncio.CancelledError:
        # aiohttp cancels the handler when the client disconnects: abort in the engine.
        run.cancel()
        raise
    finally:
        if not run.done.done():
            run.cancel()
        state.request_finished()
        _record_metrics(run, sub)


def _record_metrics(run: RequestRun, sub: Submission) -> None:
    """Per engine request, at its end (frontend/metrics: nothing is observed per token)."""
    for i, (req, gen) in enumerate(sub.requests):
        m = run.choices[gen.index].metrics
        if m is None:
            continue
        reason = "error" if run.error is not None else (gen.finish_reason or "abort")
        m.on_finished(reason, gen.num_prompt_tokens, gen.num_output_tokens,
                      max_tokens=req.sampling_params.get("max_tokens"),
                      n=len(sub.requests) if i == 0 else None)
