"""The `POST /v1/responses` body, as vLLM's `ResponsesRequest` accepts it (msgspec, strict
types). Input items, tools and formats stay free-form here and are checked by `lowering.py`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


class ResponsesRequest(msgspec.Struct, omit_defaults=True):
    input: str | list[dict[str, Any]]
    model: str | None = None
    instructions: str | None = None
    background: bool | None = False
    include: list[str] | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool | None = True
    previous_response_id: str | None = None
    prompt: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    include_reasoning: bool = True
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] = "auto"
    store: bool | None = True
    stream: bool | None = False
    temperature: float | None = None
    text: dict[str, Any] | None = None
    tool_choice: Any = "auto"
    tools: list[dict[str, Any]] | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = 0
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    truncation: Literal["auto", "disabled"] | None = "disabled"
    user: str | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    presence_penalty: Annotated[float, Meta(ge=-2.0, le=2.0)] | None = None
    frequency_penalty: Annotated[float, Meta(ge=-2.0, le=2.0)] | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    seed: Annotated[int, Meta(ge=_INT64_MIN, le=_INT64_MAX)] | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    request_id: str | None = None
    priority: int = 0
    cache_salt: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None
    kv_transfer_params: dict[str, Any] | None = None
