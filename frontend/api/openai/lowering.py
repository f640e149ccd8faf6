"""OpenAI's chat completion and completion bodies converted into the requests every API style
lowers (`serving/lowering`): the checks of OpenAI's own fields, in vLLM's order, then the typed
request, built positionally in its field order (35 keyword arguments cost more than the checks).
"""

from __future__ import annotations

from typing import Any

from vllm_pyfrontend.api.openai.schemas import ChatCompletionRequest, CompletionRequest
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.lowering.chat import ChatRequest
from vllm_pyfrontend.serving.lowering.completion import TextCompletionRequest
from vllm_pyfrontend.serving.lowering.options import options_from, stream_flags
from vllm_pyfrontend.serving.request_checks import check_openai_request


def chat_request_from_openai(state, req: ChatCompletionRequest, lora: list[Any] | None = None, *,
                             render: bool = False) -> ChatRequest:
    """OpenAI's chat body as a `ChatRequest`, after the checks of its own fields (vLLM's order).
    The render route (`render=True`) writes the sampled request with a text prompt, as vLLM's
    render does: no beam search, no media, and `top_logprobs=-1` (vLLM: every token) passes."""
    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(req, name)
        if value is not None and value < 1:
            raise APIError(400, f"{name} must be at least 1, got {value}.", name)
    if req.logprob_token_ids and req.use_beam_search:
        raise APIError(400, "`logprob_token_ids` is not supported with beam search.", "logprob_token_ids")
    if req.logprob_token_ids and not req.logprobs:
        raise APIError(400, "when using `logprob_token_ids`, `logprobs` must be set to true.", "logprob_token_ids")
    if not render and req.top_logprobs is not None and req.top_logprobs < -1:
        raise APIError(400, "`top_logprobs` must be a positive value or -1.", "top_logprobs")
    if req.top_logprobs and not req.logprobs:
        raise APIError(400, "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
    if req.chat_template is not None and not state.trust_request_chat_template:
        raise APIError(
            400,
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template.",
            "chat_template",
        )
    check_request_mm_kwargs(req.mm_processor_kwargs, req.media_io_kwargs, state.config.policy.trust_request_mm_kwargs)
    completion_tokens = req.max_completion_tokens is not None
    check_openai_request(req, state.max_model_len,
                         max_tokens_param="max_completion_tokens" if completion_tokens else "max_tokens")
    stream, include_usage, continuous = stream_flags(req, state.config.policy.enable_force_include_usage)
    return ChatRequest(  # positional, in field order (see the class)
        req.messages,
        options_from(req, req.max_completion_tokens if completion_tokens else req.max_tokens, with_logit_bias=False),
        req.tools,
        req.tool_choice,
        req.parallel_tool_calls,
        req.response_format,
        req.structured_outputs,
        req.logit_bias,
        req.chat_template_kwargs,
        req.reasoning_effort,
        req.add_generation_prompt,
        req.continue_final_message,
        req.documents,
        req.chat_template,
        False,  # messages_normalized
        not render,  # allow_media
        req.mm_processor_kwargs,
        req.n,
        bool(req.logprobs),
        req.top_logprobs,
        req.prompt_logprobs,
        bool(req.echo),
        req.truncate_prompt_tokens,
        req.bad_words,
        req.include_reasoning,
        bool(req.return_token_ids),
        stream,
        include_usage,
        continuous,
        req.priority,
        req.cache_salt,
        lora,
        req.request_id,
        bool(req.use_beam_search) and not render,
        req.length_penalty,
        bool(req.return_tokens_as_token_ids),
        req.logprob_token_ids,
        req.truncation_side,
        req.media_io_kwargs,
        req.stream_interval,
    )


def check_request_mm_kwargs(mm_processor_kwargs: dict | None, media_io_kwargs: dict | None, trusted: bool) -> None:
    """vLLM refuses a request's own multimodal kwargs unless the server trusts its clients
    (`--trust-request-mm-kwargs`): they change preprocessing and loading costs."""
    if trusted:
        return
    if mm_processor_kwargs:
        raise APIError(400, "Per-request mm_processor_kwargs are disabled by default because they can change "
                       "multimodal preprocessing resource usage. Start the server with --trust-request-mm-kwargs "
                       "only when clients are trusted.", "mm_processor_kwargs")
    if media_io_kwargs:
        raise APIError(400, "Per-request media_io_kwargs are disabled by default because they can change "
                       "multimodal media loading resource usage. Start the server with --trust-request-mm-kwargs "
                       "only when clients are trusted.", "media_io_kwargs")


def completion_request_from_openai(state, req: CompletionRequest, lora: list[Any] | None = None, *,
                                   render: bool = False) -> TextCompletionRequest:
    """OpenAI's completion body as a `TextCompletionRequest`, after the checks of its own fields
    (vLLM's order). The render route (`render=True`) writes the sampled request as vLLM's render
    does: `best_of` and beam search are not its concern, and `logprobs=-1` (vLLM: every token)
    passes."""
    if req.suffix is not None:
        raise APIError(400, "suffix is not currently supported", "suffix")
    if not render and req.best_of is not None and req.best_of != req.n:
        raise APIError(400, "best_of is not supported; use n.", "best_of")
    if req.max_tokens is not None and req.max_tokens < 1:
        raise APIError(400, f"max_tokens must be at least 1, got {req.max_tokens}.", "max_tokens")
    if req.logprob_token_ids and req.use_beam_search:
        raise APIError(400, "`logprob_token_ids` is not supported with beam search.", "logprob_token_ids")
    if req.logprob_token_ids and req.logprobs is None:
        raise APIError(400, "when using `logprob_token_ids`, `logprobs` must be set.", "logprob_token_ids")
    if not render and req.logprobs is not None and req.logprobs < -1:
        raise APIError(400, "`logprobs` must be a positive value or -1.", "logprobs")
    check_openai_request(req, state.max_model_len)
    stream, include_usage, continuous = stream_flags(req, state.config.policy.enable_force_include_usage)
    return TextCompletionRequest(  # positional, in field order (see the class)
        req.prompt,
        options_from(req, req.max_tokens, with_logit_bias=False),
        req.logit_bias,
        req.add_special_tokens,
        req.n,
        req.logprobs,
        req.prompt_logprobs,
        bool(req.echo),
        req.truncate_prompt_tokens,
        req.bad_words,
        req.structured_outputs,
        req.response_format,
        bool(req.return_token_ids),
        stream,
        include_usage,
        continuous,
        req.priority,
        req.cache_salt,
        lora,
        req.request_id,
        bool(req.use_beam_search) and not render,
        req.length_penalty,
        bool(req.return_tokens_as_token_ids),
        req.logprob_token_ids,
        req.truncation_side,
        req.stream_interval,
    )
