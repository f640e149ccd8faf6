"""Request bodies of Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`),
validated by msgspec in one pass, and its error shape.

Fields follow Anthropic's API and vLLM's `vllm/entrypoints/anthropic/protocol.py` (which adds a
few vLLM fields: `vllm_xargs`, `chat_template_kwargs`, `cache_salt`, `kv_transfer_params`).
Unknown fields are ignored, as vLLM's models do.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# Anthropic's error types by HTTP status (https://docs.anthropic.com/en/api/errors).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


class Block(msgspec.Struct, omit_defaults=True):
    """One content block of a message (or of `system`): the union of every block type's
    fields, as vLLM's AnthropicContentBlock; which fields a type needs is checked when the
    request is lowered."""

    type: str
    text: str | None = None
    # tool_use
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    # tool_result
    tool_use_id: str | None = None
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None
    # thinking / redacted_thinking
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    # image (a chat image_url part for a model that takes images; refused for text-only models)
    source: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None


class Message(msgspec.Struct):
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class Tool(msgspec.Struct, omit_defaults=True):
    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    type: str | None = None  # "custom" (client tools) or absent
    cache_control: dict[str, Any] | None = None


class ToolChoice(msgspec.Struct, omit_defaults=True):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(msgspec.Struct, omit_defaults=True):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None
    display: str | None = None


class OutputFormat(msgspec.Struct, omit_defaults=True):
    type: Literal["json_schema"] = "json_schema"
    schema: dict[str, Any] | None = None


class OutputConfig(msgspec.Struct, omit_defaults=True):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormat | None = None


class MessagesRequest(msgspec.Struct, omit_defaults=True):
    model: str
    messages: list[Message]
    max_tokens: int
    system: str | list[Block] | None = None
    metadata: dict[str, Any] | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    # vLLM's additions
    chat_template_kwargs: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None
    cache_salt: str | None = None
    kv_transfer_params: dict[str, Any] | None = None


class CountTokensRequest(msgspec.Struct, omit_defaults=True):
    model: str
    messages: list[Message]
    system: str | list[Block] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    chat_template_kwargs: dict[str, Any] | None = None
