"""Submitting a request's engine requests and answering from its `RequestRun`, for every
generation API style (OpenAI chat and text completions, Anthropic Messages).

A route builds its `RequestRun` (choices, formatter, SSE writer), lowers its sampling through
`frontend/llm` and calls `submit_choices`, then `respond`: SSE as the run goes (streaming) or one
JSON body from `run.formatter.body`. Error events mid-stream are framed by the run
(`RequestRun.error_frame`), the end of the stream by the SSE writer (`SSEWriter.last_frame`), so
the same code serves every style's wire format.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend.engine.types import EngineDeadError
from vllm_pyfrontend.llm.sampling import SamplingOptions
from vllm_pyfrontend.llm.submission import Submission
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.request_pipeline import Choice, RequestRun
from vllm_pyfrontend.serving.sse import SSEWriter, StreamDrain
from vllm_pyfrontend.tenants.key_table import LEASE
from vllm_pyfrontend.text.text_stream import TextStream

_json = msgspec.json.encode
log = logging.getLogger(__name__)

# A stream's headers wait this long at most for its first engine output (RequestRun.first_output).
FIRST_OUTPUT_WAIT_S = 1.0


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


def data_parallel_rank(request: web.Request) -> int | None:
    """The engine a router picked for this request (vLLM's `X-data-parallel-rank` header), or
    None for least-loaded routing. As in vLLM, a value that is not an integer is ignored and one
    outside the deployment's ranks is a 400."""
    raw = request.headers.get("X-data-parallel-rank")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def submit_choices(
    state, request: web.Request, run: RequestRun, items: list[tuple[Choice, list[int], dict[str, Any]]], *,
    priority: int, cache_salt: str | None, lora_request: list[Any] | None = None, multimodal: Any = None,
    requested_max_tokens: int | None = None,
) -> Submission:
    """One engine request per (choice, prompt ids, sampling map), all sent or none.
    `requested_max_tokens`: the client's own `max_tokens` (None: not given), for a named key's
    limit (tenants/quotas.py: more than the limit asked is a 400, an unset one is capped)."""
    admission = state.admission
    if admission is not None:
        admission.admit(len(items))
    lease = request.get(LEASE)
    prompt_tokens = 0
    if lease is not None:  # a named key: its max_tokens and tokens-per-minute limits
        prompt_tokens = sum({id(p): len(p) for _, p, _ in items}.values())
        lease.check_submit([s for _, _, s in items], requested_max_tokens, prompt_tokens)
    prefix = run.response_id.split("-", 1)[0]
    if len(prefix) > 32 or not (prefix.isascii() and prefix.replace("_", "").isalnum()):
        prefix = "req"  # a client's request id (Responses): not into the engine's ids and logs
    sub = Submission(state.engine, state.worker_index, run, prefix)
    arrival = time.monotonic()
    trace = request.get("trace_headers")
    rank = data_parallel_rank(request)
    _join_drain(run, state.drain)
    for choice, prompt_ids, sampling in items:
        choice.gen = sub.add(choice.index, prompt_ids, sampling, external_id=run.response_id, priority=priority,
                             cache_salt=cache_salt, trace_headers=trace, lora_request=lora_request,
                             multimodal=multimodal, data_parallel_rank=rank, consumer=run.step(choice))
        choice.metrics = state.metrics.start_request(arrival=arrival)
    try:
        sub.submit()
    except EngineDeadError as e:
        raise APIError(503, f"The engine is not available: {e}") from None
    if admission is not None:
        for _, gen in sub.requests:
            if not gen.finished:
                admission.track(gen)
    if lease is not None:
        lease.submitted(prompt_tokens)
        for _, gen in sub.requests:
            if gen.finished:
                lease.on_end(gen)
            else:
                gen.quota = lease
    return sub


def _join_drain(run: RequestRun, drain: StreamDrain) -> None:
    """The run's SSE writer gathers its writes of one drain of the engine's output (`drain`,
    the worker's): the run's `sse`, or the writer under a route's own event sink (its `writer`,
    as the Responses route's)."""
    sse = run.sse
    writer = sse if isinstance(sse, SSEWriter) else getattr(sse, "writer", None)
    if isinstance(writer, SSEWriter):
        writer.drain = drain


class _EventStream(web.StreamResponse):
    """A streamed response whose headers wait for its first body write (aiohttp sends a
    StreamResponse's headers at `prepare` unless told otherwise): the headers and the role
    chunk go out in one write instead of two, ~one send() per request fewer. After that first
    write the events go straight to the transport (SSEWriter)."""

    _send_headers_immediately = False


async def respond(state, request: web.Request, run: RequestRun, sub: Submission, *,
                  role_chunks: bool) -> web.StreamResponse:
    """Wait for the run's end and answer: SSE as it goes (streaming) or one JSON body."""
    run.system_fingerprint = state.system_fingerprint
    state.request_started()
    try:
        if run.stream:
            sse = run.sse
            assert sse is not None
            ids = run.prompt_token_ids if run.return_token_ids else None
            role = getattr(run.formatter, "role", "assistant")
            first = b"".join(sse.role_chunk(c.index, ids, role, run.choice_usage(c) if run.continuous_usage else None)
                             for c in run.choices) if role_chunks else b""
            if run.echo_text:
                first += b"".join(sse.content_chunk_bytes(c.index, run.echo_text) for c in run.choices)
            resp = _EventStream(
                status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            resp.enable_chunked_encoding()
            interval = state.config.policy.sse_keep_alive_interval
            await run.first_output(min(FIRST_OUTPUT_WAIT_S, interval) if interval > 0 else FIRST_OUTPUT_WAIT_S)
            try:
                await resp.prepare(request)
                # Taken after `prepare` (which may yield): nothing held can reach the transport
                # before the headers, even when they wait for `write_eof`.
                first += sse.take_pending()
                if not run.done.done():
                    await resp.write(first)  # the headers and the first events: one write
                    first = b""
            except ConnectionError:  # the client left before the headers went out
                run.cancel()
                return resp
            try:
                sse.attach(request.transport, first_chunk=b"")
                if not sse.alive:
                    run.cancel()
                if interval > 0:
                    sse.keep_alive(interval)
                run.ends_with_last_frame = True  # (written below, whatever ends the run)
                try:
                    await run.done
                finally:
                    sse.stop_keep_alive()
            except Exception:
                # The headers are out: the answer is an error event in this stream, never a
                # second response on the connection (which the error middleware would send).
                log.exception("stream %s failed", run.response_id)
                run.fail(APIError(500, "Internal server error."))
            if sse.alive:
                unsent = b""
                if run.error is not None and not run.error_sent:
                    unsent = run.error_frame(run.error)
                # (a run that ended before the headers went out: all of it in this one write)
                await resp.write_eof(first + sse.last_frame(unsent))
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
        for _, gen in sub.requests:
            if gen.admission is not None:  # never left counted, whatever ended the run
                gen.admission.on_end(gen)
        _record_metrics(run, sub)
        _note_engines(request, sub)
        if state.tracer is not None:
            try:
                _record_span(state.tracer, request, run, sub)
            except Exception:  # noqa: BLE001 - tracing never fails a request
                log.exception("could not record the request's span")
        run.release()


def _record_metrics(run: RequestRun, sub: Submission) -> None:
    """Per engine request, at its end (frontend/metrics: nothing is observed per token)."""
    for i, (req, gen) in enumerate(sub.requests):
        m = run.choices[gen.index].metrics
        if m is None:
            continue
        reason = "error" if run.error is not None else (gen.finish_reason or "abort")
        m.on_finished(reason, gen.num_prompt_tokens, gen.num_output_tokens,
                      max_tokens=req.sampling_params.get("max_tokens"),
                      n=len(sub.requests) if i == 0 else None, timing=gen.timing)


def _note_engines(request: web.Request, sub: Submission) -> None:
    """For the request log line: the engines the request ran on and how often one of its engine
    requests moved to another (frontend/engine/migration.py)."""
    engines: list[int] = []
    moves = 0
    for _, gen in sub.requests:
        if gen.engines:
            engines += [e for e in gen.engines if e not in engines]
        if gen.moves:
            moves += len(gen.moves)
    if engines:
        request["engines"] = engines
    if moves:
        request["migrations"] = moves


def _migration_events(sub: Submission) -> list[tuple[str, int, dict]]:
    """One span event per move of one of the request's engine requests."""
    return [("request.migrated", int(at * 1e9), {"choice": gen.index, "from_engine": -1 if engine is None else engine,
                                                 "reason": reason})
            for _, gen in sub.requests if gen.moves for engine, reason, at in gen.moves]


def _record_span(tracer, request: web.Request, run: RequestRun, sub: Submission) -> None:
    """One span for the request (frontend/tracing.py), at its end."""
    from vllm_pyfrontend.tracing import request_attributes

    if not sub.requests:
        return
    first_req = sub.requests[0][0]
    first_metrics = run.choices[sub.requests[0][1].index].metrics
    now = time.monotonic()
    arrival = first_metrics.arrival if first_metrics is not None else now
    firsts = [m.first_token_at for m in (run.choices[g.index].metrics for _, g in sub.requests)
              if m is not None and m.first_token_at is not None]
    e2e = now - arrival
    start_ns = int(first_req.arrival_time * 1e9)
    prompts = {id(req.prompt_token_ids): gen.num_prompt_tokens for req, gen in sub.requests}
    attrs = request_attributes(
        request_id=run.response_id, model=run.model, prompt_tokens=sum(prompts.values()),
        completion_tokens=sum(gen.num_output_tokens for _, gen in sub.requests), n=len(sub.requests),
        ttft_s=(min(firsts) - arrival) if firsts else None, e2e_s=e2e,
        queue_s=max((q for _, g in sub.requests if (q := g.queue_time) is not None), default=None),
        sampling=first_req.sampling_params,
    )
    tracer.record(trace_headers=request.get("trace_headers"), start_ns=start_ns,
                  end_ns=start_ns + int(e2e * 1e9), attributes=attrs, events=_migration_events(sub))
