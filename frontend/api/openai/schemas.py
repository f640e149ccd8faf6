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

from vllm_pyfrontend.errors import APIError, InvalidRequestError, validation_error
from vllm_pyfrontend.llm import limits

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
    cache_salt: Any = None  # vLLM checks it before its type (`check_cache_salt_support`)
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

    def __post_init__(self) -> None:
        # vLLM's "before" validators of the body (its answer comes before the model's 404)
        _check_chat_body(self)


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
    cache_salt: Any = None  # vLLM checks it before its type (`check_cache_salt_support`)
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
        # fails to decode, decode_body asks `check_before_fields`); then its other body checks.
        _check_prompt_given(self.prompt, self.prompt_embeds)
        _check_completion_body(self)

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


# -- vLLM's body validators ---------------------------------------------------------------------
# vLLM's chat and completion request models check these fields in "before" model validators, which
# pydantic runs last-defined first, before the fields' own validation; each raises a
# VLLMValidationError, whose text ends in ` (parameter=..., value=...)` (`errors.validation_error`).
# Raised as APIError from `__post_init__` (msgspec would take a ValueError for its own).
_CORRECT_TOOL_CHOICE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'


def _check_chat_body(req: ChatCompletionRequest) -> None:
    """`ChatCompletionRequest`'s validators in vLLM's order: check_generation_prompt,
    check_tool_usage, check_structured_outputs_count, check_logprobs, validate_stream_options,
    validate_response_format, check_cache_salt_support."""
    if req.continue_final_message and req.add_generation_prompt:
        raise APIError(400, "Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    tool_choice = _check_tool_usage(req.tools, req.tool_choice)
    so = req.structured_outputs
    if so is not None:
        count = sum(so.get(k) is not None for k in ("json", "regex", "choice"))
        if count > 1:  # (no parameter named, unlike the completion body's)
            raise APIError(400, "You can only use one kind of constraints for structured outputs "
                           "('json', 'regex' or 'choice').")
        if count > 0 and tool_choice not in ("none", "auto", "required"):
            raise APIError(400, "You can only either use constraints for structured outputs or tools, not both.")
    if req.logprob_token_ids and req.use_beam_search:
        raise validation_error("`logprob_token_ids` is not supported with beam search.", "logprob_token_ids")
    if req.logprob_token_ids and not req.logprobs:
        raise validation_error("when using `logprob_token_ids`, `logprobs` must be set to true.", "logprob_token_ids")
    _check_prompt_logprobs(req.prompt_logprobs, req.stream)
    top = req.top_logprobs
    if top is not None:
        if top < 0 and top != -1:
            raise validation_error("`top_logprobs` must be a positive value or -1.", "top_logprobs", top)
        if (top == -1 or top > 0) and not req.logprobs:
            raise validation_error("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
    _check_stream_options_and_format(req)


def _check_completion_body(req: CompletionRequest) -> None:
    """`CompletionRequest`'s validators in vLLM's order (after the prompt's): validate_stream_options,
    check_logprobs, check_structured_outputs_count, validate_response_format,
    check_cache_salt_support."""
    if req.stream_options is not None and not req.stream and req.stream_options.given():
        raise validation_error("Stream options can only be defined when `stream=True`.", "stream_options")
    if req.logprob_token_ids and req.use_beam_search:
        raise validation_error("`logprob_token_ids` is not supported with beam search.", "logprob_token_ids")
    if req.use_beam_search and req.echo and req.logprobs is not None:
        raise validation_error("`echo` with `logprobs` is not supported with beam search because beam search does "
                               "not compute prompt logprobs.", "echo")
    if req.logprob_token_ids and req.echo and req.max_tokens == 0:
        raise validation_error("`logprob_token_ids` is not supported when `echo=True` and `max_tokens=0` because no "
                               "output tokens are generated.", "logprob_token_ids")
    if req.logprob_token_ids and req.logprobs is None:
        raise validation_error("when using `logprob_token_ids`, `logprobs` must be set.", "logprob_token_ids")
    _check_prompt_logprobs(req.prompt_logprobs, req.stream)
    if req.logprobs is not None and req.logprobs < 0 and req.logprobs != -1:
        raise validation_error("`logprobs` must be a positive value or -1.", "logprobs", req.logprobs)
    so = req.structured_outputs
    if so is not None and sum(so.get(k) is not None for k in ("json", "regex", "choice")) > 1:
        raise validation_error("You can only use one kind of constraints for structured outputs "
                               "('json', 'regex' or 'choice').", "structured_outputs")
    _check_stream_options_and_format(req, stream_options=False)


def _check_tool_usage(tools: list[dict[str, Any]] | None, tool_choice: Any) -> Any:
    """vLLM's `check_tool_usage`; the tool choice in effect ("auto" when tools are given
    without one)."""
    if tools == []:
        raise validation_error("`tools` must not be an empty array. Either provide at least one tool or omit the "
                               "field entirely.", "tools")
    if tool_choice is None:  # (not given: vLLM's default is "auto" with tools, else "none")
        return "auto" if tools else "none"
    if tool_choice == "none":
        return tool_choice
    if tools is None:
        raise validation_error("When using `tool_choice`, `tools` must be set.", "tool_choice")
    if tool_choice not in ("auto", "required") and not isinstance(tool_choice, dict):
        raise validation_error(f"Invalid value for `tool_choice`: {tool_choice}! Only named tools, \"none\", "
                               f"\"auto\" or \"required\" are supported.", "tool_choice")
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        if not isinstance(function, dict):
            raise validation_error(f"Invalid value for `function`: `{function}` in `tool_choice`! "
                                   f"{_CORRECT_TOOL_CHOICE}", "tool_choice.function")
        if "name" not in function:
            raise validation_error(f"Expected field `name` in `function` in `tool_choice`! {_CORRECT_TOOL_CHOICE}",
                                   "tool_choice.function.name")
        name = function["name"]
        if not isinstance(name, str) or not name:
            raise validation_error(f"Invalid `name` in `function`: `{name}` in `tool_choice`! "
                                   f"{_CORRECT_TOOL_CHOICE}", "tool_choice.function.name")
        if not any(isinstance(t, dict) and isinstance(t.get("function"), dict) and t["function"].get("name") == name
                   for t in tools):
            raise validation_error("The tool specified in `tool_choice` does not match any of the specified `tools`",
                                   "tool_choice")
    return tool_choice


def _check_prompt_logprobs(value: int | None, stream: bool | None) -> None:
    if value is None:
        return
    if stream and (value > 0 or value == -1):
        raise validation_error("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
    if value < 0 and value != -1:
        raise validation_error("`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs", value)


def _check_stream_options_and_format(req: Any, stream_options: bool = True) -> None:
    """validate_stream_options (chat: here), validate_response_format, check_cache_salt_support."""
    if stream_options and req.stream_options is not None and not req.stream and req.stream_options.given():
        raise validation_error("Stream options can only be defined when `stream=True`.", "stream_options")
    rf = req.response_format
    if isinstance(rf, dict) and rf.get("type") == "json_schema" and rf.get("json_schema") is None:
        raise validation_error("When response_format type is 'json_schema', the 'json_schema' field must be "
                               "provided.", "response_format")
    try:
        limits.check_cache_salt(req.cache_salt)
    except InvalidRequestError as e:
        raise APIError(400, e.message, e.param) from None


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


