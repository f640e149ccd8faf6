"""`POST /v1/responses`, `GET /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`.

A Responses request is lowered to chat messages (`lowering.py`), then like a chat request by
the chat lowering (`serving/lowering/chat.py`: template, tokenizer, media, one engine request),
and run through the same `RequestRun` pipeline (detokenizer, stop strings, reasoning and tool parsers) with the
`ResponsesFormatter`. Stored responses go to the shared store (`frontend/store`), so a
follow-up or a GET served by any worker (or replica, with Redis) finds them. Background
responses keep running when their client leaves; a cancel on any worker sets the store's
cancel flag, which the owning worker watches.

Tenancy: every record names its owner (`tenant_of(request).owner`). Another owner's id is
answered exactly as an id that does not exist (404, the same body) by GET, cancel and
`previous_response_id`. A client-supplied `request_id` becomes the response's id (as vLLM) only
when it is free: the record is created before the request runs, and a taken id is refused with
409 (not silently replaced by a fresh id: vLLM's contract is that the id sent is the id the
response has, and a client that retrieves it by that id must not read another conversation).

Faults: a `store: true` request writes its record before it runs; a store that cannot take it
answers 503 and nothing runs. A store that breaks while the response runs: the synchronous
answer is a 503 (the response was not stored), a stream ends with `response.failed`. With
storing off (`--response-store none`, or `VLLM_ENABLE_RESPONSES_API_STORE=0` without the flag)
the routes behave as vLLM's without its store: `store: true` is ignored, `background` is a
400, GET, cancel and `previous_response_id` are 404.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiohttp import web

from vllm_pyfrontend.llm.sampling import SamplingOptions
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.lowering.chat import ChatRequest, chat_run, lower_chat, submit_chat
from vllm_pyfrontend.serving.request_pipeline import RequestRun
from vllm_pyfrontend.api.responses.formatter import ResponsesFormatter, new_id, response_object, usage_of
from vllm_pyfrontend.api.responses.lowering import (
    build_messages,
    chat_tool_choice,
    chat_tools,
    continues_final_message,
    response_format,
)
from vllm_pyfrontend.api.responses.schemas import ResponsesRequest
from vllm_pyfrontend.serving import per_request_metrics
from vllm_pyfrontend.serving.bodies import decode_body
from vllm_pyfrontend.serving.responder import Answer, JsonAnswer, StreamAnswer, http_response, write_answer
from vllm_pyfrontend.serving.scope import RequestScope
from vllm_pyfrontend.serving.sse import SSEWriter
from vllm_pyfrontend.store import (
    RecordTooLarge,
    StoreUnavailable,
    open_store,
    store_disabled,
)
from vllm_pyfrontend.serving.state import STATE
from vllm_pyfrontend.serving.web_app import app_service
from vllm_pyfrontend.tenants import tenant_of
from vllm_pyfrontend.api.responses.service import RESPONSES, Responses, mark_orphan, store_error, store_key

log = logging.getLogger(__name__)
WORKER_HEADER = "X-Vllm-Pyfrontend-Worker"  # which worker served the request
LOGPROBS_INCLUDE = "message.output_text.logprobs"
STORE_OFF_BACKGROUND = ("This vLLM engine does not support `store=True` and therefore does not support the "
                        "background mode. To enable these features, set the environment variable "
                        "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server.")


def add_responses_routes(app: web.Application) -> None:
    app.router.add_post("/v1/responses", handle_create)
    app.router.add_get("/v1/responses/{response_id}", handle_retrieve)
    app.router.add_post("/v1/responses/{response_id}/cancel", handle_cancel)

    async def start(app: web.Application) -> None:
        cfg = app[STATE].config
        policy = cfg.policy
        store = None
        if not store_disabled(policy.response_store):
            store = open_store(policy.response_store, cfg.runtime_dir, ttl=policy.response_store_ttl,
                               max_entries=policy.response_store_max_entries,
                               max_bytes=policy.response_store_max_bytes,
                               max_record_bytes=policy.response_store_max_record_bytes,
                               owner_limit=tenants.storage_limit if (tenants := app[STATE].tenants) else None)
        responses = app[RESPONSES] = Responses(store)
        responses.start()

    app_service(app, RESPONSES, start)


def _json(state, body: dict[str, Any]) -> web.Response:
    return http_response(_answer(state, body))


def _answer(state, body: dict[str, Any]) -> JsonAnswer:
    return JsonAnswer(body, headers={WORKER_HEADER: str(state.worker_index)})


def _not_found(response_id: str) -> APIError:
    return APIError(404, f"Response with id '{response_id}' not found.", "response_id")


async def owned_record(responses: Responses, owner: str, response_id: str) -> dict[str, Any]:
    """The stored record `response_id` of `owner`; another owner's record, an id that does
    not exist and storing off are the same 404. A record left in progress by a worker that is
    gone is failed first."""
    store = responses.store
    if store is None:
        raise _not_found(response_id)
    key = store_key(owner, response_id)
    try:
        record = await store.get(key)
        if record is None or record.get("owner", "") != owner:
            raise _not_found(response_id)
        worker = record.get("worker")
        if worker is not None and worker != responses.worker_id and not await store.worker_alive(worker):
            await store.fail_orphans(mark_orphan)
            record = await store.get(key) or record
    except StoreUnavailable as e:
        raise store_error(e) from None
    return record


class _Sink:
    """What the RequestRun writes events into: the client's SSE stream while there is one. A
    background run stays alive when its client leaves; a foreground run is cancelled."""

    __slots__ = ("writer", "background", "alive")

    def __init__(self, writer: SSEWriter | None, background: bool):
        self.writer = writer
        self.background = background
        self.alive = True

    def write(self, data: bytes) -> None:
        w = self.writer
        if w is None:
            return
        if w.alive:
            w.write(data)
        if not w.alive:
            self.writer = None
            if not self.background:
                self.alive = False


class _ResponsesRun(RequestRun):
    """A run whose failure has no event of its own: the turn ends the stream with
    `response.failed` (`_Turn.finish`)."""

    def error_frame(self, error: APIError) -> bytes:
        return b""


class _Turn:
    """One accepted Responses request: its run, formatter and what its final object needs."""

    def __init__(self, state, responses: Responses, req: ResponsesRequest, model: str,
                 messages: list[dict[str, Any]], sampling: dict[str, Any], run: RequestRun,
                 formatter: ResponsesFormatter, sink: _Sink, owner: str | None):
        self.state, self.req, self.model = state, req, model
        self.messages, self.sampling, self.run, self.formatter, self.sink = (
            messages, sampling, run, formatter, sink)
        self.response_id = run.response_id
        self.responses = responses
        self.owner = owner  # None: not stored
        self.key = store_key(owner or "", self.response_id)  # its record's, and this worker's tables'
        self.store_failure: StoreUnavailable | None = None
        self.finalized = False

    def snapshot(self, status: str, output=None, usage=None, error=None) -> dict[str, Any]:
        return response_object(self.req, response_id=self.response_id, created_at=self.run.created,
                               model=self.model, sampling=self.sampling, status=status,
                               output=list(output or []), usage=usage, error=error)

    def final(self, cancelled: bool) -> dict[str, Any]:
        run = self.run
        self.finalized = True
        self.formatter.close()
        error = None
        gen = run.choices[0].gen
        if cancelled:
            status = "cancelled"
        elif run.error is not None:
            status = "failed"
            error = {"code": "server_error", "message": run.error.message}
        elif gen is not None and gen.finish_reason == "length":
            status = "incomplete"
        else:
            status = "completed"
        items = self.formatter.items
        if not items and not self.req.stream and status in ("completed", "incomplete"):
            # Nothing generated (e.g. a stop at the first token): vLLM answers one empty message
            # item when not streaming (a stream has no items, as no item events went out).
            items = [{"id": new_id("msg"), "type": "message", "role": "assistant", "status": "completed",
                      "content": []}]
        response = self.snapshot(status, items, usage_of(run), error)
        if self.state.config.policy.enable_per_request_metrics and status in ("completed", "incomplete"):
            # vLLM's Responses carry `metrics` only with the flag (no key at all without it)
            response["metrics"] = per_request_metrics.timing_metrics(gen, run.completion_tokens)
        return response

    async def store(self, response: dict[str, Any]) -> dict[str, Any]:
        """The final record (this worker no longer runs it); returns the response as the client
        gets it. Over the per-record bound, the record keeps the response without its output,
        failed (`response_too_large`): a GET or a follow-up never sees a conversation that was
        not stored whole; the client's own answer is the generated response. A store that fails
        now: the response as failed (the caller answers 503 or `response.failed`)."""
        if self.owner is None:
            return response
        store = self.responses.store
        assert store is not None
        record = {"response": response, "messages": self.messages}
        try:
            try:
                done = await store.update(self.key, self.owner, record)
            except RecordTooLarge as e:
                log.warning("response %s not stored whole: %s", self.response_id, e)
                record = {"messages": [], "response": {
                    **response, "output": [], "status": "failed",
                    "error": {"code": "response_too_large",
                              "message": f"The response was generated but is too large to store ({e})."}}}
                done = await store.update(self.key, self.owner, record)
            if not done:  # evicted (the store's bounds) or expired while it ran: stored anew
                done = await store.create(self.key, self.owner, record)
            if not done:
                log.warning("response %s could not be stored: its id was taken meanwhile", self.response_id)
        except StoreUnavailable as e:
            log.error("response %s could not be stored: %s", self.response_id, e)
            self.store_failure = e
            return {**response, "status": "failed",
                    "error": {"code": "server_error", "message": f"The response could not be stored: {e}"}}
        return response

    def store_cancelled(self) -> None:
        """The client left and its handler is cancelled: the record becomes `cancelled` (in a
        task of its own: this one awaits nothing more), never left in progress."""
        if self.owner is None or self.finalized:
            return
        task = asyncio.get_running_loop().create_task(self.store(self.final(True)))
        self.responses.tasks.add(task)
        task.add_done_callback(self.responses.tasks.discard)

    def terminal_event(self, response: dict[str, Any]) -> None:
        kind = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(
            response["status"], "response.failed")
        self.formatter.event(kind, response=response)

    async def finish(self) -> dict[str, Any]:
        """After the run's end: the final object, stored (a cancel seen in the store wins)."""
        cancelled = self.key in self.responses.cancelled
        if not cancelled and self.req.background and self.owner is not None:
            try:
                cancelled = bool(await self.responses.store.cancel_requested([self.key]))
            except StoreUnavailable as e:
                log.warning("could not read the cancel flag of %s: %s", self.response_id, e)
        response = await self.store(self.final(cancelled))
        self.terminal_event(response)
        return response

    def ended(self) -> None:
        """The store's bookkeeping once the run is over, whatever ended it (its engine request,
        metrics and release are its scope's)."""
        run = self.run
        if not run.done.done():
            run.cancel()
        self.responses.running.discard(self.key)
        self.responses.background.pop(self.key, None)
        self.responses.cancelled.discard(self.key)


# -- POST /v1/responses ---------------------------------------------------------------------------
def _chat_request(req: ResponsesRequest, messages: list[dict[str, Any]]) -> ChatRequest:
    """A Responses request (its input already as chat `messages`) as the chat lowering's
    request: one choice, always run as a stream of events (into the sink)."""
    tools = chat_tools(req.tools)
    tool_choice = chat_tool_choice(req.tool_choice, bool(tools))
    continue_final = continues_final_message(req.input)
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    extra = dict(req.vllm_xargs or {})
    if req.kv_transfer_params:
        extra["kv_transfer_params"] = req.kv_transfer_params
    opts = SamplingOptions(
        max_tokens=req.max_output_tokens, temperature=req.temperature, top_p=req.top_p, top_k=req.top_k,
        min_p=req.min_p, seed=req.seed, presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty, repetition_penalty=req.repetition_penalty,
        stop=[s for s in stop if s], stop_token_ids=list(req.stop_token_ids or []), ignore_eos=req.ignore_eos,
        include_stop_str_in_output=req.include_stop_str_in_output, skip_special_tokens=req.skip_special_tokens,
        extra_args=extra or None,
    )
    return ChatRequest(
        messages=messages, options=opts, tools=tools, tool_choice=tool_choice,
        parallel_tool_calls=req.parallel_tool_calls, response_format=response_format(req.text),
        structured_outputs=req.structured_outputs, logit_bias=req.logit_bias,
        chat_template_kwargs=req.chat_template_kwargs, reasoning_effort=(req.reasoning or {}).get("effort"),
        add_generation_prompt=not continue_final, continue_final_message=continue_final,
        truncate_prompt_tokens=-1 if req.truncation == "auto" else None,
        logprobs=LOGPROBS_INCLUDE in (req.include or ()), top_logprobs=req.top_logprobs,
        include_reasoning=req.include_reasoning, stream=True, priority=req.priority, cache_salt=req.cache_salt,
    )


async def handle_create(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    async with state.scopes.http(request, "responses") as scope:
        answer = await create_response(state, request.app[RESPONSES], scope, await state.read_body(request))
        return await write_answer(request, answer)


async def create_response(state, responses: Responses, scope: RequestScope, body: bytes) -> Answer:
    """The endpoint: a request body, in its scope, to its answer (HTTP routes and batch lines).
    A background response holds its scope until its run ends."""
    req: ResponsesRequest = decode_body(body, ResponsesRequest)
    model = state.check_model(req.model)
    state.check_generation()
    scope.check_engine()
    tenant_owner = scope.caller.tenant.owner

    if req.prompt is not None:
        raise APIError(400, "prompt template is not supported", "prompt")
    if responses.store is None and req.store and req.background:
        raise APIError(400, STORE_OFF_BACKGROUND, "background")  # (vLLM's answer without its store)
    if req.background and not req.store:
        raise APIError(400, "background can only be used when `store` is true", "background")
    if req.max_output_tokens is not None and req.max_output_tokens < 1:
        raise APIError(400, f"max_output_tokens must be at least 1, got {req.max_output_tokens}.",
                       "max_output_tokens")
    if req.text is not None and req.text.get("format") is not None and req.structured_outputs is not None:
        raise APIError(400, "Cannot specify both structured_outputs and text.format", "structured_outputs")
    previous = None
    if req.previous_response_id is not None:
        previous = await owned_record(responses, tenant_owner, req.previous_response_id)

    lowered = build_messages(req.instructions, req.input, previous,
                             allow_media=state.multimodal.active)
    chat = _chat_request(req, lowered)
    low = await lower_chat(state, chat)
    prompt = low.prompt

    response_id = req.request_id or new_id("resp")
    stream, background = bool(req.stream), bool(req.background)
    sampling = low.samplings[0]
    created = int(time.time())
    # Stored for previous_response_id: with media, the chat messages with their image parts
    # (a follow-up renders and processes them again), not the rendered template messages.
    messages = lowered if prompt.has_media else prompt.messages
    # Storing off (vLLM without its store): `store: true` is ignored.
    owner = tenant_owner if req.store and responses.store is not None else None
    if owner is not None:  # the record first: a taken id, a record too large or a broken store stop here
        await _create_record(responses, response_id, owner, {"response": response_object(
            req, response_id=response_id, created_at=created, model=model, sampling=sampling,
            status="in_progress", output=[], usage=None), "messages": messages})
    try:
        writer = SSEWriter(response_id, model, 0, limits=state.sse_limits) if stream else None
        sink = _Sink(writer, background)
        formatter = ResponsesFormatter(state.token_text, req.top_logprobs or 0, sink.write if stream else None)
        # the run writes its events through the sink, streamed or not (the sink keeps them or drops them)
        run = chat_run(state, chat, low, response_id=response_id, model=model, created=created,
                       formatter=formatter, sse=sink, run_class=_ResponsesRun)
        if state.output_log is not None:
            state.output_log.attach_final(run, streaming=bool(stream))
        submit_chat(state, scope, chat, low, run)
    except BaseException as e:
        if owner is not None:
            await _abandon(responses, response_id, owner, messages, e)
        raise
    turn = _Turn(state, responses, req, model, messages, sampling, run, formatter, sink, owner)
    if background:
        responses.own(turn.key, run)
    try:
        initial = turn.snapshot("queued" if background else "in_progress")
        formatter.event("response.created", response=initial)
        formatter.event("response.in_progress", response={**initial, "status": "in_progress"})
    except BaseException:
        turn.ended()
        raise

    if background:
        scope.hold()  # the work goes on past the answer: the task ends the scope
        task = asyncio.get_running_loop().create_task(_run_background(turn, scope))
        responses.tasks.add(task)
        task.add_done_callback(responses.tasks.discard)
        if not stream:
            return _answer(state, initial)
        return StreamAnswer(lambda request: _stream_until_end(turn, task, request))
    if stream:
        return StreamAnswer(lambda request: _stream_foreground(turn, request))
    try:
        await run.done
        response = await turn.finish()
    except asyncio.CancelledError:
        run.cancel()  # the client left: abort in the engine
        turn.store_cancelled()
        raise
    finally:
        turn.ended()
    if run.error is not None:  # (stored as "failed"); a synchronous answer is the error itself
        raise run.error
    if turn.store_failure is not None:  # never a 200 for a response the store did not take
        raise APIError(503, f"The response was generated but could not be stored: {turn.store_failure}",
                       None, "ServiceUnavailableError")
    return _answer(state, response)


async def _create_record(responses: Responses, response_id: str, owner: str, record: dict[str, Any]) -> None:
    """The record of a request about to run, in progress on this worker: 409 for a taken id,
    400 for a record over the per-record bound, 503 for a store that cannot take it."""
    store = responses.store
    assert store is not None
    try:
        created = await store.create(store_key(owner, response_id), owner, record, worker=responses.worker_id)
    except RecordTooLarge as e:
        raise APIError(400, f"The response cannot be stored: its input, instructions and metadata take {e.size} "
                            f"bytes, over the bound of {e.limit} per stored response. Send less, or store: false.",
                       "input") from None
    except StoreUnavailable as e:
        raise store_error(e) from None
    if not created:  # (this owner's own: another owner's id is another key)
        raise APIError(409, f"A response with id '{response_id}' already exists; send another request_id "
                            "(or none: one is generated).", "request_id", "ConflictError")
    responses.running.add(store_key(owner, response_id))


async def _abandon(responses: Responses, response_id: str, owner: str, messages: list[dict[str, Any]],
                   error: BaseException) -> None:
    """A created record whose request did not start: stored as failed (best effort)."""
    key = store_key(owner, response_id)
    responses.running.discard(key)
    store = responses.store
    assert store is not None
    message = error.message if isinstance(error, APIError) else "The request did not start."
    try:
        record = await store.get(key)
        if record is not None:
            response = {**record["response"], "status": "failed",
                        "error": {"code": "server_error", "message": message}}
            await store.update(key, owner, {"response": response, "messages": messages})
    except StoreUnavailable as e:
        log.warning("could not mark response %s failed: %s", response_id, e)


async def _run_background(turn: _Turn, scope: RequestScope) -> None:
    error: BaseException | None = None
    try:
        await turn.run.done
        await turn.finish()
    except asyncio.CancelledError as e:
        turn.run.cancel()
        error = e
        raise
    except Exception as e:  # noqa: BLE001
        log.exception("background response %s failed", turn.response_id)
        error = e
    finally:
        turn.ended()
        scope.end(error)


async def _prepare_stream(turn: _Turn, request: web.Request) -> web.StreamResponse | None:
    resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                                    WORKER_HEADER: str(turn.state.worker_index)})
    resp.enable_chunked_encoding()
    try:
        await resp.prepare(request)
    except ConnectionError:
        return None
    return resp


def _attach(turn: _Turn, request: web.Request) -> None:
    """The headers are out: the events held so far go, then every event as it comes."""
    writer = turn.sink.writer
    assert writer is not None
    writer.attach(request.transport, first_chunk=b"")
    interval = turn.state.config.policy.sse_keep_alive_interval
    if interval > 0:
        writer.keep_alive(interval)


async def _end_stream(turn: _Turn, resp: web.StreamResponse) -> None:
    w = turn.sink.writer
    if w is None or not w.alive:
        return
    w.stop_keep_alive()
    tail = w.last_frame()[: -len(b"data: [DONE]\n\n")]  # Responses streams have no [DONE]
    try:
        await resp.write_eof(tail)
    except ConnectionError:
        pass


async def _stream_foreground(turn: _Turn, request: web.Request) -> web.StreamResponse:
    run = turn.run
    try:
        resp = await _prepare_stream(turn, request)
        if resp is None:
            run.cancel()
            return web.StreamResponse()
        try:
            _attach(turn, request)
            if not turn.sink.alive:
                run.cancel()
            await run.done
        except Exception:  # noqa: BLE001 - headers are out: the answer is a response.failed event
            log.exception("stream %s failed", turn.response_id)
            run.fail(APIError(500, "Internal server error."))
        try:
            if turn.sink.alive:
                await turn.finish()
            else:  # the client left: the run was cancelled
                await turn.store(turn.final(True))
        except Exception:  # noqa: BLE001 - the headers are out: never a second response
            log.exception("stream %s could not finish", turn.response_id)
        await _end_stream(turn, resp)
        return resp
    except asyncio.CancelledError:
        run.cancel()
        turn.store_cancelled()
        raise
    finally:
        turn.ended()


async def _stream_until_end(turn: _Turn, task: asyncio.Task, request: web.Request) -> web.StreamResponse:
    """A background stream: events while the client stays; the run goes on if it leaves."""
    resp = await _prepare_stream(turn, request)
    if resp is None:
        return web.StreamResponse()
    try:
        _attach(turn, request)
    except Exception:  # noqa: BLE001 - this client's stream is broken; the run goes on
        log.exception("stream %s could not start", turn.response_id)
        turn.sink.writer = None
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        turn.sink.writer = None  # client gone; the background task carries on
        raise
    await _end_stream(turn, resp)
    return resp


# -- GET /v1/responses/{id}, POST /v1/responses/{id}/cancel --------------------------------------
async def handle_retrieve(request: web.Request) -> web.Response:
    state = request.app[STATE]
    response_id = request.match_info["response_id"]
    if request.query.get("stream", "false").lower() == "true":
        raise APIError(400, "Streaming a stored response again (stream=true) is not supported.", "stream")
    record = await owned_record(request.app[RESPONSES], tenant_of(request).owner, response_id)
    return _json(state, record["response"])


async def handle_cancel(request: web.Request) -> web.Response:
    state = request.app[STATE]
    responses: Responses = request.app[RESPONSES]
    response_id = request.match_info["response_id"]
    record = await owned_record(responses, tenant_of(request).owner, response_id)
    response = record["response"]
    if not response.get("background"):
        raise APIError(400, "Cannot cancel a synchronous response.", "response_id")
    if response.get("status") in ("queued", "in_progress"):
        response = {**response, "status": "cancelled"}
        store = responses.store
        assert store is not None
        key = store_key(record["owner"], response_id)
        try:
            await store.request_cancel(key)
            await store.update(key, record["owner"], {**record, "response": response})
        except StoreUnavailable as e:
            raise store_error(e) from None
        responses.cancel_local(key)
    return _json(state, response)
