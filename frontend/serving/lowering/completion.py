"""A text completion request lowered to prompt ids, engine sampling maps and its `RequestRun`.

`/v1/completions` (and SageMaker's /invocations, through it) and the completion render route
turn OpenAI's body into a `TextCompletionRequest` (`completion_request_from_openai`, with the
checks of its own fields); the lowering is then:

1. `lower_completion_prompts`: the number of choices (or the beam width), prompt logprobs,
   every prompt tokenized (or its token ids checked) and truncated, `logit_bias`. The render
   route stops here and writes each prompt's request out (`api/openai/render_routes.py`).
2. `lower_completion_sampling`: bad words, structured outputs and the engine sampling maps of
   each prompt's choices (or the beam search parameters).
3. `completion_run`: the `RequestRun` (n choices per prompt, the completion formatter's
   options passed to its constructor); `submit_completion` sends its engine requests.

Errors are `APIError` / `InvalidRequestError` (400 with the param), in vLLM's order.
"""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_pyfrontend.chat.assistant import AssistantStream
from vllm_pyfrontend.llm.beam_search import BeamSearchParams, check_beam_width
from vllm_pyfrontend.llm.prompt import bad_words_token_ids, check_prompt_ids, truncate_prompt
from vllm_pyfrontend.llm.sampling import check_n, is_greedy, lower_choices, resolve_max_tokens
from vllm_pyfrontend.llm.structured import lower_structured_outputs
from vllm_pyfrontend.serving.beam_generation import beam_choice
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.formatters import CompletionFormatter, token_id_text
from vllm_pyfrontend.serving.lowering.options import GenerationRequest, check_prompt_logprobs, token_bias
from vllm_pyfrontend.serving.request_pipeline import RequestRun
from vllm_pyfrontend.serving.responder import new_choice, submit_choices

_PROMPT_SHAPES = "`prompt` must be a string, a list of strings, a list of token ids or a list of token-id lists"


class TextCompletionRequest(GenerationRequest):
    """One text completion request (OpenAI's names); `prompt` as sent, shape unchecked. Its own
    fields here, the rest those of `GenerationRequest`. Built by keyword by every style."""

    prompt: Any
    add_special_tokens: bool = True
    logprobs: int | None = None  # per sampled token (None: none)


class CompletionPrompts(msgspec.Struct):
    """Step 1's result: per prompt its token ids (and, with `echo`, its text)."""

    n: int
    prompt_logprobs: int | None
    prompt_ids: list[list[int]]
    echo_texts: list[str]


class LoweredCompletion(msgspec.Struct):
    prompts: CompletionPrompts
    samplings: list[list[dict[str, Any]]]  # per prompt, one map per choice; empty for beam search
    beams: list[BeamSearchParams]  # per prompt, for beam search


def _is_ids(x) -> bool:
    return isinstance(x, list) and all(type(t) is int for t in x)


def prompts_of(prompt: Any) -> list[str | list[int]]:
    """The prompt(s): a string, a list of strings, token ids, or a list of token-id lists."""
    if prompt is None:
        raise APIError(400, "`prompt` is required.", "prompt")
    if isinstance(prompt, str):
        return [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise APIError(400, _PROMPT_SHAPES + ", and not empty.", "prompt")
    if _is_ids(prompt):
        return [prompt]
    if all(isinstance(x, str) for x in prompt) or all(_is_ids(x) for x in prompt):
        return list(prompt)
    raise APIError(400, _PROMPT_SHAPES + ".", "prompt")


def lower_completion_prompts(state, req: TextCompletionRequest) -> CompletionPrompts:
    """Step 1: the number of choices, prompt logprobs, every prompt's ids, `logit_bias`."""
    if req.use_beam_search:
        if req.echo and req.logprobs is not None:
            raise APIError(400, "`echo` with `logprobs` is not supported with beam search because beam "
                           "search does not compute prompt logprobs.", "echo")
        if req.stream:
            raise APIError(400, "Streaming is not currently supported with beam search")
        n = check_beam_width(req.n)
    else:
        n = check_n(req.n, is_greedy(req.options.temperature, state.limits.defaults))
    prompt_logprobs = check_prompt_logprobs(req.prompt_logprobs, stream=req.stream, echo=req.echo,
                                            echo_default=req.logprobs)
    tokenizer = state.tokenizer
    prompt_ids: list[list[int]] = []
    echo_texts: list[str] = []
    for p in prompts_of(req.prompt):
        if isinstance(p, str):
            ids = tokenizer.encode(p, add_special_tokens=req.add_special_tokens)
            text = p
        else:
            ids = check_prompt_ids(list(p), state.limits.vocab_size)
            text = tokenizer.decode(ids, skip_special_tokens=False) if req.echo else ""
        if not ids:
            raise APIError(400, "The prompt is empty after tokenization.", "prompt")
        prompt_ids.append(truncate_prompt(ids, req.truncate_prompt_tokens, state.max_model_len, req.truncation_side))
        echo_texts.append(text)
    if req.logit_bias:
        req.options.logit_bias = token_bias(req.logit_bias)
    return CompletionPrompts(n, prompt_logprobs, prompt_ids, echo_texts)


def lower_completion_sampling(state, req: TextCompletionRequest, prompts: CompletionPrompts) -> LoweredCompletion:
    """Step 2: bad words, structured outputs, each prompt's sampling maps (or beam parameters)."""
    opts = req.options
    n = prompts.n
    bad = bad_words_token_ids(state.tokenizer.encode, req.bad_words, state.limits.vocab_size) if req.bad_words else None
    structured = lower_structured_outputs(req.structured_outputs, req.response_format)
    if req.use_beam_search:
        beams = [BeamSearchParams(
            n, resolve_max_tokens(opts.max_tokens, len(ids), state.max_model_len, state.limits.defaults),
            ignore_eos=opts.ignore_eos, length_penalty=req.length_penalty,
            include_stop_str_in_output=opts.include_stop_str_in_output,
        ) for ids in prompts.prompt_ids]
        return LoweredCompletion(prompts, [], beams)
    samplings = [
        lower_choices(state.limits, opts, len(ids), n, logprobs=None if req.logprob_token_ids else req.logprobs,
                      structured=structured, bad_words=bad, prompt_logprobs=prompts.prompt_logprobs,
                      logprob_token_ids=req.logprob_token_ids)
        for ids in prompts.prompt_ids
    ]
    return LoweredCompletion(prompts, samplings, [])


def lower_completion(state, req: TextCompletionRequest) -> LoweredCompletion:
    """Steps 1 and 2."""
    return lower_completion_sampling(state, req, lower_completion_prompts(state, req))


def completion_run(state, req: TextCompletionRequest, low: LoweredCompletion, *, response_id: str, model: str,
                   created: int, sse: Any = None) -> RequestRun:
    """Step 3: the `RequestRun`, n choices per prompt (choice i of prompt p is p * n + i)."""
    prompt_ids = low.prompts.prompt_ids
    n = low.prompts.n
    opts = req.options
    beam = req.use_beam_search
    choices = []
    choice_ids = []
    choice_texts = []
    for pi, ids in enumerate(prompt_ids):
        for i in range(n):
            choices.append(beam_choice(pi * n + i, AssistantStream()) if beam
                           else new_choice(state, pi * n + i, ids, opts, AssistantStream()))
            choice_ids.append(ids)
            choice_texts.append(low.prompts.echo_texts[pi])
    tokenizer = state.tokenizer
    as_ids = req.return_tokens_as_token_ids or state.config.policy.return_tokens_as_token_ids
    formatter = CompletionFormatter(
        token_id_text if as_ids else state.token_text, req.logprobs or 0,
        # vLLM: with return_token_ids the echoed prompt is in prompt_token_ids, not the text.
        [("" if req.return_token_ids else text) for text in choice_texts] if req.echo else None,
        prompt_ids=choice_ids,
        stream_prompt_ids=req.return_token_ids or req.echo,
        # (vLLM decodes beam search tokens one by one: no repair)
        prompt_logprobs=not beam and low.prompts.prompt_logprobs is not None,
        decode=None if beam or as_ids else (lambda ids: tokenizer.decode(ids, skip_special_tokens=False)),
        echo_ids=choice_ids if not beam and req.echo and req.logprobs is not None else None,
        all_top=bool(req.logprob_token_ids),
        prompt_tokens_details=state.config.policy.enable_prompt_tokens_details,
        per_request_metrics=state.config.policy.enable_per_request_metrics,
    )
    return RequestRun(
        response_id=response_id,
        model=model,
        created=created,
        choices=choices,
        num_prompt_tokens=sum(len(ids) for ids in prompt_ids),
        stream=req.stream,
        include_usage=req.include_usage,
        continuous_usage=req.continuous_usage,
        formatter=formatter,
        want_logprobs=req.logprobs is not None,
        return_token_ids=req.return_token_ids,
        sse=sse,
        stream_interval=max(req.stream_interval or 1, state.stream_interval),
    )


def submit_completion(state, scope, req: TextCompletionRequest, low: LoweredCompletion, run: RequestRun):
    """The engine request of every choice of every prompt, sent (`responder.submit_choices`)."""
    n = low.prompts.n
    prompt_ids = low.prompts.prompt_ids
    samplings = low.samplings
    items = [(c, prompt_ids[c.index // n], samplings[c.index // n][c.index % n]) for c in run.choices]
    return submit_choices(state, scope, run, items, priority=req.priority, cache_salt=req.cache_salt,
                          lora_request=req.lora, requested_max_tokens=req.options.max_tokens)
