"""Submitting a request's engine requests and answering from its `RequestRun`, for every
generation API style (OpenAI chat and text completions, Anthropic Messages).

A style builds its `RequestRun` (choices, formatter, SSE writer), lowers its sampling through
`frontend/llm` and calls `submit_choices` in the request's scope (serving/scope.py), then
`answer_run`: an `Answer` that is SSE as the run goes (`StreamAnswer`, HTTP only) or the JSON
body from `run.formatter.body` (`JsonAnswer`, which a batch line takes as it is). Error events
mid-stream are framed by the run (`RequestRun.error_frame`), the end of the stream by the SSE
writer (`SSEWriter.last_frame`), so the same code serves every style's wire format.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend.llm.sampling import SamplingOptions
from vllm_pyfrontend.llm.submission import Submission
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.request_pipeline import Choice, RequestRun
from vllm_pyfrontend.serving.sse import SSEWriter, StreamDrain
from vllm_pyfrontend.serving.scope import RequestScope
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
    sse = SSEWriter(run_id, model, created, object_name, state.sse_limits)
    sse.set_fingerprint(state.system_fingerprint)
    return sse


def submit_choices(
    state, scope: RequestScope, run: RequestRun, items: list[tuple[Choice, list[int], dict[str, Any]]], *,
    priority: int, cache_salt: str | None, lora_request: list[Any] | None = None, multimodal: Any = None,
    requested_max_tokens: int | None = None,
) -> Submission:
    """One engine request per (choice, prompt ids, sampling map), all sent or none, in the
    request's scope (admission, the tenant's tokens, metrics). `requested_max_tokens`: the
    client's own `max_tokens` (None: not given), for a named key's limit."""
    prefix = run.response_id.split("-", 1)[0]
    if len(prefix) > 32 or not (prefix.isascii() and prefix.replace("_", "").isalnum()):
        prefix = "req"  # a client's request id (Responses): not into the engine's ids and logs
    scope.name(run.response_id, run.model)
    scope.follow(run)
    scope.on_end(run.release)
    _join_drain(run, state.drain)
    sub = scope.submit(run, [(c.index, p, s, run.step(c)) for c, p, s in items], id_prefix=prefix,
                       external_id=run.response_id, priority=priority, cache_salt=cache_salt,
                       lora_request=lora_request, multimodal=multimodal, requested_max_tokens=requested_max_tokens)
    for (choice, _, _), (_, gen) in zip(items, sub.requests):
        choice.gen = gen
        choice.metrics = gen.metrics
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


@dataclass(slots=True)
class JsonAnswer:
    """A whole answer: the object that becomes the JSON body (HTTP) or a batch line's body."""

    body: Any
    status: int = 200
    headers: dict[str, str] | None = None


@dataclass(slots=True)
class StreamAnswer:
    """An answer written to the client as it is made (HTTP only): `write(request)` sends it
    and returns when it ends."""

    write: Callable[[web.Request], Awaitable[web.StreamResponse]]


Answer = JsonAnswer | StreamAnswer
# How an API style frames an error's body (`APIError` -> bytes), by the path prefix of its
# routes; OpenAI's shape everywhere else. The server's error and auth middleware frame each
# error once with it (`server/middleware.py` `error_response`).
ERROR_FRAMES = web.AppKey("error_frames", dict)
# An endpoint: (the worker's state, the request's scope, the request body) -> its answer. The
# HTTP routes and the batch runner call the same ones.
Endpoint = Callable[[Any, RequestScope, bytes], Awaitable[Answer]]


def http_response(answer: Answer) -> web.Response:
    assert isinstance(answer, JsonAnswer)
    return web.Response(body=_json(answer.body), status=answer.status, headers=answer.headers,
                        content_type="application/json")


async def write_answer(request: web.Request, answer: Answer) -> web.StreamResponse:
    """An endpoint's answer on its HTTP request (inside the request's scope)."""
    if isinstance(answer, StreamAnswer):
        return await answer.write(request)
    return http_response(answer)


async def answer_run(state, run: RequestRun, *, role_chunks: bool) -> Answer:
    """A submitted run's answer: its SSE stream, or (after waiting for its end) its JSON body.
    The run's end, abort and release belong to its scope (serving/scope.py)."""
    run.system_fingerprint = state.system_fingerprint
    if run.stream:
        return StreamAnswer(lambda request: _stream(state, request, run, role_chunks))
    await run.done
    if run.error is not None:
        raise run.error
    return JsonAnswer(run.formatter.body(run, run.system_fingerprint))


async def _stream(state, request: web.Request, run: RequestRun, role_chunks: bool) -> web.StreamResponse:
    """SSE as the run goes; a failure after the headers is an error event in the stream."""
    try:
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
    except asyncio.CancelledError:
        # aiohttp cancels the handler when the client disconnects: abort in the engine.
        run.cancel()
        raise
    finally:
        if not run.done.done():
            run.cancel()


async def respond(state, request: web.Request, run: RequestRun, *, role_chunks: bool) -> web.StreamResponse:
    """Wait for the run's end and answer on `request`: SSE as it goes or one JSON body."""
    return await write_answer(request, await answer_run(state, run, role_chunks=role_chunks))
