"""POST /inference/v1/generate: token ids in, token ids (and logprobs) out, as JSON or SSE.

vLLM's scale-out "tokens in / tokens out" route (vLLM 0.32 `entrypoints/scale_out/
token_in_token_out/`): the prompt is already tokens (a /render answer, or any client's), the
sampling parameters are vLLM's `SamplingParams` by field name, and the answer carries token ids,
and with `output_mode: "text"` the detokenized text too. Like vLLM it is served with
`--enable-scale-out`; without the flag every scale-out route answers 403.

The request runs through the same pipeline as the OpenAI routes (`RequestRun`: detokenizer and
stop strings, n choices, cancellation, usage) with its own formatter, `GenerateFormatter`.
`/inference/v1/abort_requests` aborts requests by the ids this route answered with, whichever
worker runs them (`peer_abort.py`).
"""

from __future__ import annotations

import math
import secrets
import time
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend.chat.assistant import AssistantStream
from vllm_pyfrontend.engine.types import Logprobs
from vllm_pyfrontend.llm import limits
from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.llm.prompt import bad_words_token_ids, check_prompt_ids
from vllm_pyfrontend.llm.sampling import check_n, lower_choices
from vllm_pyfrontend.llm.structured import STRUCTURED_KEYS, lower_structured_outputs
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.api.openai.scale_out import scale_out_disabled
from vllm_pyfrontend.serving.responder import new_choice, new_sse, respond, submit_choices
from vllm_pyfrontend.serving.scope import RequestScope
from vllm_pyfrontend.serving.request_pipeline import Choice, RequestRun
from vllm_pyfrontend.serving.bodies import decode_body
from vllm_pyfrontend.api.openai.token_schemas import GenerateRequest, options_of
from vllm_pyfrontend.serving.peer_abort import PEER_ABORT, abort_owner
from vllm_pyfrontend.serving.state import STATE

_enc = msgspec.json.encode
WEIGHT_VERSION = "default"  # the engine's weight version until weights are updated


def _clamp(v: float) -> float:
    return -9999.0 if math.isnan(v) else max(v, -9999.0)


def _entries(lp: Logprobs, i: int, top: int | None) -> list[tuple[int, float, int | None]]:
    """Position i's logprob entries as vLLM's dict orders them: the sampled token first (with
    its rank), then the top-k (rank 1..K), one entry per token; the first max(top, 1) of them
    (-1: all)."""
    ranks = [lp.sampled_ranks[i] if i < len(lp.sampled_ranks) else None, *range(1, len(lp.token_ids[i]))]
    row: dict[int, tuple[float, int | None]] = {}
    for t, v, r in zip(lp.token_ids[i], lp.logprobs[i], ranks):
        row[t] = (v, r)  # a later duplicate keeps the position and updates the value (as a dict)
    items = [(t, v, r) for t, (v, r) in row.items()]
    if top is None:
        return []
    return items if top == -1 else items[:max(top, 1)]


class GenerateFormatter:
    """The generate route's wire format (GenerateTokens/Text[Stream]Response)."""

    def __init__(self, request_id: str, model: str, created: int, *, text_mode: bool, top_logprobs: int | None,
                 token_text, prompt_ids: list[int] | None):
        self.request_id = request_id
        self.model = model
        self.created = created
        self.text_mode = text_mode
        self.top = top_logprobs
        self.token_text = token_text
        self.prompt_ids = prompt_ids  # return_token_ids: in the body, or once in the first chunk
        self.mode = "text" if text_mode else "tokens"
        self._prefix = b'{"request_id":' + _enc(request_id)

    # -- logprobs ---------------------------------------------------------------------------
    def format_logprobs(self, choice: Choice, token_ids: list[int], lp: Logprobs) -> list[dict[str, Any]]:
        out = []
        for i, tid in enumerate(token_ids):
            if i >= len(lp.token_ids):
                break
            entries = _entries(lp, i, self.top)
            sampled = next(((v, r) for t, v, r in _entries(lp, i, -1) if t == tid), None)
            if self.text_mode:
                tok = self.token_text(tid)
                if sampled is None:
                    out.append({"token": tok, "logprob": -9999.0, "bytes": list(tok.encode()), "top_logprobs": []})
                    continue
                out.append({
                    "token": tok, "logprob": _clamp(sampled[0]), "bytes": list(tok.encode("utf-8", "replace")),
                    "top_logprobs": [{"token": (s := self.token_text(t)), "logprob": _clamp(v),
                                      "bytes": list(s.encode("utf-8", "replace"))} for t, v, _ in entries],
                })
            else:
                if sampled is None:
                    out.append({"token_id": tid, "logprob": -9999.0, "rank": None, "top_logprobs": []})
                    continue
                out.append({
                    "token_id": tid, "logprob": _clamp(sampled[0]), "rank": sampled[1] or None,
                    "top_logprobs": [{"token_id": t, "logprob": _clamp(v), "rank": r or None} for t, v, r in entries],
                })
        return out

    # -- streaming --------------------------------------------------------------------------
    def _choice(self, run: RequestRun, choice: Choice, text: str, token_ids: list[int], logprobs,
                finish: str | None, stop_reason, total_tokens: int) -> dict[str, Any]:
        item: dict[str, Any] = {
            "index": choice.index,
            "finish_reason": finish,
            "stop_reason": stop_reason,
            "token_ids": token_ids,
            "routed_experts": None,
            "sampling_mask": None,
            "weight_versions": ([{"version": WEIGHT_VERSION, "start": 0, "end": total_tokens}]
                                if finish is not None else None),
        }
        if self.text_mode:
            item["text"] = text
        item["logprobs"] = {"content": logprobs} if logprobs is not None else None
        return item

    def stream_delta(self, run: RequestRun, choice: Choice, delta, logprobs, token_ids, finish, stop_reason) -> None:
        sse = run.sse
        assert sse is not None
        text = (delta.content or "") if delta is not None else ""
        token_ids = token_ids or []
        if not token_ids and finish is None and not (self.text_mode and text):
            return
        total = choice.gen.num_output_tokens if choice.gen is not None else 0
        usage = None
        if run.continuous_usage:
            u = run.choice_usage(choice)
            usage = {"prompt_tokens": u["prompt_tokens"], "total_tokens": u["total_tokens"],
                     "completion_tokens": u["completion_tokens"], "prompt_tokens_details": None}
        data = self._prefix + b',"usage":' + _enc(usage)
        if self.prompt_ids is not None:
            data += b',"prompt_token_ids":' + _enc(self.prompt_ids)
            self.prompt_ids = None
        data += b',"output_mode":' + _enc(self.mode) + b',"choices":['
        data += _enc(self._choice(run, choice, text, token_ids, logprobs, finish, stop_reason, total))
        sse.write(b"data: " + data + b"]}\n\n")

    def stream_usage(self, run: RequestRun) -> None:
        assert run.sse is not None
        u = run.usage()
        body = {"request_id": self.request_id,
                "usage": {"prompt_tokens": u["prompt_tokens"], "total_tokens": u["total_tokens"],
                          "completion_tokens": u["completion_tokens"]},
                "output_mode": self.mode, "choices": []}
        run.sse.write(b"data: " + _enc(body) + b"\n\n")

    # -- one body ---------------------------------------------------------------------------
    def body(self, run: RequestRun, system_fingerprint: str | None = None) -> dict[str, Any]:
        choices = []
        for c in run.choices:
            gen = c.gen
            lp = [e for part in c.logprobs for e in part] if run.want_logprobs else None
            item = self._choice(run, c, "".join(c.content), c.token_ids, lp,
                                gen.finish_reason if gen and gen.finish_reason else "stop",
                                gen.stop_reason if gen else None, len(c.token_ids))
            choices.append(item)
        return {
            "request_id": self.request_id,
            "model": self.model,
            "created": self.created,
            "usage": {**run.usage(), "prompt_tokens_details": None, "completion_tokens_details": None},
            "prompt_logprobs": None,
            "prompt_token_id_logprobs": None,
            "prompt_token_ids": self.prompt_ids,
            "mm_placeholders": None,
            "metrics": None,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "output_mode": self.mode,
            "choices": choices,
        }


def _structured(so: dict[str, Any] | None) -> dict[str, Any] | None:
    """A SamplingParams `structured_outputs` as a client (or /render) writes it: the keys of
    StructuredOutputsParams, the private `_backend*` ones included, unset ones null."""
    if not so:
        return None
    given = {k: v for k, v in so.items() if not k.startswith("_") and v not in (None, False)}
    unknown = set(given) - set(STRUCTURED_KEYS)
    if unknown:
        raise InvalidRequestError(f"Unknown structured_outputs keys: {sorted(unknown)}.", "structured_outputs")
    kinds = [k for k in ("json", "regex", "choice", "grammar", "json_object", "structural_tag") if k in given]
    if len(kinds) > 1:
        raise InvalidRequestError("You can only use one kind of constraints for structured outputs "
                                  "('json', 'regex' or 'choice').", "structured_outputs")
    return lower_structured_outputs(given, None) if kinds else None


async def handle_generate(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    async with state.scopes.http(request, "generate") as scope:
        return await _generate(request, state, scope)


async def _generate(request: web.Request, state, scope: RequestScope) -> web.StreamResponse:
    req: GenerateRequest = decode_body(await state.read_body(request), GenerateRequest)
    model = state.check_model(req.model)
    state.check_generation()
    scope.check_engine()
    sp = req.sampling_params
    if not req.token_ids:
        raise APIError(400, "token_ids must hold at least one token id.", "token_ids")
    if req.features is not None or req.content_parts:
        raise APIError(400, "Multimodal inputs are not supported by this text-only server.", "features")
    if state.config.policy.tokens_only:
        # vLLM's --tokens-only: no detokenizing, whatever the request asks (so no stop strings,
        # which are matched on text, and no text output).
        if sp.stop:
            raise APIError(400, "stop strings are not supported on a --tokens-only server because "
                           "detokenization is disabled. Check stop strings on the coordinator, or use "
                           "stop_token_ids.", "stop")
        if req.output_mode != "tokens":
            raise APIError(400, f"output_mode={req.output_mode!r} requires a tokenizer, but this server "
                           "does not load one (--tokens-only or --skip-tokenizer-init). Send the request "
                           "to a server that loads a tokenizer, or use output_mode='tokens'.", "output_mode")
        sp.detokenize = False
    if req.output_mode != "tokens" and not sp.detokenize:
        raise APIError(400, f"output_mode={req.output_mode!r} requires sampling_params.detokenize to be true",
                       "output_mode")
    if sp.prompt_logprobs is not None:
        raise APIError(400, "sampling_params.prompt_logprobs is not supported on this route.", "prompt_logprobs")
    limits.check_stop(sp.stop, limit=None)
    if sp.stop and not sp.detokenize:
        raise APIError(400, "stop strings are only supported when detokenize is True. Set detokenize=True to "
                       "use stop.", "stop")
    limits.check_bad_words(sp.bad_words)
    limits.check_cache_salt(req.cache_salt)
    if sp.logprobs is not None and sp.logprobs < -1:
        raise APIError(400, f"logprobs must be non-negative or -1, got {sp.logprobs}.", "logprobs")
    n = check_n(sp.n, sp.temperature < 1e-5)
    max_num_seqs = next((i.max_num_seqs for i in state.engine.engine_infos if i.max_num_seqs), None)
    if max_num_seqs is not None and n > max_num_seqs:
        raise APIError(400, f"sampling_params.n must be at most the server's max_num_seqs ({max_num_seqs}), "
                       f"got {n}.", "n")
    prompt_ids = check_prompt_ids(list(req.token_ids), state.limits.vocab_size, "token_ids")
    opts = options_of(sp)
    if req.kv_transfer_params is not None or req.ec_transfer_params is not None:
        extra = dict(opts.extra_args or {})
        if req.kv_transfer_params is not None:
            extra["kv_transfer_params"] = req.kv_transfer_params
        if req.ec_transfer_params is not None:
            extra["ec_transfer_params"] = req.ec_transfer_params
        opts.extra_args = extra
    bad = bad_words_token_ids(state.tokenizer.encode, sp.bad_words, state.limits.vocab_size) if sp.bad_words else None
    logprobs = sp.logprobs
    if logprobs == -1:
        logprobs = state.limits.vocab_size  # vLLM: -1 is the whole vocabulary (refused past max_logprobs)
    samplings = lower_choices(state.limits, opts, len(prompt_ids), n, logprobs=logprobs,
                              structured=_structured(sp.structured_outputs), bad_words=bad)

    stream = bool(req.stream)
    so = req.stream_options
    include_usage = bool(stream and so and so.include_usage)
    continuous = include_usage and bool(so.continuous_usage_stats)
    response_id = f"generate-tokens-{req.request_id or secrets.token_hex(8)}"
    created = int(time.time())
    text_mode = req.output_mode == "text"
    formatter = GenerateFormatter(response_id, model, created, text_mode=text_mode, top_logprobs=sp.logprobs,
                                  token_text=state.token_text,
                                  prompt_ids=list(prompt_ids) if req.return_token_ids else None)
    choices = [new_choice(state, i, prompt_ids, opts, AssistantStream()) for i in range(n)]
    run = RequestRun(response_id=response_id, model=model, created=created, choices=choices,
                     num_prompt_tokens=len(prompt_ids), stream=stream, include_usage=include_usage,
                     continuous_usage=continuous, formatter=formatter, want_logprobs=sp.logprobs is not None,
                     return_token_ids=True,
                     sse=new_sse(state, response_id, model, created, "generate") if stream else None,
                     stream_interval=max(sp.stream_interval or 1, state.stream_interval))
    sub = submit_choices(state, scope, run, [(c, prompt_ids, s) for c, s in zip(choices, samplings)],
                         priority=req.priority, cache_salt=req.cache_salt, requested_max_tokens=opts.max_tokens)
    peers = request.app.get(PEER_ABORT)
    if peers is not None:
        peers.track(response_id, sub, scope.caller.tenant.owner)
    try:
        return await respond(state, request, run, role_chunks=False)
    finally:
        if peers is not None:
            peers.untrack(response_id, sub)


async def handle_abort_requests(request: web.Request) -> web.Response:
    """Abort requests by the ids /inference/v1/generate answered with (any worker's)."""
    raw = await request.app[STATE].read_body(request)
    try:
        body = msgspec.json.decode(raw or b"null")
    except msgspec.DecodeError as e:
        raise APIError(400, f"JSON decode error: {e}") from None
    ids = body.get("request_ids") if isinstance(body, dict) else None
    if ids is None:
        raise APIError(400, "Missing 'request_ids' in request body")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise APIError(400, "'request_ids' must be a list of strings.")
    request.app[PEER_ABORT].abort_everywhere(ids, abort_owner(request))
    return web.Response(status=200)


def add_routes(app: web.Application) -> None:
    """/inference/v1/generate and /inference/v1/abort_requests with --enable-scale-out; without
    it both answer 403, as vLLM's."""
    from vllm_pyfrontend.serving.peer_abort import install

    policy = app[STATE].config.policy
    if policy.enable_scale_out or policy.tokens_only:
        install(app)
        app.router.add_post("/inference/v1/generate", handle_generate)
        app.router.add_post("/inference/v1/abort_requests", handle_abort_requests)
        if policy.tokens_only:
            # vLLM keeps this path (outside /v1 and /inference, so no `--api-key`; a keys file
            # guards it) for existing tokens-only deployments.
            app.router.add_post("/abort_requests", handle_abort_requests)
    else:
        app.router.add_post("/inference/v1/generate", scale_out_disabled)
        app.router.add_post("/inference/v1/abort_requests", scale_out_disabled)
