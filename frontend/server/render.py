"""vLLM's scale-out render and derender routes (vLLM 0.32 `entrypoints/scale_out/render` and
`derender`), served with `--enable-scale-out` (else 403, as vLLM):

- `POST /v1/chat/completions/render`, `POST /v1/completions/render`: an OpenAI request in, the
  `/inference/v1/generate` request(s) it becomes out: prompt token ids (chat template applied,
  truncated) and the SamplingParams the server would use. No engine is involved.
- `POST /v1/chat/completions/derender`, `POST /v1/completions/derender`: generate responses
  (`output_mode: "tokens"`) in, the OpenAI response out (detokenized text, logprobs with token
  strings, usage).

Render runs the same checks as the generation routes (`request_checks.py`, `llm`), so a request
render accepts is one chat/completions accepts.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend.chat.tools import ToolChoiceError, plan_tools
from vllm_pyfrontend.llm.prompt import check_prompt_ids, truncate_prompt
from vllm_pyfrontend.llm.sampling import NEUTRAL_DEFAULTS, check_n, is_greedy, resolve_max_tokens
from vllm_pyfrontend.llm.structured import STRUCTURED_KEYS
from vllm_pyfrontend.server.errors import APIError
from vllm_pyfrontend.server.openai_generation import options_from
from vllm_pyfrontend.server.request_checks import check_openai_request
from vllm_pyfrontend.server.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    decode_body,
    normalize_messages,
)
from vllm_pyfrontend.server.token_protocol import sampling_dump

_json = msgspec.json.encode


def _ok(body: Any) -> web.Response:
    return web.Response(body=_json(body), content_type="application/json")


def _structured_dump(so: dict[str, Any] | None, rf: dict[str, Any] | None) -> dict[str, Any] | None:
    """StructuredOutputsParams as vLLM's render writes it: the request's constraint unlowered,
    every key present, no backend chosen yet."""
    given: dict[str, Any] = {}
    if so:
        unknown = set(so) - set(STRUCTURED_KEYS)
        if unknown:
            raise APIError(400, f"Unknown structured_outputs keys: {sorted(unknown)}.", "structured_outputs")
        kinds = [k for k in ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
                 if so.get(k) not in (None, False)]
        if len(kinds) > 1:
            raise APIError(400, "You can only use one kind of constraints for structured outputs "
                           "('json', 'regex' or 'choice').", "structured_outputs")
        given.update(so)
    if rf is not None:
        kind = rf.get("type")
        if kind == "json_object":
            given["json_object"] = True
        elif kind == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict):
                raise APIError(400, "When response_format type is 'json_schema', the 'json_schema' field must "
                               "be provided.", "response_format")
            given["json"] = js.get("schema", js.get("json_schema"))
        elif kind not in (None, "text"):
            raise APIError(400, f"response_format type {kind!r} is not supported.", "response_format")
    if not given:
        return None
    out = {k: given.get(k) for k in STRUCTURED_KEYS}
    out["disable_any_whitespace"] = bool(out["disable_any_whitespace"])
    out["disable_additional_properties"] = bool(out["disable_additional_properties"])
    out["_backend"] = None
    out["_backend_was_auto"] = False
    return out


def _with_defaults(state, opts) -> None:
    """The server's sampling defaults (generation config, else OpenAI's) where the request is
    silent, as vLLM's `to_sampling_params` fills them."""
    for name, neutral in NEUTRAL_DEFAULTS.items():
        if getattr(opts, name) is None:
            setattr(opts, name, state.limits.defaults.sampling.get(name, neutral))


def _generate_request(state, *, request_id: str, token_ids: list[int], sampling: dict[str, Any], model: str,
                      req: Any) -> dict[str, Any]:
    so = req.stream_options
    return {
        "request_id": request_id,
        "token_ids": token_ids,
        "token_offsets": None,
        "features": None,
        "content_parts": None,
        "sampling_params": sampling,
        "model": model,
        "reasoning_ended": None,
        "reasoning_parser_kwargs": None,
        "return_token_ids": None,
        "output_mode": "tokens",
        "stream": bool(req.stream),
        "stream_options": None if so is None else {"include_usage": bool(so.include_usage),
                                                   "continuous_usage_stats": bool(so.continuous_usage_stats)},
        "cache_salt": req.cache_salt,
        "priority": req.priority,
        "kv_transfer_params": req.kv_transfer_params,
        "ec_transfer_params": None,
    }


async def handle_render_chat(request: web.Request) -> web.Response:
    state = request.app["state"]
    req: ChatCompletionRequest = decode_body(await state.read_body(request), ChatCompletionRequest)
    model = state.check_model(req.model)
    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(req, name)
        if value is not None and value < 1:
            raise APIError(400, f"{name} must be at least 1, got {value}.", name)
    max_param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    check_openai_request(req, state.max_model_len, max_tokens_param=max_param)
    if req.top_logprobs and not req.logprobs:
        raise APIError(400, "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
    n = check_n(req.n, is_greedy(req.temperature, state.limits.defaults))
    try:
        plan_tools(req.tools, req.tool_choice, parallel_tool_calls=req.parallel_tool_calls,
                   auto_enabled=state.config.policy.enable_auto_tool_choice,
                   has_parser=state.parsers.tool_parser is not None)
    except ToolChoiceError as e:
        raise APIError(400, e.message, e.param) from None
    messages = normalize_messages(req.messages)
    kwargs = dict(req.chat_template_kwargs or {})
    if req.reasoning_effort is not None:
        kwargs["reasoning_effort"] = req.reasoning_effort
        kwargs.setdefault("enable_thinking", req.reasoning_effort != "none")
    if req.chat_template is not None and not state.trust_request_chat_template:
        raise APIError(400, "Chat template is passed with request, but --trust-request-chat-template is not "
                       "set. Refused request with untrusted chat template.", "chat_template")
    ids = state.render_and_tokenize(messages, tools=req.tools, documents=req.documents,
                                    add_generation_prompt=req.add_generation_prompt,
                                    continue_final_message=req.continue_final_message,
                                    chat_template_kwargs=kwargs, template_override=req.chat_template)
    ids = truncate_prompt(ids, req.truncate_prompt_tokens, state.max_model_len)
    requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    opts = options_from(req, requested)
    _with_defaults(state, opts)
    max_tokens = resolve_max_tokens(requested, len(ids), state.max_model_len, state.limits.defaults)
    sampling = sampling_dump(opts, n=n, max_tokens=max_tokens,
                             logprobs=(req.top_logprobs or 0) if req.logprobs else None, stream=bool(req.stream),
                             structured=_structured_dump(req.structured_outputs, req.response_format),
                             bad_words=req.bad_words)
    rid = f"chatcmpl-{req.request_id or secrets.token_hex(8)}"
    return _ok(_generate_request(state, request_id=rid, token_ids=ids, sampling=sampling, model=model, req=req))


async def handle_render_completion(request: web.Request) -> web.Response:
    from vllm_pyfrontend.server.completion import prompts_of  # the completion route's prompt shapes

    state = request.app["state"]
    req: CompletionRequest = decode_body(await state.read_body(request), CompletionRequest)
    model = state.check_model(req.model)
    if req.max_tokens is not None and req.max_tokens < 1:
        raise APIError(400, f"max_tokens must be at least 1, got {req.max_tokens}.", "max_tokens")
    check_openai_request(req, state.max_model_len)
    if req.suffix is not None:
        raise APIError(400, "suffix is not currently supported", "suffix")
    n = check_n(req.n, is_greedy(req.temperature, state.limits.defaults))
    prompts = prompts_of(req)
    opts = options_from(req, req.max_tokens)
    _with_defaults(state, opts)
    structured = _structured_dump(req.structured_outputs, req.response_format)
    base = req.request_id or secrets.token_hex(8)
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            ids = state.tokenizer.encode(p, add_special_tokens=req.add_special_tokens)
        else:
            ids = check_prompt_ids(list(p), state.limits.vocab_size)
        if not ids:
            raise APIError(400, "The prompt is empty after tokenization.", "prompt")
        ids = truncate_prompt(ids, req.truncate_prompt_tokens, state.max_model_len)
        max_tokens = resolve_max_tokens(req.max_tokens, len(ids), state.max_model_len, state.limits.defaults)
        sampling = sampling_dump(opts, n=n, max_tokens=max_tokens, logprobs=req.logprobs, stream=bool(req.stream),
                                 structured=structured, bad_words=req.bad_words,
                                 prompt_logprobs=req.logprobs if req.echo and req.logprobs is not None else None)
        rid = f"cmpl-{base}-{i}" if len(prompts) > 1 else f"cmpl-{base}"
        out.append(_generate_request(state, request_id=rid, token_ids=ids, sampling=sampling, model=model, req=req))
    return _ok(out)


# -- derender -------------------------------------------------------------------------------
class _GenLogprob(msgspec.Struct):
    token_id: int
    logprob: float
    rank: int | None = None


class _GenLogprobContent(msgspec.Struct):
    token_id: int
    logprob: float
    rank: int | None = None
    top_logprobs: list[_GenLogprob] = []


class _GenLogprobs(msgspec.Struct):
    content: list[_GenLogprobContent] | None = None


class _GenChoice(msgspec.Struct):
    index: int
    finish_reason: str | None = "stop"
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    logprobs: _GenLogprobs | None = None


class _GenResponse(msgspec.Struct):
    choices: list[_GenChoice]
    request_id: str | None = None
    model: str | None = None
    created: int | None = None
    prompt_token_ids: list[int] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    output_mode: str = "tokens"


class DerenderChatRequest(msgspec.Struct):
    generate_response: _GenResponse
    stream: bool = False
    model: str | None = None
    prompt_tokens: int | None = None
    prompt_token_ids: list[int] | None = None
    chat_request: dict[str, Any] | None = None


class DerenderCompletionRequest(msgspec.Struct):
    generate_responses: list[_GenResponse]
    stream: bool = False
    model: str | None = None
    prompt_tokens: list[int] | None = None
    prompt_token_ids: list[list[int] | None] | None = None
    completion_request: dict[str, Any] | None = None


def _detokenize(state, ids: list[int], prompt_ids: list[int] | None, skip_special: bool, spaces: bool) -> str:
    detok = state.tokenizer.new_detokenizer(list(prompt_ids[-8:]) if prompt_ids else None,
                                            skip_special_tokens=skip_special, spaces_between_special_tokens=spaces)
    return detok.feed(list(ids)) + detok.flush(emit_incomplete=True)


def _check_tokens_mode(resp: _GenResponse) -> None:
    if resp.output_mode != "tokens":
        raise APIError(400, "Only output_mode='tokens' generate responses can be derendered.", "generate_response")


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None, "completion_tokens_details": None}


def _bool(d: dict[str, Any] | None, key: str, default: bool) -> bool:
    v = (d or {}).get(key)
    return default if v is None else bool(v)


async def handle_derender_chat(request: web.Request) -> web.Response:
    state = request.app["state"]
    req: DerenderChatRequest = decode_body(await state.read_body(request), DerenderChatRequest)
    if req.stream:
        raise APIError(400, "Streaming derender is not supported here; send the complete generate response "
                       "with stream=false.", "stream")
    model = state.check_model(req.model) if req.model else (req.generate_response.model or state.model_names[0])
    resp = req.generate_response
    _check_tokens_mode(resp)
    cr = req.chat_request
    skip = _bool(cr, "skip_special_tokens", True)
    spaces = _bool(cr, "spaces_between_special_tokens", True)
    prompt_ids = req.prompt_token_ids or resp.prompt_token_ids
    choices = []
    completion = 0
    for c in resp.choices:
        ids = c.token_ids or []
        completion += len(ids)
        text = _detokenize(state, ids, prompt_ids, skip, spaces)
        lp = None
        if c.logprobs is not None and c.logprobs.content is not None:
            lp = {"content": [_chat_logprob(state, e) for e in c.logprobs.content]}
        choices.append({
            "index": c.index,
            "message": {"role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None,
                        "function_call": None, "reasoning": None},
            "logprobs": lp,
            "finish_reason": c.finish_reason,
            "stop_reason": c.stop_reason,
            "token_ids": None,
            "routed_experts": None,
        })
    return _ok({
        "id": resp.request_id, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": choices, "service_tier": None, "system_fingerprint": None,
        "usage": _usage(req.prompt_tokens or 0, completion), "prompt_logprobs": None, "prompt_token_ids": None,
        "prompt_text": None, "kv_transfer_params": resp.kv_transfer_params,
        "ec_transfer_params": resp.ec_transfer_params, "metrics": None,
    })


def _token_entry(state, token_id: int, logprob: float) -> dict[str, Any]:
    s = state.token_text(token_id)
    return {"token": s, "logprob": logprob, "bytes": list(s.encode("utf-8", "replace"))}


def _chat_logprob(state, e: _GenLogprobContent) -> dict[str, Any]:
    return {**_token_entry(state, e.token_id, e.logprob),
            "top_logprobs": [_token_entry(state, t.token_id, t.logprob) for t in e.top_logprobs]}


async def handle_derender_completion(request: web.Request) -> web.Response:
    state = request.app["state"]
    req: DerenderCompletionRequest = decode_body(await state.read_body(request), DerenderCompletionRequest)
    if req.stream:
        raise APIError(400, "Streaming derender is not supported here; send the complete generate responses "
                       "with stream=false.", "stream")
    if not req.generate_responses:
        raise APIError(400, "generate_responses must hold at least one response.", "generate_responses")
    count = len(req.generate_responses)
    if req.prompt_tokens is not None and len(req.prompt_tokens) != count:
        raise APIError(400, f"prompt_tokens length ({len(req.prompt_tokens)}) must equal generate_responses length "
                       f"({count})", "prompt_tokens")
    if req.prompt_token_ids is not None and len(req.prompt_token_ids) != count:
        raise APIError(400, f"prompt_token_ids length ({len(req.prompt_token_ids)}) must equal generate_responses "
                       f"length ({count})", "prompt_token_ids")
    first = req.generate_responses[0]
    model = state.check_model(req.model) if req.model else (first.model or state.model_names[0])
    cr = req.completion_request
    skip = _bool(cr, "skip_special_tokens", True)
    spaces = _bool(cr, "spaces_between_special_tokens", True)
    choices = []
    completion = 0
    for i, resp in enumerate(req.generate_responses):
        _check_tokens_mode(resp)
        prompt_ids = (req.prompt_token_ids[i] if req.prompt_token_ids else None) or resp.prompt_token_ids
        n = len(resp.choices)
        for c in resp.choices:
            ids = c.token_ids or []
            completion += len(ids)
            text = _detokenize(state, ids, prompt_ids, skip, spaces)
            lp = None
            if c.logprobs is not None and c.logprobs.content is not None:
                tokens, token_lps, tops, offsets, offset = [], [], [], [], 0
                for e in c.logprobs.content:
                    tok = state.token_text(e.token_id)
                    tokens.append(tok)
                    token_lps.append(e.logprob)
                    tops.append({state.token_text(t.token_id): t.logprob for t in e.top_logprobs})
                    offsets.append(offset)
                    offset += len(tok)
                lp = {"text_offset": offsets, "token_logprobs": token_lps, "tokens": tokens, "top_logprobs": tops}
            choices.append({
                "index": i * n + c.index, "text": text, "logprobs": lp, "finish_reason": c.finish_reason,
                "stop_reason": c.stop_reason, "token_ids": None, "prompt_logprobs": None, "prompt_token_ids": None,
                "routed_experts": None,
            })
    prompt = sum(req.prompt_tokens or [])
    return _ok({
        "id": first.request_id, "object": "text_completion", "created": int(time.time()), "model": model,
        "choices": choices, "service_tier": None, "system_fingerprint": None, "usage": _usage(prompt, completion),
        "kv_transfer_params": first.kv_transfer_params, "ec_transfer_params": first.ec_transfer_params,
        "metrics": None,
    })


RENDER_ROUTES = (
    ("/v1/chat/completions/render", handle_render_chat),
    ("/v1/completions/render", handle_render_completion),
    ("/v1/chat/completions/derender", handle_derender_chat),
    ("/v1/completions/derender", handle_derender_completion),
)


def add_routes(app: web.Application) -> None:
    """The render/derender routes with --enable-scale-out; without it each answers 403 (vLLM)."""
    from vllm_pyfrontend.server.generate_tokens import scale_out_disabled

    enabled = getattr(app["state"].config.policy, "enable_scale_out", False)
    for path, handler in RENDER_ROUTES:
        app.router.add_post(path, handler if enabled else scale_out_disabled)
