"""vLLM's scale-out derender routes (vLLM 0.32 `entrypoints/scale_out/derender`): generate
responses (`output_mode: "tokens"`) in, the OpenAI response out.

`POST /v1/chat/completions/derender` and `POST /v1/completions/derender` detokenize the token ids
(vLLM's incremental detokenizer, ported so its streaming state is plain data), give logprobs
their token strings with vLLM's repair of split multi-byte characters, and count usage. With
`stream: true` the body is one generate SSE chunk plus the `stream_state` the previous call
returned, and the answer is a JSON `{chunk, stream_state}` (vLLM's stateless streaming derender,
not SSE). No engine is involved; render_routes.py serves these next to render.

With a reasoning parser (or a tool parser with --enable-auto-tool-choice) configured, a chat
derender runs the parsers as the chat route does, over text decoded with special tokens kept,
and needs the original `chat_request` (its tools, tool_choice, include_reasoning, template
kwargs). Parser state cannot travel in `stream_state`, so a streaming chat derender replays the
output ids carried there through a fresh parser, chunk by chunk as they came, before parsing the
new chunk (vLLM's `_derender_chat_stream_parsed`); text completions never parse.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend import environment
from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.chat.tools import ToolChoiceError, ToolPlan, plan_tools
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.bodies import decode_body
from vllm_pyfrontend.serving.lowering.chat import chat_template_kwargs_of
from vllm_pyfrontend.serving.prompt_logprobs import SampledTexts
from vllm_pyfrontend.serving.request_pipeline import fold_tool_calls
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


class _PromptLogprob(msgspec.Struct):
    """vLLM's `Logprob` (the generate response's prompt logprobs: token id -> this)."""
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


def _random_request_id() -> str:
    return secrets.token_hex(8)  # (vLLM's generate responses default to a random id too)


class _GenResponse(msgspec.Struct):
    choices: list[_GenChoice]
    request_id: str = msgspec.field(default_factory=_random_request_id)
    model: str | None = None
    created: int | None = None
    prompt_token_ids: list[int] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    output_mode: str = "tokens"
    prompt_logprobs: list[dict[int, _PromptLogprob] | None] | None = None


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


# -- vLLM's bounds on what a derender is given -------------------------------------------------
# Checked before any token is decoded or parsed (vLLM's `_validate_derender_bounds` and
# `_validate_prompt_token_ids`): the payload is the caller's, and each bound keeps its decoding
# within what one generation could have produced. Answered as vLLM answers them (400, no param).


def _check_bounds(state, responses: list[_GenResponse]) -> None:
    """At most VLLM_MAX_N_SEQUENCES responses and choices per response; per choice at most
    max_model_len token ids and logprob positions, at most --max-logprobs top logprobs per
    position (unless it is -1); at most max_model_len prompt logprobs per response."""
    max_n = environment.max_n_sequences()
    max_len = state.max_model_len
    max_logprobs = state.max_logprobs
    if len(responses) > max_n:
        raise APIError(400, f"generate_responses count ({len(responses)}) exceeds server maximum ({max_n}). "
                       "Set VLLM_MAX_N_SEQUENCES to increase this limit.")
    for resp in responses:
        if len(resp.choices) > max_n:
            raise APIError(400, f"choices count ({len(resp.choices)}) in response '{resp.request_id}' exceeds "
                           f"server maximum ({max_n}).")
        for c in resp.choices:
            if c.token_ids and len(c.token_ids) > max_len:
                raise APIError(400, f"token_ids length ({len(c.token_ids)}) in choice {c.index} exceeds "
                               f"max_model_len ({max_len}).")
            content = c.logprobs.content if c.logprobs is not None else None
            if content:
                if len(content) > max_len:
                    raise APIError(400, f"logprobs.content length ({len(content)}) in choice {c.index} exceeds "
                                   f"max_model_len ({max_len}).")
                if max_logprobs >= 0:
                    for e in content:
                        if len(e.top_logprobs) > max_logprobs:
                            raise APIError(400, f"top_logprobs count ({len(e.top_logprobs)}) in choice {c.index} "
                                           f"exceeds max_logprobs ({max_logprobs}).")
        if resp.prompt_logprobs and len(resp.prompt_logprobs) > max_len:
            raise APIError(400, f"prompt_logprobs length ({len(resp.prompt_logprobs)}) in response "
                           f"'{resp.request_id}' exceeds max_model_len ({max_len}).")


def _check_prompt_ids(state, prompt_ids: list[list[int] | None]) -> None:
    max_len = state.max_model_len
    for ids in prompt_ids:
        if ids is not None and len(ids) > max_len:
            raise APIError(400, f"prompt_token_ids length ({len(ids)}) exceeds max_model_len ({max_len}).")


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


# -- parsers (reasoning, tool calls) ------------------------------------------------------------
_NEEDS_CHAT_REQUEST = ("chat_request is required when a tool or reasoning parser is configured because plain "
                       "detokenization would leak raw parser markup into content.")
_NEEDS_PROMPT_IDS = ("prompt_token_ids is required when a tool or reasoning parser is configured. Without it "
                     "parse_delta cannot tell whether the prompt left reasoning open (e.g. a chat template that "
                     "pre-opens <think>) and would misclassify reasoning content as plain content.")


class _ChatRequestView(msgspec.Struct):
    """What a chat derender reads of the original chat request (`chat_request`, the body the
    render step took): how to decode, what the parsers need, what the choices report."""

    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = True
    include_reasoning: bool | None = True
    return_token_ids: bool | None = None
    skip_special_tokens: bool | None = True
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None


def _chat_view(cr: dict[str, Any] | None) -> _ChatRequestView:
    try:
        return msgspec.convert(cr or {}, _ChatRequestView, strict=False)
    except msgspec.ValidationError as e:
        raise APIError(400, f"chat_request: {e}", "chat_request") from None


def _parser_configured(state) -> bool:
    """vLLM's derender has a parser when a reasoning parser is set, or a tool parser with
    --enable-auto-tool-choice (vLLM builds no tool parser without it)."""
    parsers = state.parsers
    return parsers.reasoning_parser is not None or (
        parsers.tool_parser is not None and state.config.policy.enable_auto_tool_choice)


def _assistant_for(state, view: _ChatRequestView, prompt_ids: list[int] | None) -> tuple[ToolPlan, Any]:
    """The chat route's assistant stream (reasoning, then the tool parser its tool plan needs)
    for one choice of the request `view` describes."""
    try:
        plan = plan_tools(
            view.tools, view.tool_choice, parallel_tool_calls=view.parallel_tool_calls,
            auto_enabled=state.config.policy.enable_auto_tool_choice,
            has_parser=state.parsers.tool_parser is not None,
        )
    except ToolChoiceError as e:
        raise APIError(400, e.message, e.param) from None
    template_kwargs = chat_template_kwargs_of(state, view.chat_template_kwargs, view.reasoning_effort)
    return plan, state.parsers.new_assistant_stream(plan, prompt_ids, template_kwargs, view.tools)


def _join(a: AssistantDelta | None, b: AssistantDelta | None) -> AssistantDelta | None:
    if a is None or b is None:
        return a if b is None else b
    return AssistantDelta(content=((a.content or "") + (b.content or "")) or None,
                          reasoning=((a.reasoning or "") + (b.reasoning or "")) or None,
                          tool_calls=a.tool_calls + b.tool_calls)


def _parse_step(assistant, text: str, ids: list[int], finished: bool) -> AssistantDelta | None:
    """One chunk through the assistant stream (vLLM's `parse_delta`), flushed when it ends the
    output; a finishing chunk without tokens only flushes."""
    delta = assistant.feed(text, ids) if ids else None
    if finished:
        delta = _join(delta, assistant.finish())
    return delta


def _parsed_message(state, view: _ChatRequestView, ids: list[int], text: str,
                    prompt_ids: list[int] | None) -> dict[str, Any]:
    """A whole output parsed (vLLM's `_parse_and_assemble`): reasoning, content and tool calls;
    a forced tool choice (named or "required") has content "" rather than null."""
    plan, assistant = _assistant_for(state, view, prompt_ids)
    delta = _parse_step(assistant, text, ids, True)
    reasoning = delta.reasoning if delta is not None and view.include_reasoning is not False else None
    content = delta.content if delta is not None else None
    if plan.mode in ("named", "required"):
        content = content or ""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None, "annotations": None,
                               "audio": None, "function_call": None}
    calls = fold_tool_calls(delta.tool_calls) if delta is not None and delta.tool_calls else []
    if calls:
        message["tool_calls"] = [{
            "id": f"{secrets.randbits(64):016x}", "type": "function",
            "function": {"name": (c.get("function") or {}).get("name") or "",
                         "arguments": (c.get("function") or {}).get("arguments") or ""},
        } for c in calls]
    message["reasoning"] = reasoning or None
    return message


def _delta_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """A streamed tool call item in vLLM's `DeltaToolCall` shape (every field, null when unset)."""
    fn = call.get("function")
    return {"id": call.get("id"), "type": call.get("type"), "index": call.get("index", 0),
            "function": None if fn is None else {"name": fn.get("name"), "arguments": fn.get("arguments")}}


def _derender_chat(state, req: DerenderChatRequest) -> web.Response:
    model = state.check_model(req.model) if req.model else (req.generate_response.model or state.model_names[0])
    resp = req.generate_response
    _check_tokens_mode(resp)
    _check_bounds(state, [resp])
    _check_prompt_ids(state, [req.prompt_token_ids])
    cr = req.chat_request
    parsed = _parser_configured(state)
    if parsed and cr is None:
        raise APIError(400, _NEEDS_CHAT_REQUEST)
    view = _chat_view(cr)
    # With a parser the markers (some are special tokens) must reach it as text.
    skip = False if parsed else view.skip_special_tokens is not False
    return_ids = bool(view.return_token_ids) and (not parsed or view.include_reasoning is not False)
    prompt_ids = req.prompt_token_ids if req.prompt_token_ids is not None else resp.prompt_token_ids
    choices = []
    completion = 0
    for c in resp.choices:
        if not c.token_ids:
            raise APIError(400, f"choice {c.index} has empty or null token_ids")
        text, lp = _whole_choice(state, c, prompt_ids, skip, _chat_logprobs)
        completion += len(c.token_ids or [])
        if parsed:
            # (the parser reads the generate response's own prompt ids, as vLLM's derender does)
            message = _parsed_message(state, view, c.token_ids, text, resp.prompt_token_ids)
        else:
            message = {"role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None,
                       "function_call": None, "reasoning": None}
        choices.append({
            "index": c.index,
            "message": message,
            "logprobs": lp,
            "finish_reason": c.finish_reason,
            "stop_reason": c.stop_reason,
            "token_ids": c.token_ids if return_ids else None,
            "routed_experts": None,
        })
    return _ok({
        "id": resp.request_id, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": choices, "service_tier": None, "system_fingerprint": None,
        "usage": _usage(req.prompt_tokens or 0, completion), "prompt_logprobs": resp.prompt_logprobs,
        "prompt_token_ids": None,
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
    max_len = state.max_model_len
    prompt_len = len(req.prompt_token_ids) if req.prompt_token_ids is not None else 0
    if kind == "chat":
        if _parser_configured(state):
            if req.chat_request is None:
                raise APIError(400, _NEEDS_CHAT_REQUEST)
            if req.prompt_token_ids is None:
                raise APIError(400, _NEEDS_PROMPT_IDS)
        if len(chunk.choices) > 1:
            raise APIError(400, f"derender_chat_stream expects at most one choice per chunk "
                           f"(got {len(chunk.choices)}).")
        prior = len(req.stream_state.output_token_ids) if req.stream_state is not None else 0
        delta = sum(len(c.token_ids) for c in chunk.choices if c.token_ids)
        if prompt_len + prior + delta > max_len:
            raise APIError(400, f"prompt_token_ids length ({prompt_len}) plus output_token_ids length ({prior}) "
                           f"plus delta ({delta}) exceeds max_model_len ({max_len}).")
    else:
        # (text completions never parse: a configured parser changes nothing here)
        _check_prompt_ids(state, [req.prompt_token_ids])
        if len(chunk.choices) > 1:
            raise APIError(400, "derender_completion_stream expects at most one choice per chunk")
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
    if _parser_configured(state):
        return _derender_chat_stream_parsed(state, req, model, st, usage)
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


def _derender_chat_stream_parsed(state, req: DerenderChatStreamRequest, model: str,
                                 st: DerenderStreamState | None, usage: dict[str, Any] | None) -> web.Response:
    """The streaming chat derender with parsers: a fresh assistant stream is given the output
    ids carried in `stream_state` again, chunk by chunk as they came (`output_chunk_lens`), its
    deltas dropped, then this chunk's ids; the answer is that last delta. The text is decoded
    again from the prompt's tail with special tokens kept; the tool call ids given before are
    pinned by index (a replay makes new ones) and a streamed tool call makes the finish
    "tool_calls" (not for a named tool choice). The decode window of `stream_state` is not
    used: it goes back as it came."""
    tok = state.tokenizer
    view = _chat_view(req.chat_request)
    prior = st if st is not None else DerenderStreamState()
    new = msgspec.structs.asdict(prior)
    try:
        plan, assistant = _assistant_for(state, view, req.prompt_token_ids)
        detok = _seed_detok(tok, req.prompt_token_ids, False)
        pos = 0
        for n in prior.output_chunk_lens:
            ids = prior.output_token_ids[pos:pos + n]
            pos += n
            _parse_step(assistant, _detok_delta(tok, ids, detok, False), ids, False)
        choices = []
        output_ids, chunk_lens = list(prior.output_token_ids), list(prior.output_chunk_lens)
        tools_streamed, call_ids = prior.tools_streamed, list(prior.last_tool_call_ids)
        role_sent = prior.role_sent
        for c in req.generate_chunk.choices[:1]:
            ids = list(c.token_ids or [])
            text = _detok_delta(tok, ids, detok, False) if ids else ""
            delta = _parse_step(assistant, text, ids, c.finish_reason is not None)
            if ids:
                output_ids += ids
                chunk_lens.append(len(ids))
            reasoning = delta.reasoning if delta is not None and view.include_reasoning is not False else None
            content = delta.content if delta is not None else None
            calls = [_delta_tool_call(t) for t in fold_tool_calls(delta.tool_calls)] \
                if delta is not None and delta.tool_calls else []
            if calls:
                tools_streamed = True
                for call in calls:
                    if call["id"] is None:
                        continue
                    if call["index"] < len(call_ids):
                        call["id"] = call_ids[call["index"]]
                    else:
                        call_ids.append(call["id"])
            if view.parallel_tool_calls is False:
                calls = [t for t in calls if t["index"] == 0]
            d: dict[str, Any] = {"role": None if role_sent else "assistant", "content": content,
                                 "reasoning": reasoning or None}
            if calls:
                d["tool_calls"] = calls
            role_sent = True
            finish = c.finish_reason
            if finish is not None and tools_streamed and plan.mode != "named":
                finish = "tool_calls"
            choices.append({
                "index": c.index, "delta": d, "logprobs": None, "finish_reason": finish,
                "stop_reason": c.stop_reason,
                "token_ids": c.token_ids if view.return_token_ids and view.include_reasoning is not False else None,
            })
    except APIError:
        raise
    except Exception:  # noqa: BLE001 - the replay runs over client-controlled state (vLLM: a 400)
        raise APIError(400, "invalid stream_state: derender failed") from None
    new.update(output_token_ids=output_ids, output_chunk_lens=chunk_lens, role_sent=role_sent,
               tools_streamed=tools_streamed, last_tool_call_ids=call_ids)
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
    count = len(req.generate_responses)
    if req.prompt_tokens is not None and len(req.prompt_tokens) != count:
        raise APIError(400, f"prompt_tokens length ({len(req.prompt_tokens)}) must equal generate_responses length "
                       f"({count})", "prompt_tokens")
    if req.prompt_token_ids is not None and len(req.prompt_token_ids) != count:
        raise APIError(400, f"prompt_token_ids length ({len(req.prompt_token_ids)}) must equal generate_responses "
                       f"length ({count})", "prompt_token_ids")
    first = req.generate_responses[0] if req.generate_responses else None
    model = state.check_model(req.model) if req.model else (
        (first.model if first is not None else None) or state.model_names[0])
    if first is None:
        raise APIError(400, "generate_responses must not be empty")
    _check_bounds(state, req.generate_responses)
    if req.prompt_token_ids is not None:
        _check_prompt_ids(state, req.prompt_token_ids)
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
            if not c.token_ids:
                raise APIError(400, f"choice {c.index} in response {resp.request_id} has empty or null token_ids")
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
