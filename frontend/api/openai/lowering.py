"""OpenAI's chat completion and completion bodies converted into the requests every API style
lowers (`serving/lowering`): the checks of OpenAI's own fields, in vLLM's order, then the typed
request, built by keyword; the `GenerationRequest` fields both bodies name alike are read by one
function (`_generation_fields`).
"""

from __future__ import annotations

from typing import Any

from vllm_pyfrontend.api.openai.schemas import ChatCompletionRequest, CompletionRequest
from vllm_pyfrontend.errors import APIError, validation_error
from vllm_pyfrontend.serving.bodies import decode_body
from vllm_pyfrontend.serving.lora import lora_request_for
from vllm_pyfrontend.serving.lowering.chat import ChatRequest
from vllm_pyfrontend.serving.lowering.completion import TextCompletionRequest
from vllm_pyfrontend.serving.lowering.options import options_from, stream_flags
from vllm_pyfrontend.serving.request_checks import check_openai_request


def openai_request(state, scope, body: bytes, schema: type, convert) -> tuple[str, list[Any] | None, Any]:
    """What a chat or completion endpoint starts with: the body decoded (`schema`), the model
    and its LoRA adapter, the worker and engine able to generate, then `convert(state, req,
    lora)`: (model, lora, the typed request)."""
    req = decode_body(body, schema, lax=True)
    model = state.check_model(req.model)
    lora = lora_request_for(state, model)
    state.check_generation()
    scope.check_engine()
    return model, lora, convert(state, req, lora)


def chat_request_from_openai(state, req: ChatCompletionRequest, lora: list[Any] | None = None, *,
                             render: bool = False) -> ChatRequest:
    """OpenAI's chat body as a `ChatRequest`, after the checks of its own fields (vLLM's order).
    The render route (`render=True`) writes the sampled request with a text prompt, as vLLM's
    render does: no beam search, no media, and `top_logprobs=-1` (vLLM: every token) passes."""
    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(req, name)
        if value is not None and value < 1:  # (vLLM's SamplingParams: either is its `max_tokens`)
            raise validation_error(f"max_tokens must be at least 1, got {value}.", "max_tokens", value)
    # (the body's own validators, vLLM's pydantic ones, ran when it was decoded: schemas.py)
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
    shared = _generation_fields(state, req, lora, render)
    return ChatRequest(
        messages=req.messages,
        options=options_from(req, req.max_completion_tokens if completion_tokens else req.max_tokens,
                             with_logit_bias=False),
        tools=req.tools,
        tool_choice=req.tool_choice,
        parallel_tool_calls=req.parallel_tool_calls,
        chat_template_kwargs=req.chat_template_kwargs,
        reasoning_effort=req.reasoning_effort,
        add_generation_prompt=req.add_generation_prompt,
        continue_final_message=req.continue_final_message,
        documents=req.documents,
        chat_template=req.chat_template,
        messages_normalized=False,
        allow_media=not render,
        mm_processor_kwargs=req.mm_processor_kwargs,
        media_io_kwargs=req.media_io_kwargs,
        logprobs=bool(req.logprobs),
        top_logprobs=req.top_logprobs,
        include_reasoning=req.include_reasoning,
        **shared,
    )


def _generation_fields(state, req: ChatCompletionRequest | CompletionRequest, lora: list[Any] | None,
                       render: bool) -> dict[str, Any]:
    """The `GenerationRequest` fields (but `options`) of OpenAI's chat or completion body, which
    name them alike; the stream options checked (`stream_flags`)."""
    stream, include_usage, continuous = stream_flags(req, state.config.policy.enable_force_include_usage)
    return {
        "logit_bias": req.logit_bias,
        "response_format": req.response_format,
        "structured_outputs": req.structured_outputs,
        "n": req.n,
        "prompt_logprobs": req.prompt_logprobs,
        "echo": bool(req.echo),
        "truncate_prompt_tokens": req.truncate_prompt_tokens,
        "bad_words": req.bad_words,
        "return_token_ids": bool(req.return_token_ids),
        "stream": stream,
        "include_usage": include_usage,
        "continuous_usage": continuous,
        "priority": req.priority,
        "cache_salt": req.cache_salt,
        "lora": lora,
        "request_id": req.request_id,
        "use_beam_search": bool(req.use_beam_search) and not render,
        "length_penalty": req.length_penalty,
        "return_tokens_as_token_ids": bool(req.return_tokens_as_token_ids),
        "logprob_token_ids": req.logprob_token_ids,
        "truncation_side": req.truncation_side,
        "stream_interval": req.stream_interval,
    }


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


def _refuse_prompt_embeds(state, req: CompletionRequest) -> None:
    """`prompt_embeds` (vLLM's checks, in its order): not with echo or prompt logprobs (even an
    empty list), and each embedding only with the engine's --enable-prompt-embeds. This frontend
    sends the engine no embeddings, so with the flag on they are refused too."""
    if req.echo:
        raise APIError(400, "Echo is unsupported with prompt embeds.")
    if req.prompt_logprobs is not None:
        raise APIError(400, "prompt_logprobs is not compatible with prompt embeds.")
    if req.prompt_embeds == []:
        return  # nothing to load: the prompt alone
    enabled = False
    for arg in state.config.engine_args:
        if arg in ("--enable-prompt-embeds", "--no-enable-prompt-embeds"):
            enabled = arg == "--enable-prompt-embeds"
    if not enabled:
        raise APIError(400, "You must set `--enable-prompt-embeds` to input `prompt_embeds`. "
                       "(parameter=prompt_embeds)", "prompt_embeds")
    raise APIError(400, "prompt_embeds are not supported by this frontend.", "prompt_embeds")


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
        raise validation_error(f"max_tokens must be at least 1, got {req.max_tokens}.", "max_tokens", req.max_tokens)
    check_openai_request(req, state.max_model_len)
    if req.prompt_embeds is not None:
        _refuse_prompt_embeds(state, req)
    shared = _generation_fields(state, req, lora, render)
    return TextCompletionRequest(
        prompt=req.prompt,
        options=options_from(req, req.max_tokens, with_logit_bias=False),
        add_special_tokens=req.add_special_tokens,
        logprobs=req.logprobs,
        **shared,
    )
