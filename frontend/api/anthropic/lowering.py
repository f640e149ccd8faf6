"""An Anthropic Messages request lowered to what the chat pipeline takes: chat messages for the
template, function tools, a tool choice, template kwargs and `llm` sampling options.

The mapping is vLLM's (`AnthropicServingMessages.to_chat_completion_request`):
- `system` (a string or text blocks) becomes a leading system message;
- text blocks become the message's text, `thinking` blocks its `reasoning`, `tool_use` blocks
  its `tool_calls` (arguments as JSON), `redacted_thinking` blocks are dropped;
- a user's `tool_result` blocks become `tool` messages (before the rest of that user turn);
- tools become function tools (`input_schema` -> `parameters`); tool_choice `auto` / `any` /
  `tool` / `none` become "auto" / "required" / a named function / "none";
  `disable_parallel_tool_use` turns parallel tool calls off;
- `thinking: disabled` is reasoning effort "none" (thinking off in the template), or the effort
  --anthropic-disabled-thinking-effort gives (`auto`: "low" for a template that refuses "none"
  or renders it like a thinking effort, see thinking_effort.py), `enabled` leaves the
  template's default (thinking on for reasoning models); an effort turns `enable_thinking` on
  unless it is "none" (and the request did not set it);
- `max_tokens`, `stop_sequences`, `temperature`, `top_p`, `top_k` are the sampling options.

- `image` blocks (`base64` and `url` sources) become chat `image_url` parts (a base64 source as
  a `data:` URL), with the message's text blocks as `text` parts around them, in block order;
  images in a user's `tool_result` follow its tool message as a user message of image parts.
  Only when the model takes images (`allow_media`): else a 400 names the block.

Where this differs from vLLM, on purpose:
- a `tool_result` with `is_error: true` reaches the model as "Error: <content>" (vLLM drops the
  flag, so a failed tool looks like a successful one);
- `thinking.budget_tokens` is validated as vLLM does (at least 1024, below max_tokens) but is
  not sent to the engine: vLLM sends it as `thinking_token_budget`, which its own server refuses
  unless the engine was started with a reasoning config, and this frontend's engines are not
  (the reasoning parser runs in the workers). `max_tokens` bounds thinking and answer together.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.llm.sampling import SamplingOptions
from vllm_pyfrontend.api.anthropic.protocol import Block, CountTokensRequest, MessagesRequest

# Claude Code puts a per-request hash in a system block; vLLM drops it (it would defeat the
# prefix cache), and so do we.
_BILLING_HEADER = "x-anthropic-billing-header"
MIN_THINKING_BUDGET = 1024


@dataclass
class LoweredChat:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tool_choice: Any
    parallel_tool_calls: bool
    template_kwargs: dict[str, Any]
    response_format: dict[str, Any] | None = None
    options: SamplingOptions = field(default_factory=SamplingOptions)


def _block_text(block: Block, where: str) -> str:
    if not isinstance(block.text, str):
        raise InvalidRequestError(f"{where}: a text block needs a string `text`.", "messages")
    return block.text


def _system_text(system: str | list[Block] | None) -> str | None:
    if system is None:
        return None
    if isinstance(system, str):
        return system or None
    parts = []
    for i, block in enumerate(system):
        if block.type != "text":
            raise InvalidRequestError(f"system[{i}]: only text blocks are allowed in `system`.", "system")
        text = _block_text(block, f"system[{i}]")
        if text and not text.startswith(_BILLING_HEADER):
            parts.append(text)
    return "".join(parts) or None


def image_part(source: Any, where: str) -> dict[str, Any]:
    """An Anthropic image source as a chat `image_url` part (vLLM's
    `_convert_image_source_to_url`: a base64 source becomes a data URL)."""
    if not isinstance(source, dict):
        raise InvalidRequestError(f"{where}: an image block needs a `source` object.", "messages")
    kind = source.get("type")
    if kind == "url":
        url = source.get("url")
        if not isinstance(url, str) or not url:
            raise InvalidRequestError(f"{where}: an image source of type 'url' needs a string `url`.", "messages")
    elif kind == "base64":
        data, media_type = source.get("data"), source.get("media_type") or "image/jpeg"
        if not isinstance(data, str) or not data:
            raise InvalidRequestError(f"{where}: an image source of type 'base64' needs string `data`.", "messages")
        if not isinstance(media_type, str) or not media_type.startswith("image/"):
            raise InvalidRequestError(f"{where}: the image's media_type must be an image type, got {media_type!r}.",
                                      "messages")
        url = f"data:{media_type};base64,{data}"
    else:
        raise InvalidRequestError(f"{where}: image source type {kind!r} is not supported (base64 and url are).",
                                  "messages")
    return {"type": "image_url", "image_url": {"url": url}}


def _no_media(where: str, what: str = "images are") -> InvalidRequestError:
    return InvalidRequestError(f"{where}: {what} not supported by this text-only model.", "messages")


def _tool_result_text(block: Block, where: str, images: list[dict[str, Any]] | None = None) -> str:
    content = block.content
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        texts = []
        for j, item in enumerate(content):
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "text" and isinstance(item.get("text"), str):
                texts.append(item["text"])
            elif kind == "image":
                if images is None:
                    raise _no_media(f"{where}.content[{j}]")
                images.append(image_part(item.get("source"), f"{where}.content[{j}]"))
            else:
                raise InvalidRequestError(f"{where}.content[{j}]: content of type {kind!r} is not supported.",
                                          "messages")
        text = "\n".join(texts)
    if block.is_error:
        text = f"Error: {text}" if text else "Error"
    return text


def _lower_messages(req: MessagesRequest | CountTokensRequest, allow_media: bool = False) -> list[dict[str, Any]]:
    if not req.messages:
        raise InvalidRequestError("`messages` must contain at least one message.", "messages")
    out: list[dict[str, Any]] = []
    system = _system_text(req.system)
    if system is not None:
        out.append({"role": "system", "content": system})
    for i, msg in enumerate(req.messages):
        where = f"messages[{i}]"
        if isinstance(msg.content, str):
            out.append({"role": msg.role, "content": msg.content})
            continue
        texts: list[str] = []
        parts: list[dict[str, Any]] = []  # text and image parts in block order (images only)
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(msg.content):
            at = f"{where}.content[{j}]"
            kind = block.type
            if kind == "text":
                text = _block_text(block, at)
                if text and not (msg.role == "system" and text.startswith(_BILLING_HEADER)):
                    texts.append(text)
                    parts.append({"type": "text", "text": text})
            elif kind == "thinking":
                if msg.role != "assistant":
                    raise InvalidRequestError(f"{at}: thinking blocks belong to assistant messages.", "messages")
                if block.thinking is not None:
                    reasoning.append(block.thinking)
            elif kind == "redacted_thinking":
                pass  # opaque (encrypted) reasoning: accepted when echoed back, never shown to the model
            elif kind == "tool_use":
                if msg.role != "assistant":
                    raise InvalidRequestError(f"{at}: tool_use blocks belong to assistant messages.", "messages")
                if not block.id or not block.name:
                    raise InvalidRequestError(f"{at}: a tool_use block needs `id` and `name`.", "messages")
                calls.append({"id": block.id, "type": "function",
                              "function": {"name": block.name, "arguments": json.dumps(block.input or {})}})
            elif kind == "tool_result":
                if msg.role == "user":
                    if not block.tool_use_id:
                        raise InvalidRequestError(f"{at}: a tool_result block needs `tool_use_id`.", "messages")
                    images: list[dict[str, Any]] | None = [] if allow_media else None
                    out.append({"role": "tool", "tool_call_id": block.tool_use_id,
                                "content": _tool_result_text(block, at, images)})
                    if images:  # vLLM: the tool result's images follow as a user message
                        out.append({"role": "user", "content": images})
                else:  # vLLM: a tool result in an assistant turn is shown as text
                    text = f"Tool result: {_tool_result_text(block, at)}"
                    texts.append(text)
                    parts.append({"type": "text", "text": text})
            elif kind == "image" and allow_media:
                parts.append(image_part(block.source, at))
            elif kind in ("image", "document"):
                raise _no_media(at, f"{kind} blocks are")
            else:
                raise InvalidRequestError(f"{at}: content block type {kind!r} is not supported.", "messages")
        m: dict[str, Any] = {"role": msg.role}
        if len(parts) > len(texts):  # images: the content is the list of parts, as vLLM's
            m["content"] = parts
        elif texts:
            m["content"] = "\n".join(texts)
        if reasoning:
            m["reasoning"] = "".join(reasoning)
        if calls:
            m["tool_calls"] = calls
        if "content" in m:
            out.append(m)
        elif msg.role == "assistant" and (reasoning or calls):
            m["content"] = None
            out.append(m)
        # else: a user turn made only of tool results (now tool messages), or an empty turn
    return out


def _lower_tools(req: MessagesRequest | CountTokensRequest) -> tuple[list[dict[str, Any]] | None, Any, bool]:
    tools = None
    if req.tools is not None:
        tools = []
        for i, tool in enumerate(req.tools):
            if tool.type not in (None, "custom"):
                raise InvalidRequestError(f"tools[{i}]: server tools ({tool.type!r}) are not supported.", "tools")
            schema = dict(tool.input_schema)
            schema.setdefault("type", "object")
            fn: dict[str, Any] = {"name": tool.name, "description": tool.description, "parameters": schema}
            tools.append({"type": "function", "function": fn})
    choice: Any = None
    parallel = True
    tc = req.tool_choice
    if tc is not None:
        parallel = not tc.disable_parallel_tool_use
        if tc.type == "tool":
            if not tc.name:
                raise InvalidRequestError("tool_choice.name is required when type is 'tool'.", "tool_choice")
            choice = {"type": "function", "function": {"name": tc.name}}
        else:
            choice = {"auto": "auto", "any": "required", "none": "none"}[tc.type]
    if tools is not None and choice is None:
        choice = "auto"
    return tools, choice, parallel


def lower_request(req: MessagesRequest | CountTokensRequest, allow_media: bool = False,
                  disabled_thinking_effort: str = "none") -> LoweredChat:
    """Messages, tools, tool choice and template kwargs (and, for a Messages request, the
    sampling options): what the chat pipeline renders and submits. `allow_media`: the model
    takes images (image blocks become `image_url` parts; else they are refused).
    `disabled_thinking_effort`: the reasoning effort of `thinking: disabled`
    (--anthropic-disabled-thinking-effort, resolved: api/anthropic/thinking_effort.py)."""
    messages = _lower_messages(req, allow_media)
    tools, tool_choice, parallel = _lower_tools(req)
    kwargs = dict(req.chat_template_kwargs or {})
    response_format = None
    effort = None
    oc = req.output_config
    if oc is not None:
        if oc.format is not None and oc.format.schema is not None:
            response_format = {"type": "json_schema", "json_schema": {"name": "json_schema", "schema": oc.format.schema}}
        if oc.effort is not None:
            effort = oc.effort
    thinking = req.thinking
    if thinking is not None and thinking.type == "disabled":
        effort = disabled_thinking_effort  # (after output_config's, which it overrides: vLLM)
    if effort is not None:
        # vLLM's reasoning_effort: to the template, and thinking on unless it is "none" (a
        # request's own enable_thinking wins).
        kwargs["reasoning_effort"] = effort
        kwargs.setdefault("enable_thinking", effort != "none")
    if thinking is not None:
        if thinking.type == "enabled":
            budget = thinking.budget_tokens
            if budget is None:
                raise InvalidRequestError("thinking.budget_tokens is required when thinking is enabled.",
                                          "thinking.budget_tokens")
            if budget < MIN_THINKING_BUDGET:
                raise InvalidRequestError(f"thinking.budget_tokens must be at least {MIN_THINKING_BUDGET}, "
                                          f"got {budget}.", "thinking.budget_tokens")
            if isinstance(req, MessagesRequest) and budget >= req.max_tokens:
                raise InvalidRequestError("thinking.budget_tokens must be less than max_tokens.",
                                          "thinking.budget_tokens")
    lowered = LoweredChat(messages, tools, tool_choice, parallel, kwargs, response_format)
    if isinstance(req, MessagesRequest):
        if req.max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be at least 1, got {req.max_tokens}.", "max_tokens")
        extra = dict(req.vllm_xargs) if req.vllm_xargs else {}
        if req.kv_transfer_params:
            extra["kv_transfer_params"] = req.kv_transfer_params
        lowered.options = SamplingOptions(
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            stop=[s for s in (req.stop_sequences or []) if s],
            extra_args=extra or None,
        )
    return lowered
