"""POST /v1/completions: prompt(s) as text or token ids -> n engine requests each -> SSE or JSON."""

from __future__ import annotations

import time

from aiohttp import web

from vllm_pyfrontend.chat.assistant import AssistantStream
from vllm_pyfrontend.llm.beam_search import BeamSearchParams, check_beam_width
from vllm_pyfrontend.llm.sampling import resolve_max_tokens
from vllm_pyfrontend.server.beam_generation import beam_choice, respond_beam_search, step_sampling
from vllm_pyfrontend.server.lora import lora_request_for
from vllm_pyfrontend.llm.request_ids import make_request_id
from vllm_pyfrontend.server.errors import APIError
from vllm_pyfrontend.server.formatters import CompletionFormatter
from vllm_pyfrontend.llm.prompt import bad_words_token_ids, check_prompt_ids, truncate_prompt
from vllm_pyfrontend.llm.sampling import check_n, is_greedy, lower_choices
from vllm_pyfrontend.llm.structured import lower_structured_outputs
from vllm_pyfrontend.server.openai_generation import (
    new_choice,
    new_sse,
    options_from,
    prompt_logprobs_of,
    respond,
    stream_flags,
    submit_choices,
)
from vllm_pyfrontend.server.request_checks import check_openai_request
from vllm_pyfrontend.server.request_pipeline import RequestRun
from vllm_pyfrontend.server.schemas import CompletionRequest, decode_body


def _is_ids(x) -> bool:
    return isinstance(x, list) and all(type(t) is int for t in x)


def _prompts(req: CompletionRequest) -> list[str | list[int]]:
    """The prompt(s): a string, a list of strings, token ids, or a list of token-id lists."""
    p = req.prompt
    if p is None:
        raise APIError(400, "`prompt` is required.", "prompt")
    if isinstance(p, str):
        return [p]
    if not isinstance(p, list) or not p:
        raise APIError(400, "`prompt` must be a string, a list of strings, a list of token ids "
                       "or a list of token-id lists, and not empty.", "prompt")
    if _is_ids(p):
        return [p]
    if all(isinstance(x, str) for x in p) or all(_is_ids(x) for x in p):
        return list(p)
    raise APIError(400, "`prompt` must be a string, a list of strings, a list of token ids "
                   "or a list of token-id lists.", "prompt")


prompts_of = _prompts  # also the render route's (server/render.py)


async def handle_completions(request: web.Request) -> web.StreamResponse:
    state = request.app["state"]
    body = await state.read_body(request)
    req: CompletionRequest = decode_body(body, CompletionRequest)
    model = state.check_model(req.model)
    lora = lora_request_for(state, model)
    state.check_generation()
    state.check_engine()

    if req.suffix is not None:
        raise APIError(400, "suffix is not currently supported", "suffix")
    if req.best_of is not None and req.best_of != req.n:
        raise APIError(400, "best_of is not supported; use n.", "best_of")
    if req.max_tokens is not None and req.max_tokens < 1:
        raise APIError(400, f"max_tokens must be at least 1, got {req.max_tokens}.", "max_tokens")
    if req.logprobs is not None and req.logprobs < 0:
        raise APIError(400, f"logprobs must be non-negative, got {req.logprobs}.", "logprobs")
    check_openai_request(req, state.max_model_len)
    if req.use_beam_search:
        if req.echo and req.logprobs is not None:
            raise APIError(400, "`echo` with `logprobs` is not supported with beam search because beam "
                           "search does not compute prompt logprobs.", "echo")
        if req.stream:
            raise APIError(400, "Streaming is not currently supported with beam search")
        n = check_beam_width(req.n)
    else:
        n = check_n(req.n, is_greedy(req.temperature, state.limits.defaults))
    prompt_logprobs = prompt_logprobs_of(req, req.logprobs)

    tokenizer = state.tokenizer
    prompt_ids: list[list[int]] = []
    echo_texts: list[str] = []
    for p in _prompts(req):
        if isinstance(p, str):
            ids = tokenizer.encode(p, add_special_tokens=req.add_special_tokens)
            text = p
        else:
            ids = check_prompt_ids(list(p), state.limits.vocab_size)
            text = tokenizer.decode(ids, skip_special_tokens=False) if req.echo else ""
        if not ids:
            raise APIError(400, "The prompt is empty after tokenization.", "prompt")
        prompt_ids.append(truncate_prompt(ids, req.truncate_prompt_tokens, state.max_model_len))
        echo_texts.append(text)

    opts = options_from(req, req.max_tokens)
    bad = bad_words_token_ids(tokenizer.encode, req.bad_words, state.limits.vocab_size) if req.bad_words else None
    structured = lower_structured_outputs(req.structured_outputs, req.response_format)
    samplings = [] if req.use_beam_search else [
        lower_choices(state.limits, opts, len(ids), n, logprobs=req.logprobs, structured=structured, bad_words=bad,
                      prompt_logprobs=prompt_logprobs)
        for ids in prompt_ids
    ]

    stream, include_usage, continuous = stream_flags(req)
    response_id = f"cmpl-{req.request_id}" if req.request_id else make_request_id("cmpl", state.worker_index)
    created = int(time.time())
    choices = []
    choice_prompts = []
    for pi, ids in enumerate(prompt_ids):
        for i in range(n):
            choices.append(beam_choice(pi * n + i, AssistantStream()) if req.use_beam_search
                           else new_choice(state, pi * n + i, ids, opts, AssistantStream()))
            choice_prompts.append(pi)
    run = RequestRun(
        response_id=response_id,
        model=model,
        created=created,
        choices=choices,
        num_prompt_tokens=sum(len(ids) for ids in prompt_ids),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        formatter=CompletionFormatter(
            state.token_text, req.logprobs or 0,
            # vLLM: with return_token_ids the echoed prompt is in prompt_token_ids, not the text.
            [("" if req.return_token_ids else echo_texts[pi]) for pi in choice_prompts] if req.echo else None,
        ),
        want_logprobs=req.logprobs is not None,
        return_token_ids=bool(req.return_token_ids),
    )
    run.formatter.prompt_ids = [prompt_ids[pi] for pi in choice_prompts]
    run.formatter.stream_prompt_ids = bool(req.return_token_ids or req.echo)
    if not req.use_beam_search:  # (vLLM decodes beam search tokens one by one: no repair)
        run.formatter.prompt_logprobs = prompt_logprobs is not None
        run.formatter.decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)
        if req.echo and req.logprobs is not None:
            run.formatter.echo_ids = [prompt_ids[pi] for pi in choice_prompts]
    if stream:
        run.sse = new_sse(state, response_id, model, created, "text_completion")
    if req.use_beam_search:
        beams = [BeamSearchParams(
            n, resolve_max_tokens(opts.max_tokens, len(ids), state.max_model_len, state.limits.defaults),
            ignore_eos=req.ignore_eos, length_penalty=req.length_penalty,
            include_stop_str_in_output=req.include_stop_str_in_output,
        ) for ids in prompt_ids]
        return await respond_beam_search(
            state, request, run, prompt_ids, beams, step_sampling(state, n, req.temperature),
            skip_special_tokens=opts.skip_special_tokens, lora_request=lora, priority=req.priority,
            cache_salt=req.cache_salt, role_chunks=False,
        )
    items = [(c, prompt_ids[pi], samplings[pi][c.index % n]) for c, pi in zip(choices, choice_prompts)]
    sub = submit_choices(state, request, run, items, priority=req.priority, cache_salt=req.cache_salt,
                         lora_request=lora)
    return await respond(state, request, run, sub, role_chunks=False)
