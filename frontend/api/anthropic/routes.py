"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the chat
pipeline.

A Messages request is lowered to chat messages, tools and sampling options (`lowering.py`),
then like a chat completion by the chat lowering (`serving/lowering/chat.py`: template,
tokenizer, media, sampling maps, the run), and its assistant events (reasoning, content, tool
calls) are formatted as Anthropic content blocks or stream events (`formatter.py`). Every error on these routes has
Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`) with the same status
codes as the OpenAI routes: the server frames each error once with `_error_frame`, registered
for the /v1/messages prefix (authentication, unknown method, request validation, engine
unavailable).
"""

from __future__ import annotations

import time
import uuid

import msgspec
from aiohttp import web

from vllm_pyfrontend.api.anthropic.formatter import AnthropicFormatter, AnthropicRun, AnthropicSSE
from vllm_pyfrontend.api.anthropic.lowering import LoweredChat, lower_request
from vllm_pyfrontend.api.anthropic.thinking_effort import disabled_thinking_effort
from vllm_pyfrontend.api.anthropic.protocol import (
    CountTokensRequest,
    MessagesRequest,
    error_body,
)
from vllm_pyfrontend.serving.lowering.chat import ChatRequest, chat_run, lower_chat, lower_chat_prompt, submit_chat
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.responder import ERROR_FRAMES, Answer, answer_run
from vllm_pyfrontend.serving.scope import RequestScope
from vllm_pyfrontend.serving.bodies import decode_body
from vllm_pyfrontend.serving.web_app import http_route
from vllm_pyfrontend.serving.state import STATE

PREFIX = "/v1/messages"
_json = msgspec.json.encode


def accepts_media(state) -> bool:
    """Whether the served model takes images (the worker's multimodal processing is set up)."""
    return state.multimodal.active


def _chat_request(lowered: LoweredChat, req: MessagesRequest | None = None) -> ChatRequest:
    """A lowered Messages (or count_tokens) request as the chat lowering's request: the
    messages are already in the template's shape; one choice, no truncation."""
    return ChatRequest(
        messages=lowered.messages, options=lowered.options, tools=lowered.tools, tool_choice=lowered.tool_choice,
        parallel_tool_calls=lowered.parallel_tool_calls, response_format=lowered.response_format,
        chat_template_kwargs=lowered.template_kwargs, messages_normalized=True,
        stream=bool(req is not None and req.stream), cache_salt=req.cache_salt if req is not None else None,
    )


async def _disabled_effort(state, req: MessagesRequest | CountTokensRequest) -> str:
    """The reasoning effort of `thinking: disabled` (probed once per worker with "auto")."""
    if req.thinking is not None and req.thinking.type == "disabled":
        return await disabled_thinking_effort(state)
    return "none"


async def messages(state, scope: RequestScope, body: bytes) -> Answer:
    """The endpoint: a request body, in its scope, to its answer."""
    req: MessagesRequest = decode_body(body, MessagesRequest)
    model = state.check_model(req.model)
    state.check_generation()
    scope.check_engine()
    chat = _chat_request(lower_request(req, allow_media=accepts_media(state),
                                       disabled_thinking_effort=await _disabled_effort(state, req)), req)
    low = await lower_chat(state, chat)
    prompt_ids = low.prompt.prompt_ids

    message_id = f"msg_{uuid.uuid4().hex[:24]}"
    formatter = AnthropicFormatter(message_id, model, state.config.policy.enable_prompt_tokens_details)
    sse = None
    if chat.stream:
        sse = AnthropicSSE()
        sse.write(formatter.message_start(len(prompt_ids)))  # held until the headers are out
    # usage goes out with message_delta (include_usage stays off)
    run = chat_run(state, chat, low, response_id=message_id, model=model, created=int(time.time()),
                   formatter=formatter, sse=sse, run_class=AnthropicRun)
    if state.output_log is not None:  # vLLM serves Messages through its chat code, which logs them
        state.output_log.attach(run)
    submit_chat(state, scope, chat, low, run)
    return await answer_run(state, run, role_chunks=False)


handle_messages = http_route("messages", messages)


async def handle_count_tokens(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await state.read_body(request)
    req: CountTokensRequest = decode_body(body, CountTokensRequest)
    state.check_model(req.model)
    prompt = await lower_chat_prompt(state, _chat_request(lower_request(
        req, allow_media=accepts_media(state), disabled_thinking_effort=await _disabled_effort(state, req))))
    n = len(prompt.prompt_ids)
    # vLLM also reports the count before any context management (none here: the same number).
    return web.Response(body=_json({"input_tokens": n, "context_management": {"original_input_tokens": n}}),
                        content_type="application/json")


def _error_frame(error: APIError) -> bytes:
    return _json(error_body(error.status, error.message))


def add_anthropic_routes(app: web.Application) -> None:
    """The Messages routes; every error under them (the auth middleware's, the router's, the
    routes') is framed in Anthropic's shape, once."""
    app[ERROR_FRAMES][PREFIX] = _error_frame
    app.router.add_post(PREFIX, handle_messages)
    app.router.add_post(PREFIX + "/count_tokens", handle_count_tokens)
