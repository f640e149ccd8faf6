"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the chat
pipeline.

A Messages request is lowered to chat messages, tools and sampling options (`lowering.py`),
rendered with the chat template and tokenized like a chat completion, submitted through
`frontend/llm`, and its assistant events (reasoning, content, tool calls) are formatted as
Anthropic content blocks or stream events (`formatter.py`). Every error on these routes has
Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`) with the same status
codes as the OpenAI routes: `anthropic_error_middleware` reshapes whatever the inner layers
answered (authentication, unknown method, request validation, engine unavailable).
"""

from __future__ import annotations

import time
import uuid

import msgspec
from aiohttp import web

from vllm_pyfrontend.chat.tools import ToolChoiceError, plan_tools
from vllm_pyfrontend.llm.sampling import lower_choices
from vllm_pyfrontend.llm.structured import forced_json, lower_structured_outputs
from vllm_pyfrontend.multimodal.chat import media_messages, with_media
from vllm_pyfrontend.server.anthropic.formatter import AnthropicFormatter, AnthropicRun, AnthropicSSE
from vllm_pyfrontend.server.anthropic.lowering import LoweredChat, lower_request
from vllm_pyfrontend.server.anthropic.protocol import (
    CountTokensRequest,
    MessagesRequest,
    error_body,
)
from vllm_pyfrontend.server.errors import APIError
from vllm_pyfrontend.server.responder import new_choice, respond, submit_choices
from vllm_pyfrontend.server.schemas import decode_body  # msgspec decoding, any request struct

PREFIX = "/v1/messages"
_json = msgspec.json.encode


def accepts_media(state) -> bool:
    """Whether the served model takes images (the worker's multimodal processing is set up)."""
    return getattr(state, "multimodal", None) is not None


def _prompt_ids(state, lowered: LoweredChat) -> list[int]:
    return state.render_and_tokenize(
        lowered.messages, tools=lowered.tools, documents=None, add_generation_prompt=True,
        continue_final_message=False, chat_template_kwargs=lowered.template_kwargs,
    )


def _plan(state, lowered: LoweredChat):
    try:
        return plan_tools(lowered.tools, lowered.tool_choice, parallel_tool_calls=lowered.parallel_tool_calls,
                          auto_enabled=state.config.policy.enable_auto_tool_choice,
                          has_parser=state.parsers.tool_parser is not None)
    except ToolChoiceError as e:
        raise APIError(400, e.message, e.param) from None


async def handle_messages(request: web.Request) -> web.StreamResponse:
    state = request.app["state"]
    body = await state.read_body(request)
    req: MessagesRequest = decode_body(body, MessagesRequest)
    model = state.check_model(req.model)
    state.check_generation()
    state.check_engine()
    lowered = lower_request(req, allow_media=accepts_media(state))
    lowered.messages, media = await media_messages(state, lowered.messages)  # image blocks
    plan = _plan(state, lowered)
    prompt_ids, mm = await with_media(state, media, _prompt_ids(state, lowered))
    opts = lowered.options
    if state.parsers.uses_parsers(plan):
        opts.skip_special_tokens = False  # markers may be special tokens: the parsers see them as text
    structured = lower_structured_outputs(None, lowered.response_format)
    if plan.schema is not None:  # tool_choice any / tool: the engine's structured outputs force the call
        structured = {**(structured or {}), **forced_json(plan.schema)}
    (sampling,) = lower_choices(state.limits, opts, len(prompt_ids), 1, structured=structured)

    message_id = f"msg_{uuid.uuid4().hex[:24]}"
    formatter = AnthropicFormatter(message_id, model)
    stream = bool(req.stream)
    run = AnthropicRun(
        response_id=message_id,
        model=model,
        created=int(time.time()),
        choices=[new_choice(state, 0, prompt_ids, opts, state.parsers.new_assistant_stream(
            plan, prompt_ids, lowered.template_kwargs, lowered.tools))],
        num_prompt_tokens=len(prompt_ids),
        stream=stream,
        include_usage=False,  # usage goes out with message_delta
        continuous_usage=False,
        formatter=formatter,
    )
    run.parallel_tool_calls = plan.parallel
    run.named_tool_choice = plan.mode == "named"
    if stream:
        sse = AnthropicSSE()
        sse.write(formatter.message_start(len(prompt_ids)))  # held until the headers are out
        run.sse = sse
    sub = submit_choices(state, request, run, [(run.choices[0], prompt_ids, sampling)],
                         priority=0, cache_salt=req.cache_salt, multimodal=mm)
    return await respond(state, request, run, sub, role_chunks=False)


async def handle_count_tokens(request: web.Request) -> web.Response:
    state = request.app["state"]
    body = await state.read_body(request)
    req: CountTokensRequest = decode_body(body, CountTokensRequest)
    state.check_model(req.model)
    lowered = lower_request(req, allow_media=accepts_media(state))
    lowered.messages, media = await media_messages(state, lowered.messages)
    _plan(state, lowered)
    prompt_ids, _ = await with_media(state, media, _prompt_ids(state, lowered))
    n = len(prompt_ids)
    # vLLM also reports the count before any context management (none here: the same number).
    return web.Response(body=_json({"input_tokens": n, "context_management": {"original_input_tokens": n}}),
                        content_type="application/json")


def _anthropic_shape(response: web.Response) -> web.Response:
    """An OpenAI-shaped error answer of an inner layer, reshaped (same status and headers)."""
    message = response.reason or "error"
    try:
        err = msgspec.json.decode(response.body)["error"]
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            message = err["message"]
        elif isinstance(err, str):
            message = err
    except Exception:  # noqa: BLE001 - not JSON (aiohttp's own text answers): keep the reason
        if isinstance(response.body, bytes) and response.body:
            message = response.body.decode("utf-8", "replace")
    out = web.Response(status=response.status, body=_json(error_body(response.status, message)),
                       content_type="application/json")
    for name, value in response.headers.items():
        if name.lower() not in ("content-type", "content-length"):
            out.headers[name] = value
    return out


@web.middleware
async def anthropic_error_middleware(request: web.Request, handler):
    """Outermost: every error answer on the /v1/messages routes in Anthropic's shape."""
    if not request.path.startswith(PREFIX):
        return await handler(request)
    try:
        resp = await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return web.Response(status=e.status, body=_json(error_body(e.status, e.text or e.reason)),
                            content_type="application/json")
    if resp.status >= 400 and isinstance(resp, web.Response) and not resp.prepared:
        ctype = resp.content_type or ""
        if ctype == "application/json" or ctype.startswith("text/"):
            return _anthropic_shape(resp)
    return resp


def add_anthropic_routes(app: web.Application) -> None:
    """The Messages routes, and the middleware that gives their errors Anthropic's shape."""
    app.middlewares.insert(0, anthropic_error_middleware)
    app.router.add_post(PREFIX, handle_messages)
    app.router.add_post(PREFIX + "/count_tokens", handle_count_tokens)
