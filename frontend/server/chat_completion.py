"""POST /v1/chat/completions: messages -> chat template -> n engine requests -> SSE or JSON.

The pipeline itself lives in `request_pipeline.py` (RequestRun) and `formatters.py`
(ChatFormatter); this module validates the request, renders and tokenizes the prompt and
lowers it with `frontend/llm`, all before anything reaches the engine.
"""

from __future__ import annotations

import time

from aiohttp import web

from vllm_pyfrontend.chat.tools import ToolChoiceError, plan_tools
from vllm_pyfrontend.llm.beam_search import BeamSearchParams, check_beam_width
from vllm_pyfrontend.llm.sampling import resolve_max_tokens
from vllm_pyfrontend.server.beam_generation import beam_choice, respond_beam_search, step_sampling
from vllm_pyfrontend.server.lora import lora_request_for
from vllm_pyfrontend.llm.request_ids import make_request_id
from vllm_pyfrontend.server.errors import APIError
from vllm_pyfrontend.server.formatters import ChatFormatter
from vllm_pyfrontend.llm.prompt import bad_words_token_ids, truncate_prompt
from vllm_pyfrontend.llm.sampling import check_n, is_greedy, lower_choices
from vllm_pyfrontend.llm.structured import forced_json, lower_structured_outputs
from vllm_pyfrontend.server.openai_generation import (
    new_choice,
    new_sse,
    options_from,
    prompt_logprobs_of,
    respond,
    stream_flags,
    submit_choices,
)
from vllm_pyfrontend.multimodal import has_media
from vllm_pyfrontend.multimodal.chat import lora_name_of, prepare_chat, process as process_media, strip_media
from vllm_pyfrontend.server.request_checks import check_openai_request
from vllm_pyfrontend.server.request_pipeline import RequestRun
from vllm_pyfrontend.server.schemas import ChatCompletionRequest, decode_body, normalize_messages


async def handle_chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app["state"]
    body = await state.read_body(request)
    req: ChatCompletionRequest = decode_body(body, ChatCompletionRequest)
    model = state.check_model(req.model)
    lora = lora_request_for(state, model)
    state.check_generation()
    state.check_engine()

    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(req, name)
        if value is not None and value < 1:
            raise APIError(400, f"{name} must be at least 1, got {value}.", name)
    if req.top_logprobs is not None and req.top_logprobs < 0:
        raise APIError(400, f"top_logprobs must be non-negative, got {req.top_logprobs}.", "top_logprobs")
    if req.top_logprobs and not req.logprobs:
        raise APIError(400, "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
    if req.chat_template is not None and not state.trust_request_chat_template:
        raise APIError(
            400,
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template.",
            "chat_template",
        )
    check_openai_request(req, state.max_model_len,
                         max_tokens_param="max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens")
    if req.use_beam_search:
        n = check_beam_width(req.n)
    else:
        n = check_n(req.n, is_greedy(req.temperature, state.limits.defaults))
    prompt_logprobs = prompt_logprobs_of(req, req.top_logprobs)
    try:
        plan = plan_tools(
            req.tools, req.tool_choice, parallel_tool_calls=req.parallel_tool_calls,
            auto_enabled=state.config.policy.enable_auto_tool_choice, has_parser=state.parsers.tool_parser is not None,
        )
    except ToolChoiceError as e:
        raise APIError(400, e.message, e.param) from None
    media = None
    if has_media(req.messages):  # frontend/multimodal: vLLM's chat_utils + its processor
        if req.use_beam_search:
            raise APIError(400, "Beam search is not supported with media inputs here.", "use_beam_search")
        normalize_messages(strip_media(req.messages))  # role and shape checks
        mm_model, media = await prepare_chat(state, req.messages)
        messages = media.messages
    else:
        messages = normalize_messages(req.messages)
    template_kwargs = dict(req.chat_template_kwargs or {})
    if req.reasoning_effort is not None:
        # As vLLM's build_chat_params: the effort reaches the template, and turns thinking on
        # (or off for "none") unless the user set enable_thinking explicitly.
        template_kwargs["reasoning_effort"] = req.reasoning_effort
        template_kwargs.setdefault("enable_thinking", req.reasoning_effort != "none")
    prompt_ids = state.render_and_tokenize(
        messages,
        tools=req.tools,
        documents=req.documents,
        add_generation_prompt=req.add_generation_prompt,
        continue_final_message=req.continue_final_message,
        chat_template_kwargs=template_kwargs,
        template_override=req.chat_template,
    )
    prompt_ids = truncate_prompt(prompt_ids, req.truncate_prompt_tokens, state.max_model_len)
    mm = None
    if media is not None:
        mm = await process_media(state, mm_model, media, prompt_ids, req.mm_processor_kwargs, lora_name_of(lora))
        prompt_ids = mm.prompt_ids
    opts = options_from(
        req, req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    )
    if state.parsers.uses_parsers(plan):
        # Markers are special tokens for some models: the parsers must see them as text.
        opts.skip_special_tokens = False
    structured = lower_structured_outputs(req.structured_outputs, req.response_format)
    if plan.schema is not None:
        # "required" / named tool choice: the engine's structured outputs enforce the call.
        structured = {**(structured or {}), **forced_json(plan.schema)}
    bad = bad_words_token_ids(state.tokenizer.encode, req.bad_words, state.limits.vocab_size) if req.bad_words else None
    if req.use_beam_search:
        beams = BeamSearchParams(
            n, resolve_max_tokens(opts.max_tokens, len(prompt_ids), state.max_model_len, state.limits.defaults),
            ignore_eos=req.ignore_eos, length_penalty=req.length_penalty,
            include_stop_str_in_output=req.include_stop_str_in_output,
        )
        samplings = []
    else:
        samplings = lower_choices(
            state.limits, opts, len(prompt_ids), n,
            logprobs=(req.top_logprobs or 0) if req.logprobs else None,
            structured=structured, bad_words=bad, prompt_logprobs=prompt_logprobs,
        )  # fmt: skip

    stream, include_usage, continuous = stream_flags(req)
    response_id = f"chatcmpl-{req.request_id}" if req.request_id else make_request_id("chatcmpl", state.worker_index)
    created = int(time.time())
    assistants = [state.parsers.new_assistant_stream(plan, prompt_ids, template_kwargs, req.tools) for _ in range(n)]
    run = RequestRun(
        response_id=response_id,
        model=model,
        created=created,
        choices=[
            beam_choice(i, assistants[i]) if req.use_beam_search else new_choice(state, i, prompt_ids, opts, assistants[i])
            for i in range(n)
        ],
        num_prompt_tokens=len(prompt_ids),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        formatter=ChatFormatter(state.token_text, req.top_logprobs or 0),
        want_logprobs=bool(req.logprobs),
        return_token_ids=bool(req.return_token_ids),
    )
    if not req.use_beam_search:
        run.formatter.prompt_logprobs = prompt_logprobs is not None
        run.formatter.decode = lambda ids: state.tokenizer.decode(ids, skip_special_tokens=False)
    else:
        run.formatter.token_bytes = False  # vLLM's beam tokens have no decoded text of their own
    if stream:
        run.sse = new_sse(state, response_id, model, created, "chat.completion.chunk")
    run.include_reasoning = req.include_reasoning
    run.prompt_token_ids = prompt_ids
    run.parallel_tool_calls = plan.parallel
    run.named_tool_choice = plan.mode == "named"
    if req.echo:
        # vLLM: the response role is "assistant" with a generation prompt, else the last
        # message's role; echo repeats the last message's content when its role is that one.
        role = "assistant" if req.add_generation_prompt else messages[-1]["role"]
        last = messages[-1]
        if last.get("role") == role and isinstance(last.get("content"), str):
            run.echo_text = last["content"]
    if req.use_beam_search:
        return await respond_beam_search(
            state, request, run, [prompt_ids], [beams], step_sampling(state, n, req.temperature),
            skip_special_tokens=opts.skip_special_tokens, lora_request=lora, priority=req.priority,
            cache_salt=req.cache_salt, role_chunks=True,
        )
    sub = submit_choices(state, request, run, [(c, prompt_ids, s) for c, s in zip(run.choices, samplings)],
                         priority=req.priority, cache_salt=req.cache_salt, lora_request=lora, multimodal=mm)
    return await respond(state, request, run, sub, role_chunks=True)
