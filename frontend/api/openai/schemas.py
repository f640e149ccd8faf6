"""Typed request bodies, validated by msgspec in one compiled pass.

Chat and completion bodies are decoded in lax mode (`decode_body(..., lax=True)`): "5" for 5,
"true" for true and 2.0 for 2 are taken, as vLLM's pydantic models take them. Unknown fields are
ignored (vLLM accepts and ignores them). Range checks that need the model (context length,
vocab) happen later.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from vllm_pyfrontend.errors import APIError

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

NonNegInt = Annotated[int, Meta(ge=0)]


class StreamOptions(msgspec.Struct, omit_defaults=True):
    # UNSET when not given: vLLM refuses any non-empty stream_options without `stream`, so
    # `{"include_usage": null}` counts as given.
    include_usage: bool | None | msgspec.UnsetType = msgspec.UNSET
    continuous_usage_stats: bool | None | msgspec.UnsetType = msgspec.UNSET

    def given(self) -> bool:
        return self.include_usage is not msgspec.UNSET or self.continuous_usage_stats is not msgspec.UNSET


class ChatCompletionRequest(msgspec.Struct, omit_defaults=True):
    messages: list[dict[str, Any]]
    model: str | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = 1
    seed: Annotated[int, Meta(ge=_INT64_MIN, le=_INT64_MAX)] | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    min_tokens: int = 0
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None  # frontend/multimodal (vLLM's field)
    media_io_kwargs: dict[str, dict[str, Any]] | None = None  # with --trust-request-mm-kwargs
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "max"] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    documents: list[dict[str, str]] | None = None
    user: str | None = None
    request_id: str | None = None
    priority: int = 0
    cache_salt: str | None = None
    allowed_token_ids: list[int] | None = None
    vllm_xargs: dict[str, Any] | None = None
    echo: bool = False
    return_token_ids: bool | None = None
    bad_words: list[str] | None = None
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    truncate_prompt_tokens: Annotated[int, Meta(ge=-1)] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = True
    include_reasoning: bool = True
    use_beam_search: bool = False
    length_penalty: float = 1.0
    early_stopping: bool = False  # accepted and unused, as by vLLM's online beam search
    prompt_logprobs: int | None = None
    stream_interval: Annotated[int, Meta(ge=1)] | None = None
    return_tokens_as_token_ids: bool | None = None  # logprob tokens as "token_id:N"
    logprob_token_ids: list[int] | None = None  # these ids' logprobs at each position
    truncation_side: Literal["left", "right"] | None = None  # with truncate_prompt_tokens


class CompletionRequest(msgspec.Struct, omit_defaults=True):
    # str | list[str] | list[int] | list[list[int]]: msgspec unions allow one array type, so
    # the shape is checked by lowering.completion.prompts_of.
    prompt: Any = None
    # vLLM's prompt embeddings (base64 torch tensors): this frontend takes none (lowering
    # refuses them), but a request must name a prompt or embeddings, as vLLM checks first.
    prompt_embeds: Any = None
    model: str | None = None
    echo: bool | None = False
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: int | None = None
    max_tokens: int | None = 16
    n: int = 1
    best_of: int | None = None
    seed: Annotated[int, Meta(ge=_INT64_MIN, le=_INT64_MAX)] | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    suffix: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    min_tokens: int = 0
    user: str | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: Annotated[int, Meta(ge=-1)] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    add_special_tokens: bool = True
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    priority: int = 0
    request_id: str | None = None
    cache_salt: str | None = None
    vllm_xargs: dict[str, Any] | None = None
    return_token_ids: bool | None = None
    kv_transfer_params: dict[str, Any] | None = None
    use_beam_search: bool = False
    length_penalty: float = 1.0
    early_stopping: bool = False  # accepted and unused, as by vLLM's online beam search
    prompt_logprobs: int | None = None
    stream_interval: Annotated[int, Meta(ge=1)] | None = None
    return_tokens_as_token_ids: bool | None = None
    logprob_token_ids: list[int] | None = None
    truncation_side: Literal["left", "right"] | None = None

    def __post_init__(self) -> None:
        # vLLM's `validate_prompt_and_prompt_embeds`, a validator that runs before any field's
        # (so its answer comes before the model's 404 and every other check; when another field
        # fails to decode, decode_body asks `check_before_fields`).
        _check_prompt_given(self.prompt, self.prompt_embeds)

    @staticmethod
    def check_before_fields(body: bytes) -> None:
        try:
            given = msgspec.json.decode(body, type=_PromptFields)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return
        _check_prompt_given(given.prompt, given.prompt_embeds)


class _PromptFields(msgspec.Struct):
    prompt: Any = None
    prompt_embeds: Any = None


def _check_prompt_given(prompt: Any, embeds: Any) -> None:
    if (prompt is None or prompt == "") and (embeds is None or embeds == []):
        raise APIError(400, "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
                       "prompt")


class TokenizeRequest(msgspec.Struct, omit_defaults=True):
    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool | None = False
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None


class DetokenizeRequest(msgspec.Struct, omit_defaults=True):
    tokens: list[int]
    model: str | None = None


