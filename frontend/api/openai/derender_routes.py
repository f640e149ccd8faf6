"""vLLM's scale-out derender routes (vLLM 0.32 `entrypoints/scale_out/derender`): generate
responses (`output_mode: "tokens"`) in, the OpenAI response out.

`POST /v1/chat/completions/derender` and `POST /v1/completions/derender` detokenize the token ids
(vLLM's incremental detokenizer, ported so its streaming state is plain data), give logprobs
their token strings with vLLM's repair of split multi-byte characters, and count usage. With
`stream: true` the body is one generate SSE chunk plus the `stream_state` the previous call
returned, and the answer is a JSON `{chunk, stream_state}` (vLLM's stateless streaming derender,
not SSE). No engine is involved; render_routes.py serves these next to render.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.bodies import decode_body
from vllm_pyfrontend.serving.prompt_logprobs import SampledTexts
from vllm_pyfrontend.serving.state import STATE

_json = msgspec.json.encode


def _ok(body: Any) -> web.Response:
    return web.Response(body=_json(body), content_type="application/json")


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


# vLLM's derender detokenizes with its slow-path `detokenize_incrementally` (prefix / read
# offsets over raw vocab pieces) so the streaming state it hands the client is plain data: the
# port below reproduces that state exactly (`vllm/tokenizers/detokenizer_utils.py`, the fast
# tokenizer branch: pieces joined by the tokenizer's decoder).
_INITIAL_DETOK_OFFSET = 5


def _named_special_ids(tok) -> frozenset[int]:
    """transformers' `all_special_ids`: the named special tokens plus the config's extra ones (not
    every added token marked special, which is what the engine's detokenizer skips)."""
    ids = getattr(tok, "_derender_special_ids", None)
    if ids is None:
        names = [t for t in tok.template_vars().values() if isinstance(t, str)]
        cfg = getattr(tok, "tokenizer_config", None) or {}
        for key in ("additional_special_tokens", "extra_special_tokens"):
            extra = cfg.get(key)
            extra = list(extra.values()) if isinstance(extra, dict) else extra
            for t in extra if isinstance(extra, list) else []:
                t = t.get("content") if isinstance(t, dict) else t
                if isinstance(t, str):
                    names.append(t)
        ids = frozenset(i for i in (tok.token_to_id(t) for t in names) if i is not None)
        tok._derender_special_ids = ids
    return ids


def _ids_to_pieces(tok, ids: list[int], skip_special: bool) -> list[str]:
    """transformers' `convert_ids_to_tokens` (None -> "" as vLLM does)."""
    skip = _named_special_ids(tok) if skip_special else ()
    return [tok.id_to_token(int(i)) or "" for i in ids if int(i) not in skip]


def _seed_detok(tok, prompt_ids: list[int] | None, skip_special: bool) -> dict[str, Any]:
    """vLLM's `_seed_stream_state`: the prompt tail's pieces and offsets (empty without a prompt)."""
    if not prompt_ids:
        return {"prev_tokens": [], "prefix_offset": 0, "read_offset": 0}
    pieces = _ids_to_pieces(tok, prompt_ids[-_INITIAL_DETOK_OFFSET - 2:], skip_special)
    read = len(pieces)
    return {"prev_tokens": pieces, "prefix_offset": max(read - _INITIAL_DETOK_OFFSET, 0), "read_offset": read}


def _detok_delta(tok, ids: list[int], st: dict[str, Any], skip_special: bool) -> str:
    """vLLM's `OnlineDerenderer._detokenize_delta`: new text, `st` updated in place (the window
    trimmed to what the next token still reads; an unfinished UTF-8 tail is held)."""
    prev, prefix, read = list(st["prev_tokens"]), st["prefix_offset"], st["read_offset"]
    parts = []
    for tid in ids:
        new = _ids_to_pieces(tok, [tid], skip_special) if 0 <= tid < tok.vocab_size else [""]
        count = len(prev) + len(new)
        start = min(prefix, read, len(prev))
        out = prev[start:] + new
        prefix_text = tok.decode_pieces(out[prefix - start:read - start])
        text = tok.decode_pieces(out[prefix - start:])
        if len(text) <= len(prefix_text) or text.endswith("\ufffd"):
            text = ""
        else:
            text = text[len(prefix_text):]
            prefix, read = read, count
        prev = (prev + new)[prefix:]
        read -= prefix
        prefix = 0
        parts.append(text)
    st.update(prev_tokens=prev, prefix_offset=prefix, read_offset=read)
    return "".join(parts)


def _detokenize(state, ids: list[int], prompt_ids: list[int] | None, skip_special: bool) -> str:
    """A whole output at once, decoded as vLLM's derender does (the streaming decode, seeded
    from the prompt tail; an incomplete UTF-8 tail stays out)."""
    return _detok_delta(state.tokenizer, ids, _seed_detok(state.tokenizer, prompt_ids, skip_special), skip_special)


def _check_tokens_mode(resp: _GenResponse) -> None:
    if resp.output_mode != "tokens":
        raise APIError(400, "Only output_mode='tokens' generate responses can be derendered.", "generate_response")


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None, "completion_tokens_details": None}


def _bool(d: dict[str, Any] | None, key: str, default: bool) -> bool:
    v = (d or {}).get(key)
    return default if v is None else bool(v)


class _GenStreamChoice(msgspec.Struct):
    index: int
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    logprobs: _GenLogprobs | None = None


class _GenUsage(msgspec.Struct):
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0


class _GenStreamResponse(msgspec.Struct):
    choices: list[_GenStreamChoice]
    request_id: str | None = None
    usage: _GenUsage | None = None
    prompt_token_ids: list[int] | None = None
    metrics: dict[str, Any] | None = None
    output_mode: str = "tokens"


class DerenderStreamState(msgspec.Struct):
    """vLLM's `DerenderStreamState`: what the client carries from one streaming derender call to
    the next (a decode window, the logprob repair context, and the parser replay fields, which
    are only carried through here)."""

    prev_tokens: list[str] = []
    prefix_offset: int = 0
    read_offset: int = 0
    role_sent: bool = False
    logprob_context_token_ids: list[int] = []
    logprob_text_offset: int = 0
    output_token_ids: list[int] = []
    output_chunk_lens: list[int] = []
    tools_streamed: bool = False
    last_tool_call_ids: list[str] = []


class _DerenderStreamRequest(msgspec.Struct):
    """What the chat and completion derender streams both take: one generate chunk and the
    state the previous chunk's answer handed the client."""
    generate_chunk: _GenStreamResponse
    stream: bool = True
    model: str | None = None
    stream_state: DerenderStreamState | None = None
    prompt_tokens: int | None = None
    prompt_token_ids: list[int] | None = None


class DerenderChatStreamRequest(_DerenderStreamRequest):
    chat_request: dict[str, Any] | None = None


class DerenderCompletionStreamRequest(_DerenderStreamRequest):
    completion_request: dict[str, Any] | None = None


class _StreamFlag(msgspec.Struct):
    stream: Any = False


def _wants_stream(body: bytes) -> bool:
    """vLLM picks the request model on `stream` (`Literal[True]` is the streaming one)."""
    try:
        return msgspec.json.decode(body, type=_StreamFlag).stream is True
    except (msgspec.ValidationError, msgspec.DecodeError):
        return False  # the non-streaming decode reports it


def _logprob_decode(state):
    return lambda ids: state.tokenizer.decode(ids, skip_special_tokens=False)


def _resolve_logprobs(state, content: list[_GenLogprobContent], context: list[int] = ()) -> list[dict[str, Any]]:
    """vLLM's derender `_resolve_logprobs`: each position's sampled id and top-k ids as text, with
    the same U+FFFD repair as the generation routes (context: the sampled ids before, seeded
    with `context` from earlier stream chunks)."""
    texts = SampledTexts(state.token_text, _logprob_decode(state))
    texts.seed(0, list(context))
    out = []
    for e in content:
        names = texts.row(0, [e.token_id, *(t.token_id for t in e.top_logprobs)])

        def entry(tid: int, logprob: float) -> dict[str, Any]:
            s = names[tid]
            return {"token": s, "logprob": logprob, "bytes": list(s.encode("utf-8", "replace"))}

        out.append({**entry(e.token_id, e.logprob),
                    "top_logprobs": [entry(t.token_id, t.logprob) for t in e.top_logprobs]})
    return out


def _completion_logprobs(entries: list[dict[str, Any]] | None, offset: int = 0) -> dict[str, Any]:
    """vLLM's `_convert_chat_logprobs_to_completion_logprobs`."""
    tokens, token_lps, tops, offsets = [], [], [], []
    for e in entries or []:
        offsets.append(offset)
        tokens.append(e["token"])
        token_lps.append(e["logprob"])
        tops.append({t["token"]: t["logprob"] for t in e["top_logprobs"]} if e["top_logprobs"] else None)
        offset += len(e["token"])
    return {"text_offset": offsets, "token_logprobs": token_lps, "tokens": tokens, "top_logprobs": tops}


def _derender_route(stream_schema: type, stream, schema: type, whole):
    """The route of a derender: the streaming request (`stream`: one generate chunk) or the
    whole one (`whole`: a whole generate response), as the body's `stream` says."""
    async def handle(request: web.Request) -> web.Response:
        state = request.app[STATE]
        body = await state.read_body(request)
        if _wants_stream(body):
            return stream(state, decode_body(body, stream_schema))
        return whole(state, decode_body(body, schema))

    return handle


def _choice_logprobs(state, c, shape_logprobs, context: list[int] = ()) -> Any:
    """A generate choice's logprobs: its entries resolved (after the `context` ids) as
    `shape_logprobs` writes them (chat's or completions' shape); None when it has none."""
    if c.logprobs is None:
        return None
    entries = None if c.logprobs.content is None else _resolve_logprobs(state, c.logprobs.content, context)
    return shape_logprobs(entries)


def _whole_choice(state, c, prompt_ids: list[int] | None, skip: bool, shape_logprobs) -> tuple[str, Any]:
    """A whole generate choice's text (its ids detokenized after the prompt's) and logprobs."""
    return _detokenize(state, c.token_ids or [], prompt_ids, skip), _choice_logprobs(state, c, shape_logprobs)


def _chat_logprobs(entries: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {"content": entries}


def _derender_chat(state, req: DerenderChatRequest) -> web.Response:
    model = state.check_model(req.model) if req.model else (req.generate_response.model or state.model_names[0])
    resp = req.generate_response
    _check_tokens_mode(resp)
    cr = req.chat_request
    skip = _bool(cr, "skip_special_tokens", True)
    return_ids = _bool(cr, "return_token_ids", False)
    prompt_ids = req.prompt_token_ids if req.prompt_token_ids is not None else resp.prompt_token_ids
    choices = []
    completion = 0
    for c in resp.choices:
        text, lp = _whole_choice(state, c, prompt_ids, skip, _chat_logprobs)
        completion += len(c.token_ids or [])
        choices.append({
            "index": c.index,
            "message": {"role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None,
                        "function_call": None, "reasoning": None},
            "logprobs": lp,
            "finish_reason": c.finish_reason,
            "stop_reason": c.stop_reason,
            "token_ids": c.token_ids if return_ids else None,
            "routed_experts": None,
        })
    return _ok({
        "id": resp.request_id, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": choices, "service_tier": None, "system_fingerprint": None,
        "usage": _usage(req.prompt_tokens or 0, completion), "prompt_logprobs": None, "prompt_token_ids": None,
        "prompt_text": None, "kv_transfer_params": resp.kv_transfer_params,
        "ec_transfer_params": resp.ec_transfer_params, "metrics": None,
    })


def _check_stream_state(st: DerenderStreamState | None) -> None:
    """vLLM's `DerenderStreamState` field checks (a 400 there too)."""
    if st is None:
        return
    if len(st.prev_tokens) > 1024:
        raise APIError(400, f"prev_tokens length ({len(st.prev_tokens)}) exceeds maximum (1024)", "stream_state")
    if st.prefix_offset < 0 or st.read_offset < 0 or st.logprob_text_offset < 0:
        raise APIError(400, "stream_state offsets must be non-negative.", "stream_state")
    if len(st.logprob_context_token_ids) > 4:
        raise APIError(400, "logprob_context_token_ids must hold at most 4 items.", "stream_state")
    if any(n <= 0 for n in st.output_chunk_lens) or sum(st.output_chunk_lens) != len(st.output_token_ids):
        raise APIError(400, f"output_chunk_lens must sum to len(output_token_ids) (got "
                       f"sum={sum(st.output_chunk_lens)}, len(output_token_ids)={len(st.output_token_ids)})",
                       "stream_state")


def _stream_common(state, req, kind: str) -> tuple[str, DerenderStreamState, dict[str, Any] | None]:
    chunk = req.generate_chunk
    if chunk.output_mode != "tokens":
        raise APIError(400, "Only output_mode='tokens' generate chunks can be derendered.", "generate_chunk")
    _check_stream_state(req.stream_state)
    model = state.check_model(req.model) if req.model else state.model_names[0]
    policy = state.config.policy
    if policy.tool_call_parser or policy.reasoning_parser:
        # vLLM replays the parser over the carried output ids on every chunk; not done here.
        raise APIError(400, "Streaming derender with a tool or reasoning parser configured is not supported "
                       "by this server.", "stream")
    if len(chunk.choices) > 1:
        raise APIError(400, f"derender_{kind}_stream expects at most one choice per chunk"
                       + (f" (got {len(chunk.choices)})." if kind == "chat" else ""), "generate_chunk")
    max_len = state.max_model_len
    prompt_len = len(req.prompt_token_ids) if req.prompt_token_ids is not None else 0
    if kind == "chat":
        prior = len(req.stream_state.output_token_ids) if req.stream_state is not None else 0
        delta = sum(len(c.token_ids) for c in chunk.choices if c.token_ids)
        if prompt_len + prior + delta > max_len:
            raise APIError(400, f"prompt_token_ids length ({prompt_len}) plus output_token_ids length ({prior}) "
                           f"plus delta ({delta}) exceeds max_model_len ({max_len}).", "prompt_token_ids")
    elif prompt_len > max_len:
        raise APIError(400, f"prompt_token_ids length ({prompt_len}) exceeds max_model_len ({max_len}).",
                       "prompt_token_ids")
    usage = None
    if chunk.usage is not None:
        pt = req.prompt_tokens if req.prompt_tokens is not None else (chunk.usage.prompt_tokens or 0)
        usage = _usage(pt, chunk.usage.completion_tokens or 0)
    return model, req.stream_state, usage


def _start_state(state, st: DerenderStreamState | None, req, skip: bool) -> dict[str, Any]:
    """The carried state as a dict; on the first call, seeded from the prompt tail."""
    if st is None:
        seed = req.prompt_token_ids if req.prompt_token_ids is not None else req.generate_chunk.prompt_token_ids
        return {**msgspec.structs.asdict(DerenderStreamState()), **_seed_detok(state.tokenizer, seed, skip)}
    return msgspec.structs.asdict(st)


def _derender_chat_stream(state, req: DerenderChatStreamRequest) -> web.Response:
    """One generate SSE chunk in, `{chunk, stream_state}` out: vLLM's stateless streaming derender
    (a JSON body, not SSE; the client calls once per generate chunk, carrying `stream_state`)."""
    model, st, usage = _stream_common(state, req, "chat")
    cr = req.chat_request
    skip = _bool(cr, "skip_special_tokens", True)
    return_ids = _bool(cr, "return_token_ids", False)
    new = _start_state(state, st, req, skip)
    context = list(new["logprob_context_token_ids"])
    choices = []
    for c in req.generate_chunk.choices:
        ids = c.token_ids or []
        text = _detok_delta(state.tokenizer, ids, new, skip)
        lp = _choice_logprobs(state, c, _chat_logprobs, context)
        include_role = not new["role_sent"]
        new["role_sent"] = True
        new["logprob_context_token_ids"] = (context + list(ids))[-4:]
        choices.append({
            "index": c.index,
            "delta": {"role": "assistant" if include_role else None, "content": text or None, "reasoning": None},
            "logprobs": lp, "finish_reason": c.finish_reason, "stop_reason": c.stop_reason,
            "token_ids": c.token_ids if return_ids else None,
        })
    chunk = {
        "id": _chunk_id(req.generate_chunk), "object": "chat.completion.chunk", "created": int(time.time()),
        "model": model, "choices": choices, "usage": usage, "system_fingerprint": None, "prompt_token_ids": None,
        "prompt_text": None, "metrics": req.generate_chunk.metrics,
    }
    return _ok({"chunk": chunk, "stream_state": new})


def _chunk_id(chunk: _GenStreamResponse) -> str:
    return chunk.request_id if chunk.request_id is not None else secrets.token_hex(16)


def _derender_completion_stream(state, req: DerenderCompletionStreamRequest) -> web.Response:
    model, st, usage = _stream_common(state, req, "completion")
    cr = req.completion_request
    skip = _bool(cr, "skip_special_tokens", True)
    new = _start_state(state, st, req, skip)
    context, offset = list(new["logprob_context_token_ids"]), new["logprob_text_offset"]
    choices = []
    for c in req.generate_chunk.choices:
        ids = c.token_ids or []
        text = _detok_delta(state.tokenizer, ids, new, skip)
        lp = _choice_logprobs(state, c, lambda entries: _completion_logprobs(entries, offset), context)
        new["logprob_context_token_ids"] = (context + list(ids))[-4:]
        new["logprob_text_offset"] = offset + len(text)
        choices.append({"index": c.index, "text": text, "logprobs": lp, "finish_reason": c.finish_reason,
                        "stop_reason": c.stop_reason, "prompt_token_ids": None, "token_ids": None})
    chunk = {
        "id": _chunk_id(req.generate_chunk), "object": "text_completion", "created": int(time.time()),
        "model": model, "choices": choices, "usage": usage, "system_fingerprint": None,
        "metrics": req.generate_chunk.metrics,
    }
    return _ok({"chunk": chunk, "stream_state": new})


def _derender_completion(state, req: DerenderCompletionRequest) -> web.Response:
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
    choices = []
    completion = 0
    for i, resp in enumerate(req.generate_responses):
        _check_tokens_mode(resp)
        seed = req.prompt_token_ids[i] if req.prompt_token_ids else None
        prompt_ids = seed if seed is not None else resp.prompt_token_ids
        n = len(resp.choices)
        for c in resp.choices:
            text, lp = _whole_choice(state, c, prompt_ids, skip, _completion_logprobs)
            completion += len(c.token_ids or [])
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


handle_derender_chat = _derender_route(DerenderChatStreamRequest, _derender_chat_stream,
                                       DerenderChatRequest, _derender_chat)
handle_derender_completion = _derender_route(DerenderCompletionStreamRequest, _derender_completion_stream,
                                             DerenderCompletionRequest, _derender_completion)
