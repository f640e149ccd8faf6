"""POST /v1/chat/completions: request -> engine requests -> SSE or JSON, one pipeline.

Per choice the pipeline is: engine output (llm.Generation) -> TextStream (detokenizer + stop
strings) -> AssistantStream (content / reasoning / tool calls) -> a sink. The sink of a
streaming request writes SSE bytes straight to the transport from the engine-output callback;
the sink of a non-streaming request appends to lists. Both see the same events, so the two
modes agree by construction. The handler coroutine awaits only the end of the request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import msgspec
from aiohttp import web

from frontend.chat.assistant import AssistantDelta, AssistantStream
from frontend.engine.types import EngineDeadError, EngineRequest, InvalidEngineRequest, Logprobs
from frontend.llm.generation import Generation
from frontend.llm.request_ids import make_request_id
from frontend.llm.sampling import ContextLengthError, SamplingOptions, lower_sampling, resolve_max_tokens
from frontend.server.errors import APIError
from frontend.server.schemas import ChatCompletionRequest, decode_body, normalize_messages
from frontend.server.sse import DONE, SSEWriter
from frontend.text.text_stream import TextStream

log = logging.getLogger("frontend.server")

_json = msgspec.json.encode


class Choice:
    __slots__ = ("index", "gen", "text", "assistant", "content", "reasoning", "tool_calls", "finished")

    def __init__(self, index: int, text: TextStream, assistant: AssistantStream):
        self.index = index
        self.gen: Generation | None = None
        self.text = text
        self.assistant = assistant
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.finished = False


class ChatCompletionRun:
    """State of one chat completion request; the GenerationConsumer of its choices."""

    def __init__(
        self,
        *,
        response_id: str,
        model: str,
        created: int,
        choices: list[Choice],
        num_prompt_tokens: int,
        stream: bool,
        include_usage: bool,
        continuous_usage: bool,
    ):
        self.response_id = response_id
        self.model = model
        self.created = created
        self.choices = choices
        self.num_prompt_tokens = num_prompt_tokens
        self.stream = stream
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.error: APIError | None = None
        self.sse: SSEWriter | None = None
        self._remaining = len(choices)

    # -- GenerationConsumer -------------------------------------------------------------
    def on_delta(
        self,
        gen: Generation,
        token_ids: list[int],
        logprobs: Logprobs | None,
        finish_reason: str | None,
        stop_reason: int | str | None,
    ) -> None:
        choice = self.choices[gen.index]
        if choice.finished:
            return
        engine_stopped = finish_reason == "stop"
        text, matched = choice.text.feed(token_ids, engine_stopped)
        if matched is not None:
            gen.stop_early("stop", matched)
            finish_reason, stop_reason = "stop", matched
        elif finish_reason is not None and not engine_stopped:
            text += choice.text.finish()
        delta = choice.assistant.feed(text)
        if finish_reason is not None:
            tail = choice.assistant.finish()
            if tail is not None:
                delta = _merge(delta, tail)
        self._emit(choice, delta, finish_reason, stop_reason)
        if finish_reason is not None:
            self._choice_done(choice)

    def on_error(self, gen: Generation, message: str) -> None:
        choice = self.choices[gen.index]
        if choice.finished:
            return
        self.fail(APIError(500 if "dead" not in message.lower() else 503, message))

    # -- output ---------------------------------------------------------------------------
    def _emit(self, choice: Choice, delta: AssistantDelta | None, finish: str | None, stop_reason) -> None:
        if not self.stream:
            if delta is not None:
                if delta.content:
                    choice.content.append(delta.content)
                if delta.reasoning:
                    choice.reasoning.append(delta.reasoning)
                if delta.tool_calls:
                    choice.tool_calls.extend(delta.tool_calls)
            return
        sse = self.sse
        if sse is None:
            return
        if finish is None:
            if delta is None or delta.is_empty():
                return
            if delta.content and not delta.reasoning and not delta.tool_calls:
                sse.content_chunk(choice.index, delta.content, self._usage_now() if self.continuous_usage else None)
                return
        sse.delta_chunk(
            choice.index,
            _delta_dict(delta) if delta is not None else {"content": ""},
            finish,
            stop_reason,
            finish is not None,
            self._usage_now() if self.continuous_usage else None,
        )
        if not sse.alive:
            self.cancel()

    def _usage_now(self) -> dict[str, int]:
        completion = sum(c.gen.num_output_tokens for c in self.choices if c.gen is not None)
        return {
            "prompt_tokens": self.num_prompt_tokens,
            "total_tokens": self.num_prompt_tokens + completion,
            "completion_tokens": completion,
        }

    def _choice_done(self, choice: Choice) -> None:
        choice.finished = True
        self._remaining -= 1
        if self._remaining == 0:
            if self.stream and self.sse is not None:
                if self.include_usage:
                    self.sse.usage_chunk(self._usage_now())
                self.sse.write(DONE)
            if not self.done.done():
                self.done.set_result(None)

    def fail(self, error: APIError) -> None:
        """End the whole request with an error (mid-stream: error event then [DONE])."""
        if self.done.done():
            return
        self.error = error
        for c in self.choices:
            c.finished = True
            if c.gen is not None and not c.gen.finished:
                c.gen.cancel()
        if self.stream and self.sse is not None:
            self.sse.write(b"data: " + error.to_bytes() + b"\n\n")
            self.sse.write(DONE)
        self.done.set_result(None)

    def cancel(self) -> None:
        """Client gone: abort every engine request, finish quietly."""
        for c in self.choices:
            c.finished = True
            if c.gen is not None:
                c.gen.cancel()
        if not self.done.done():
            self.done.set_result(None)

    # -- non-streaming body --------------------------------------------------------------
    def response_body(self, system_fingerprint: str | None) -> dict[str, Any]:
        choices = []
        for c in self.choices:
            gen = c.gen
            message: dict[str, Any] = {
                "role": "assistant",
                "content": "".join(c.content) if (c.content or not c.tool_calls) else None,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "reasoning": "".join(c.reasoning) if c.reasoning else None,
            }
            if c.tool_calls:
                message["tool_calls"] = c.tool_calls
            choices.append(
                {
                    "index": c.index,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": gen.finish_reason if gen else "stop",
                    "stop_reason": gen.stop_reason if gen else None,
                    "token_ids": None,
                }
            )
        usage = self._usage_now()
        return {
            "id": self.response_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "service_tier": None,
            "system_fingerprint": system_fingerprint,
            "usage": {**usage, "prompt_tokens_details": None},
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "kv_transfer_params": None,
        }


def _merge(a: AssistantDelta | None, b: AssistantDelta) -> AssistantDelta:
    if a is None:
        return b
    return AssistantDelta(
        content=((a.content or "") + (b.content or "")) or None,
        reasoning=((a.reasoning or "") + (b.reasoning or "")) or None,
        tool_calls=a.tool_calls + b.tool_calls,
    )


def _delta_dict(delta: AssistantDelta) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if delta.reasoning:
        d["reasoning"] = delta.reasoning
    if delta.content is not None:
        d["content"] = delta.content
    if delta.tool_calls:
        d["tool_calls"] = delta.tool_calls
    if not d:
        d["content"] = ""
    return d


def _options_from(req: ChatCompletionRequest) -> SamplingOptions:
    stop = req.stop
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and any(not s for s in stop):
        raise APIError(400, "`stop` strings must not be empty.", "stop")
    logit_bias = None
    if req.logit_bias:
        try:
            logit_bias = {int(k): v for k, v in req.logit_bias.items()}
        except ValueError:
            raise APIError(400, "`logit_bias` keys must be token ids.", "logit_bias") from None
    return SamplingOptions(
        max_tokens=req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        min_p=req.min_p,
        seed=req.seed,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        repetition_penalty=req.repetition_penalty,
        min_tokens=req.min_tokens,
        stop=list(stop or []),
        stop_token_ids=list(req.stop_token_ids or []),
        ignore_eos=req.ignore_eos,
        include_stop_str_in_output=req.include_stop_str_in_output,
        skip_special_tokens=req.skip_special_tokens,
        spaces_between_special_tokens=req.spaces_between_special_tokens,
        logit_bias=logit_bias,
        allowed_token_ids=req.allowed_token_ids,
        extra_args=req.vllm_xargs,
    )


async def handle_chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app["state"]
    body = await state.read_body(request)
    req: ChatCompletionRequest = decode_body(body, ChatCompletionRequest)
    model = state.check_model(req.model)
    state.check_engine()

    if req.n is not None and req.n != 1:
        if req.n < 1:
            raise APIError(400, f"n must be at least 1, got {req.n}.", "n")
        raise APIError(400, "n > 1 is not supported yet.", "n")
    if req.max_tokens is not None and req.max_tokens < 1:
        raise APIError(400, f"max_tokens must be at least 1, got {req.max_tokens}.", "max_tokens")
    if req.max_completion_tokens is not None and req.max_completion_tokens < 1:
        raise APIError(
            400, f"max_completion_tokens must be at least 1, got {req.max_completion_tokens}.", "max_completion_tokens"
        )
    if req.chat_template is not None:
        raise APIError(
            400,
            "Chat templates in requests are refused unless the server allows them.",
            "chat_template",
        )
    messages = normalize_messages(req.messages)
    template_kwargs = dict(req.chat_template_kwargs or {})
    if req.reasoning_effort is not None:
        # As vLLM's build_chat_params: the effort reaches the template, and turns thinking on
        # (or off for "none") unless the user set enable_thinking explicitly.
        template_kwargs["reasoning_effort"] = req.reasoning_effort
        template_kwargs.setdefault("enable_thinking", req.reasoning_effort != "none")
    prompt_ids = state.render_and_tokenize(
        messages,
        tools=req.tools,
        documents=req.documents,
        add_generation_prompt=req.add_generation_prompt,
        continue_final_message=req.continue_final_message,
        chat_template_kwargs=template_kwargs,
    )
    opts = _options_from(req)
    max_model_len = state.max_model_len
    try:
        max_tokens = resolve_max_tokens(opts.max_tokens, len(prompt_ids), max_model_len, state.generation_defaults)
    except ContextLengthError as e:
        raise APIError(400, e.message, e.param) from None
    sampling = lower_sampling(
        opts, max_tokens=max_tokens, eos_token_id=state.tokenizer.eos_token_id, defaults=state.generation_defaults
    )

    response_id = f"chatcmpl-{req.request_id}" if req.request_id else make_request_id("chatcmpl", state.worker_index)
    stream = bool(req.stream)
    so = req.stream_options
    if so is not None and not stream and (so.include_usage or so.continuous_usage_stats):
        raise APIError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
    choice = Choice(
        0,
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
        state.new_assistant_stream(),
    )
    run = ChatCompletionRun(
        response_id=response_id,
        model=model,
        created=int(time.time()),
        choices=[choice],
        num_prompt_tokens=len(prompt_ids),
        stream=stream,
        include_usage=bool(so and so.include_usage),
        continuous_usage=bool(so and so.continuous_usage_stats),
    )
    engine_id = make_request_id("chatcmpl", state.worker_index)
    gen = Generation(engine_id, 0, run, state.engine, len(prompt_ids))
    choice.gen = gen
    ereq = EngineRequest(
        request_id=engine_id,
        prompt_token_ids=prompt_ids,
        sampling_params=sampling,
        arrival_time=time.time(),
        external_req_id=response_id,
        priority=req.priority,
        cache_salt=req.cache_salt,
    )
    resp: web.StreamResponse | None = None
    if stream:
        run.sse = SSEWriter(response_id, model, run.created)
    try:
        state.engine.add_request(ereq, gen)
    except InvalidEngineRequest as e:
        raise APIError(400, e.message, e.param) from None
    except EngineDeadError as e:
        raise APIError(503, f"The engine is not available: {e}") from None
    state.request_started()
    try:
        if stream:
            resp = web.StreamResponse(
                status=200,
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
            )
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            run.sse.attach(request.transport, first_chunk=run.sse.role_chunk(0))
            if not run.sse.alive:
                run.cancel()
            await run.done
            if run.sse.alive:
                await resp.write_eof()
            return resp
        await run.done
        if run.error is not None:
            raise run.error
        return web.Response(body=_json(run.response_body(state.system_fingerprint)), content_type="application/json")
    except asyncio.CancelledError:
        # aiohttp cancels the handler when the client disconnects: abort in the engine.
        run.cancel()
        raise
    finally:
        if not run.done.done():
            run.cancel()
        state.request_finished()
