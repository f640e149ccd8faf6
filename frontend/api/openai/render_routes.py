"""vLLM's scale-out render and derender routes (vLLM 0.32 `entrypoints/scale_out/render` and
`derender`), served with `--enable-scale-out` (else 403, as vLLM):

- `POST /v1/chat/completions/render`, `POST /v1/completions/render`: an OpenAI request in, the
  `/inference/v1/generate` request(s) it becomes out: prompt token ids (chat template applied,
  truncated) and the SamplingParams the server would use. No engine is involved.
- `POST /v1/chat/completions/derender`, `POST /v1/completions/derender`: generate responses
  (`output_mode: "tokens"`) in, the OpenAI response out (detokenized text, logprobs with token
  strings and vLLM's repair of split multi-byte characters, usage). With `stream: true` the body
  is one generate SSE chunk plus the `stream_state` the previous call returned, and the answer
  is a JSON `{chunk, stream_state}` (vLLM's stateless streaming derender, not SSE).

Render runs the generation routes' own lowering (`serving/lowering/`) up to the sampling maps,
then writes them out: a request render accepts is one chat/completions accepts, rendered and
tokenized the same way.

The derender handlers live in derender_routes.py; this module owns the route table for both.
"""

from __future__ import annotations

import secrets
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend.llm.sampling import NEUTRAL_DEFAULTS, resolve_max_tokens
from vllm_pyfrontend.llm.structured import STRUCTURED_KEYS
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.api.openai.derender_routes import handle_derender_chat, handle_derender_completion
from vllm_pyfrontend.api.openai.scale_out import scale_out_disabled
from vllm_pyfrontend.api.openai.lowering import chat_request_from_openai, completion_request_from_openai
from vllm_pyfrontend.serving.lowering.chat import lower_chat_prompt
from vllm_pyfrontend.serving.lowering.completion import lower_completion_prompts
from vllm_pyfrontend.api.openai.schemas import ChatCompletionRequest, CompletionRequest
from vllm_pyfrontend.serving.bodies import decode_body
from vllm_pyfrontend.api.openai.token_schemas import sampling_dump
from vllm_pyfrontend.serving.state import STATE
from vllm_pyfrontend.serving.web_app import scoped_route

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
    state = request.app[STATE]
    req: ChatCompletionRequest = decode_body(await state.read_body(request), ChatCompletionRequest, lax=True)
    model = state.check_model(req.model)
    # The chat lowering's own steps up to the sampling maps (the rendered request is sampled
    # and its prompt text only), then the request as vLLM's render writes it.
    chat = chat_request_from_openai(state, req, render=True)
    prompt = await lower_chat_prompt(state, chat)
    ids = prompt.prompt_ids
    opts = chat.options
    _with_defaults(state, opts)
    max_tokens = resolve_max_tokens(opts.max_tokens, len(ids), state.max_model_len, state.limits.defaults)
    sampling = sampling_dump(opts, n=prompt.n, max_tokens=max_tokens,
                             logprobs=(chat.top_logprobs or 0) if chat.logprobs else None, stream=chat.stream,
                             structured=_structured_dump(chat.structured_outputs, chat.response_format),
                             bad_words=chat.bad_words)
    rid = f"chatcmpl-{chat.request_id or secrets.token_hex(8)}"
    return _ok(_generate_request(state, request_id=rid, token_ids=ids, sampling=sampling, model=model, req=req))


async def handle_render_completion(request: web.Request) -> web.Response:
    state = request.app[STATE]
    req: CompletionRequest = decode_body(await state.read_body(request), CompletionRequest, lax=True)
    model = state.check_model(req.model)
    # The completion lowering's own steps up to the sampling maps, then each prompt's request
    # as vLLM's render writes it.
    comp = completion_request_from_openai(state, req, render=True)
    prompts = lower_completion_prompts(state, comp)
    opts = comp.options
    _with_defaults(state, opts)
    structured = _structured_dump(comp.structured_outputs, comp.response_format)
    base = comp.request_id or secrets.token_hex(8)
    many = len(prompts.prompt_ids) > 1
    out = []
    for i, ids in enumerate(prompts.prompt_ids):
        max_tokens = resolve_max_tokens(opts.max_tokens, len(ids), state.max_model_len, state.limits.defaults)
        sampling = sampling_dump(opts, n=prompts.n, max_tokens=max_tokens, logprobs=comp.logprobs,
                                 stream=comp.stream, structured=structured, bad_words=comp.bad_words,
                                 prompt_logprobs=comp.logprobs if comp.echo and comp.logprobs is not None else None)
        rid = f"cmpl-{base}-{i}" if many else f"cmpl-{base}"
        out.append(_generate_request(state, request_id=rid, token_ids=ids, sampling=sampling, model=model, req=req))
    return _ok(out)


RENDER_ROUTES = (
    ("/v1/chat/completions/render", scoped_route("render", handle_render_chat)),
    ("/v1/completions/render", scoped_route("render", handle_render_completion)),
    ("/v1/chat/completions/derender", scoped_route("derender", handle_derender_chat)),
    ("/v1/completions/derender", scoped_route("derender", handle_derender_completion)),
)


def add_routes(app: web.Application) -> None:
    """The render/derender routes with --enable-scale-out; without it each answers 403 (vLLM)."""
    policy = app[STATE].config.policy
    enabled = policy.enable_scale_out or policy.tokens_only
    for path, handler in RENDER_ROUTES:
        app.router.add_post(path, handler if enabled else scale_out_disabled)
