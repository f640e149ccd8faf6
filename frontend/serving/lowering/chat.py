"""A chat request, whatever API style sent it, lowered to prompt ids, engine sampling maps and
the `RequestRun` that answers it.

Chat completions, Anthropic Messages and Responses (and SageMaker's /invocations, through the
chat route) turn their request into a `ChatRequest`; the lowering is then one sequence:

1. `lower_chat_prompt`: the number of choices, prompt logprobs, the tool plan, media parsing,
   the chat template and tokenizer, truncation, media processing and `logit_bias`. The chat
   render route stops here and writes the request out (`api/openai/render_routes.py`), so render and
   chat cannot drift apart.
2. `lower_chat_sampling`: parser-visible special tokens, structured outputs (a forced tool
   call included), bad words, one engine sampling map per choice (or the beam search
   parameters), the assistant streams and `echo`.
3. `chat_run`: the `RequestRun`, every option passed to its constructor; `submit_chat` sends
   its engine requests.

Each step raises `APIError` / `InvalidRequestError` (answered 400 with the param) in the chat
route's order, which is observable (which error wins when two apply) and the same for every
style (the tool plan before media parsing, the template before `logit_bias`). What is specific
to one request shape (field names, ranges of fields only it has) stays in its conversion:
`chat_request_from_openai` for OpenAI's chat body, beside each style's own routes for the rest.
"""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_pyfrontend.chat.tools import ToolChoiceError, ToolPlan, plan_tools
from vllm_pyfrontend.llm.beam_search import BeamSearchParams, check_beam_width
from vllm_pyfrontend.llm.prompt import bad_words_token_ids, truncate_prompt
from vllm_pyfrontend.llm.sampling import check_n, is_greedy, lower_choices, resolve_max_tokens
from vllm_pyfrontend.llm.structured import forced_json, lower_structured_outputs
from vllm_pyfrontend.multimodal import has_media
from vllm_pyfrontend.multimodal.chat import lora_name_of, prepare_chat, process as process_media, strip_media
from vllm_pyfrontend.serving.beam_generation import beam_choice
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.lowering.options import GenerationRequest, check_prompt_logprobs, token_bias
from vllm_pyfrontend.serving.request_pipeline import RequestRun
from vllm_pyfrontend.serving.responder import new_choice, submit_choices
from vllm_pyfrontend.chat.messages import normalize_messages


def as_content_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`--chat-template-content-format openai`: text content handed to the template as OpenAI's
    list of parts (`[{"type": "text", "text": ...}]`), for templates that iterate over it."""
    out = []
    for m in messages:
        content = m.get("content")
        out.append({**m, "content": [{"type": "text", "text": content}]} if isinstance(content, str) else m)
    return out


def reused_prompt_ids(kv_transfer_params: Any, *, echo: bool, has_media: bool, vocab_size: int) -> list[int] | None:
    """Disaggregated serving: the prefill stage forwards its prompt ids in
    `kv_transfer_params["prompt_token_ids"]` so the decode stage skips the template and the
    tokenizer (vLLM's behaviour). The key is always taken out (it never reaches the engine); the
    ids are ignored with `echo` or media (both need the messages rendered)."""
    if not isinstance(kv_transfer_params, dict):
        return None
    ids = kv_transfer_params.pop("prompt_token_ids", None)
    if ids is None or echo or has_media:
        return None
    param = "kv_transfer_params.prompt_token_ids"
    if not isinstance(ids, list) or not ids or any(type(x) is not int or x < 0 for x in ids):
        raise APIError(400, "`kv_transfer_params['prompt_token_ids']` must be a non-empty list of non-negative "
                       "integers.", param)
    bad = [x for x in ids if x >= vocab_size]
    if bad:
        raise APIError(400, f"Token ids {bad[:5]} in {param} are out of vocabulary (size {vocab_size}).", param)
    return ids


class ChatRequest(GenerationRequest):
    """One chat request in the terms every API style shares (OpenAI chat's names): its own
    fields here, the rest (sampling, choices, engine requests) those of `GenerationRequest`.

    A msgspec Struct, built by keyword by every style (35 keywords cost about 1.2 µs more than
    positional arguments: nothing against a request's cost, and no field can shift)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    # the chat template
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None  # reaches the template; turns thinking on (off for "none")
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    documents: list[dict[str, Any]] | None = None
    chat_template: str | None = None  # a request's own template (checked against the policy by its style)
    messages_normalized: bool = False  # already in the template's shape (no role / content checks)
    allow_media: bool = True  # media parts go to frontend/multimodal (else the text-only checks refuse them)
    mm_processor_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, Any] | None = None  # per modality, over the server's (trusted requests)
    # what the choices report
    logprobs: bool = False
    top_logprobs: int | None = None
    include_reasoning: bool = True


class ChatPrompt(msgspec.Struct):
    """Step 1's result: what the render route writes out, and what the sampling step needs."""

    n: int
    prompt_logprobs: int | None
    plan: ToolPlan
    messages: list[dict[str, Any]]  # as rendered (media parts replaced by their placeholders)
    template_kwargs: dict[str, Any]
    prompt_ids: list[int]
    multimodal: Any  # frontend/multimodal's processed media (None: text only)
    has_media: bool


class LoweredChat(msgspec.Struct):
    """A chat request lowered: its prompt, one sampling map per choice and what the run needs."""

    prompt: ChatPrompt
    samplings: list[dict[str, Any]]  # one per choice; empty for beam search
    beams: BeamSearchParams | None
    assistants: list[Any]  # one assistant stream per choice
    echo_text: str | None = None

    @property
    def plan(self) -> ToolPlan:
        return self.prompt.plan


def chat_template_kwargs_of(state, chat_template_kwargs: dict[str, Any] | None,
                            reasoning_effort: str | None) -> dict[str, Any]:
    """The chat template's keyword arguments of a request: its own over the server's
    --default-chat-template-kwargs, and `reasoning_effort` (the parsers read them too: a
    template's `enable_thinking` decides where reasoning starts)."""
    defaults = state.config.policy.default_chat_template_kwargs  # --default-chat-template-kwargs
    template_kwargs = {**defaults, **chat_template_kwargs} if defaults and chat_template_kwargs else dict(
        chat_template_kwargs or defaults or {})
    if reasoning_effort is not None:
        # As vLLM's build_chat_params: the effort reaches the template, and turns thinking on
        # (or off for "none") unless the user set enable_thinking explicitly.
        template_kwargs["reasoning_effort"] = reasoning_effort
        template_kwargs.setdefault("enable_thinking", reasoning_effort != "none")
    return template_kwargs


async def lower_chat_prompt(state, req: ChatRequest) -> ChatPrompt:
    """Step 1: checks, tool plan, media, the rendered and tokenized prompt, `logit_bias`."""
    if req.use_beam_search:
        n = check_beam_width(req.n)
    else:
        n = check_n(req.n, is_greedy(req.options.temperature, state.limits.defaults))
    prompt_logprobs = check_prompt_logprobs(req.prompt_logprobs, stream=req.stream, echo=req.echo,
                                            echo_default=req.top_logprobs)
    try:
        plan = plan_tools(
            req.tools, req.tool_choice, parallel_tool_calls=req.parallel_tool_calls,
            auto_enabled=state.config.policy.enable_auto_tool_choice, has_parser=state.parsers.tool_parser is not None,
        )
    except ToolChoiceError as e:
        raise APIError(400, e.message, e.param) from None
    media = None
    if req.allow_media and has_media(req.messages):  # frontend/multimodal: vLLM's chat_utils + its processor
        if req.use_beam_search:
            raise APIError(400, "Beam search is not supported with media inputs here.", "use_beam_search")
        if not req.messages_normalized:
            normalize_messages(strip_media(req.messages))  # role and shape checks
        mm_model, media = await prepare_chat(state.multimodal, req.messages, req.media_io_kwargs)
        messages = media.messages
    elif req.messages_normalized:
        messages = req.messages
    else:
        messages = normalize_messages(req.messages)
        if state.config.policy.chat_template_content_format == "openai":
            messages = as_content_parts(messages)
    template_kwargs = chat_template_kwargs_of(state, req.chat_template_kwargs, req.reasoning_effort)
    tools = req.tools
    if req.tool_choice == "none" and state.config.policy.exclude_tools_when_tool_choice_none:
        tools = None  # vLLM's --exclude-tools-when-tool-choice-none
    extra = req.options.extra_args
    reused = reused_prompt_ids(extra.get("kv_transfer_params"), echo=req.echo, has_media=media is not None,
                               vocab_size=state.limits.vocab_size) if extra else None
    if reused is not None:
        prompt_ids = reused  # the prefill stage's ids: no template, no tokenizer
    else:
        prompt_ids = state.render_and_tokenize(
            messages,
            tools=tools,
            documents=req.documents,
            add_generation_prompt=req.add_generation_prompt,
            continue_final_message=req.continue_final_message,
            chat_template_kwargs=template_kwargs,
            template_override=req.chat_template,
        )
    prompt_ids = truncate_prompt(prompt_ids, req.truncate_prompt_tokens, state.max_model_len, req.truncation_side)
    mm = None
    if media is not None:
        mm = await process_media(state.multimodal, mm_model, media, prompt_ids, req.mm_processor_kwargs, lora_name_of(req.lora))
        prompt_ids = mm.prompt_ids
    if req.logit_bias:
        req.options.logit_bias = token_bias(req.logit_bias)
    return ChatPrompt(n, prompt_logprobs, plan, messages, template_kwargs, prompt_ids, mm, media is not None)


def lower_chat_sampling(state, req: ChatRequest, prompt: ChatPrompt) -> LoweredChat:
    """Step 2: structured outputs, bad words, the engine sampling map of every choice (or the
    beam search parameters), the assistant streams and the echoed text."""
    opts = req.options
    plan = prompt.plan
    prompt_ids = prompt.prompt_ids
    n = prompt.n
    if state.parsers.uses_parsers(plan):
        # Markers are special tokens for some models: the parsers must see them as text.
        opts.skip_special_tokens = False
    structured = lower_structured_outputs(req.structured_outputs, req.response_format)
    if plan.schema is not None:
        # "required" / named tool choice: the engine's structured outputs enforce the call.
        structured = {**(structured or {}), **forced_json(plan.schema)}
    bad = bad_words_token_ids(state.tokenizer.encode, req.bad_words, state.limits.vocab_size) if req.bad_words else None
    beams = None
    if req.use_beam_search:
        beams = BeamSearchParams(
            n, resolve_max_tokens(opts.max_tokens, len(prompt_ids), state.max_model_len, state.limits.defaults),
            ignore_eos=opts.ignore_eos, length_penalty=req.length_penalty,
            include_stop_str_in_output=opts.include_stop_str_in_output,
        )
        samplings = []
    else:
        samplings = lower_choices(
            state.limits, opts, len(prompt_ids), n,
            logprobs=(req.top_logprobs or 0) if req.logprobs and not req.logprob_token_ids else None,
            structured=structured, bad_words=bad, prompt_logprobs=prompt.prompt_logprobs,
            logprob_token_ids=req.logprob_token_ids,
        )  # fmt: skip
    assistants = [state.parsers.new_assistant_stream(plan, prompt_ids, prompt.template_kwargs, req.tools)
                  for _ in range(n)]
    echo_text = None
    if req.echo:
        # vLLM: the response role is "assistant" with a generation prompt, else the last
        # message's role; echo repeats the last message's content when its role is that one.
        messages = prompt.messages
        role = "assistant" if req.add_generation_prompt else messages[-1]["role"]
        last = messages[-1]
        if last.get("role") == role and isinstance(last.get("content"), str):
            echo_text = last["content"]
    return LoweredChat(prompt, samplings, beams, assistants, echo_text)


async def lower_chat(state, req: ChatRequest) -> LoweredChat:
    """Steps 1 and 2: a chat request lowered up to its `RequestRun`."""
    return lower_chat_sampling(state, req, await lower_chat_prompt(state, req))


def chat_run(state, req: ChatRequest, low: LoweredChat, *, response_id: str, model: str, created: int,
             formatter: Any, sse: Any = None, run_class: type[RequestRun] = RequestRun) -> RequestRun:
    """Step 3: the request's `RequestRun`, one choice per engine request (a beam search's
    choices take the finished beams' text). `formatter`, `sse` and `run_class` are the API
    style's wire format."""
    prompt_ids = low.prompt.prompt_ids
    assistants = low.assistants
    if req.use_beam_search:
        choices = [beam_choice(i, a) for i, a in enumerate(assistants)]
    else:
        opts = req.options
        choices = [new_choice(state, i, prompt_ids, opts, a) for i, a in enumerate(assistants)]
    plan = low.plan
    return run_class(
        response_id=response_id,
        model=model,
        created=created,
        choices=choices,
        num_prompt_tokens=len(prompt_ids),
        stream=req.stream,
        include_usage=req.include_usage,
        continuous_usage=req.continuous_usage,
        formatter=formatter,
        want_logprobs=req.logprobs,
        return_token_ids=req.return_token_ids,
        sse=sse,
        prompt_token_ids=prompt_ids,
        include_reasoning=req.include_reasoning,
        parallel_tool_calls=plan.parallel,
        named_tool_choice=plan.mode == "named",
        echo_text=low.echo_text,
        stream_interval=max(req.stream_interval or 1, state.stream_interval),
    )


def submit_chat(state, scope, req: ChatRequest, low: LoweredChat, run: RequestRun):
    """The engine request of every choice, sent (`responder.submit_choices`)."""
    prompt_ids = low.prompt.prompt_ids
    return submit_choices(state, scope, run, [(c, prompt_ids, s) for c, s in zip(run.choices, low.samplings)],
                          priority=req.priority, cache_salt=req.cache_salt, lora_request=req.lora,
                          multimodal=low.prompt.multimodal, requested_max_tokens=req.options.max_tokens)
