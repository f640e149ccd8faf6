"""What the generation APIs (chat and text completions) share: turning a validated request
into sampling options and engine requests (n choices per prompt), submitting them, and
answering with SSE or JSON from the one `RequestRun` pipeline."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import msgspec
from aiohttp import web

from vllm_pyfrontend.engine.types import EngineDeadError, EngineRequest, InvalidEngineRequest
from vllm_pyfrontend.llm.generation import Generation
from vllm_pyfrontend.llm.request_ids import make_request_id
from vllm_pyfrontend.llm.sampling import ContextLengthError, SamplingOptions, lower_sampling, resolve_max_tokens
from vllm_pyfrontend.server.errors import APIError
from vllm_pyfrontend.server.request_pipeline import Choice, RequestRun
from vllm_pyfrontend.server.sse import SSEWriter
from vllm_pyfrontend.text.text_stream import TextStream

_json = msgspec.json.encode
_MAX_BAD_WORDS = 128  # vLLM's VLLM_MAX_NUM_BAD_WORDS default

STRUCTURED_KEYS = (
    "json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace",
    "disable_additional_properties", "whitespace_pattern", "structural_tag",
)  # fmt: skip


def options_from(req: Any, max_tokens: int | None) -> SamplingOptions:
    """Sampling options from a chat or completion request struct (same field names)."""
    stop = req.stop
    if isinstance(stop, str):
        stop = [stop]
    logit_bias = None
    if req.logit_bias:
        try:
            logit_bias = {int(k): v for k, v in req.logit_bias.items()}
        except ValueError:
            raise APIError(400, "`logit_bias` keys must be token ids.", "logit_bias") from None
    extra = dict(req.vllm_xargs) if req.vllm_xargs else {}
    if req.kv_transfer_params:
        extra["kv_transfer_params"] = req.kv_transfer_params
    return SamplingOptions(
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        min_p=req.min_p,
        seed=req.seed,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        repetition_penalty=req.repetition_penalty,
        min_tokens=req.min_tokens,
        stop=[s for s in (stop or []) if s],
        stop_token_ids=list(req.stop_token_ids or []),
        ignore_eos=req.ignore_eos,
        include_stop_str_in_output=req.include_stop_str_in_output,
        skip_special_tokens=req.skip_special_tokens,
        spaces_between_special_tokens=req.spaces_between_special_tokens,
        logit_bias=logit_bias,
        allowed_token_ids=req.allowed_token_ids,
        extra_args=extra or None,
    )


def structured_outputs_from(req: Any) -> dict[str, Any] | None:
    """vLLM's `structured_outputs` + `response_format` lowered to the engine's map."""
    so: dict[str, Any] | None = None
    if req.structured_outputs:
        unknown = set(req.structured_outputs) - set(STRUCTURED_KEYS)
        if unknown:
            raise APIError(400, f"Unknown structured_outputs keys: {sorted(unknown)}.", "structured_outputs")
        so = dict(req.structured_outputs)
    rf = req.response_format
    if rf is not None:
        kind = rf.get("type")
        if kind == "text":
            pass
        elif kind == "json_object":
            so = {**(so or {}), "json_object": True}
        elif kind == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict):
                raise APIError(
                    400, "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
                    "response_format",
                )
            schema = js.get("schema", js.get("json_schema"))
            if not isinstance(schema, dict):
                raise APIError(400, "response_format.json_schema.schema must be an object.", "response_format")
            so = {**(so or {}), "json": schema}
        else:
            raise APIError(400, f"response_format type {kind!r} is not supported.", "response_format")
    if so is None:
        return None
    if so.get("choice") is not None:
        choice = so["choice"]
        if not isinstance(choice, list) or not choice or not all(isinstance(c, str) for c in choice):
            raise APIError(400, "structured_outputs.choice must be a non-empty list of strings.", "structured_outputs")
        # As vLLM's frontend does for the xgrammar backend: choices become an EBNF grammar.
        so = {**so, "choice": None, "grammar": choice_as_grammar(choice)}
    full = {k: so.get(k) for k in STRUCTURED_KEYS}
    full["disable_any_whitespace"] = bool(full["disable_any_whitespace"])
    full["disable_additional_properties"] = bool(full["disable_additional_properties"])
    full["_backend"] = "xgrammar"
    full["_backend_was_auto"] = True
    return full


def forced_json(schema: dict[str, Any]) -> dict[str, Any]:
    """A structured-outputs map that forces `schema` (a tool choice), in the engine's full form."""
    full: dict[str, Any] = {k: None for k in STRUCTURED_KEYS}
    full.update(json=schema, disable_any_whitespace=False, disable_additional_properties=False,
                _backend="xgrammar", _backend_was_auto=True)
    return full


def _ebnf_literal(text: str) -> str:
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    out = []
    for ch in text:
        if ch in escapes:
            out.append(escapes[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def choice_as_grammar(choices: list[str]) -> str:
    """An EBNF grammar accepting exactly one of `choices`."""
    return "root ::= " + " | ".join(_ebnf_literal(c) for c in choices)


def bad_words_token_ids(encode: Callable[[str], list[int]], words: list[str], vocab_size: int) -> list[list[int]]:
    """vLLM's SamplingParams.update_from_tokenizer: each word, bare and with a leading space."""
    out: list[list[int]] = []
    for word in words:
        for prefix_space in (False, True):
            ids = encode((" " if prefix_space else "") + word.lstrip())
            if not ids:
                if not prefix_space:
                    raise APIError(400, "bad_words entries must tokenize to at least one token.", "bad_words")
                continue
            if not prefix_space or (out and ids[0] != out[-1][0] and len(ids) == len(out[-1])):
                out.append(ids)
                if len(out) > _MAX_BAD_WORDS:
                    raise APIError(400, f"Too many bad words after tokenization: {len(out)}. "
                                   f"The max number is {_MAX_BAD_WORDS}.", "bad_words")
    bad = [t for ids in out for t in ids if t < 0 or t >= vocab_size]
    if bad:
        raise APIError(400, f"bad_words tokenize to ids outside the vocabulary: {bad}.", "bad_words")
    return out


def truncate_prompt(ids: list[int], truncate: int | None, max_model_len: int) -> list[int]:
    if truncate is None:
        return ids
    keep = max_model_len if truncate == -1 else truncate
    return ids[-keep:] if keep and len(ids) > keep else ids


class Submission:
    """Engine requests for every choice of a request, and the run that consumes them."""

    def __init__(self, state, run: RequestRun):
        self.state = state
        self.run = run
        self.requests: list[tuple[EngineRequest, Generation]] = []
        self.arrival = time.monotonic()

    def add_choice(self, choice: Choice, prompt_ids: list[int], sampling: dict[str, Any], *,
                   external_id: str, priority: int, cache_salt: str | None, trace_headers=None) -> None:
        engine_id = make_request_id(self.run.response_id.split("-", 1)[0], self.state.worker_index)
        gen = Generation(engine_id, choice.index, self.run, self.state.engine, len(prompt_ids))
        choice.gen = gen
        choice.metrics = self.state.metrics.start_request(arrival=self.arrival)
        req = EngineRequest(
            request_id=engine_id,
            prompt_token_ids=prompt_ids,
            sampling_params=sampling,
            arrival_time=time.time(),
            external_req_id=external_id,
            priority=priority,
            cache_salt=cache_salt,
            trace_headers=trace_headers,
        )
        self.requests.append((req, gen))

    def submit(self) -> None:
        engine = self.state.engine
        sent: list[str] = []
        try:
            for req, gen in self.requests:
                engine.add_request(req, gen)
                sent.append(req.request_id)
        except InvalidEngineRequest as e:
            if sent:
                engine.abort(sent)
            raise APIError(400, e.message, e.param) from None
        except EngineDeadError as e:
            raise APIError(503, f"The engine is not available: {e}") from None

    async def respond(self, request: web.Request, role_chunks: bool, system_fingerprint=None) -> web.StreamResponse:
        run, state = self.run, self.state
        run.system_fingerprint = system_fingerprint
        state.request_started()
        try:
            if run.stream:
                resp = web.StreamResponse(
                    status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
                )
                resp.enable_chunked_encoding()
                try:
                    await resp.prepare(request)
                except ConnectionError:  # the client left before the headers went out
                    run.cancel()
                    return resp
                sse = run.sse
                assert sse is not None
                first = b"".join(sse.role_chunk(c.index) for c in run.choices) if role_chunks else b""
                if run.echo_text:
                    first += b"".join(sse.content_chunk_bytes(c.index, run.echo_text) for c in run.choices)
                sse.attach(request.transport, first_chunk=first)
                if not sse.alive:
                    run.cancel()
                await run.done
                if sse.alive:
                    await resp.write_eof(sse.last_frame())
                return resp
            await run.done
            if run.error is not None:
                raise run.error
            return web.Response(body=_json(run.formatter.body(run, system_fingerprint)),
                                content_type="application/json")
        except asyncio.CancelledError:
            # aiohttp cancels the handler when the client disconnects: abort in the engine.
            run.cancel()
            raise
        finally:
            if not run.done.done():
                run.cancel()
            state.request_finished()
            self.record_metrics()

    def record_metrics(self) -> None:
        """Per engine request, at its end (frontend/metrics: nothing is observed per token)."""
        run = self.run
        for i, (req, gen) in enumerate(self.requests):
            m = run.choices[gen.index].metrics
            if m is None:
                continue
            reason = "error" if run.error is not None else (gen.finish_reason or "abort")
            m.on_finished(reason, gen.num_prompt_tokens, gen.num_output_tokens,
                          max_tokens=req.sampling_params.get("max_tokens"),
                          n=len(self.requests) if i == 0 else None)


def check_n(n: int | None, temperature_is_greedy: bool) -> int:
    n = 1 if n is None else n
    if n < 1:
        raise APIError(400, f"n must be at least 1, got {n}.", "n")
    if n > 128:
        raise APIError(400, f"n must be at most 128, got {n}.", "n")
    if n > 1 and temperature_is_greedy:
        raise APIError(400, f"n must be 1 when using greedy sampling, got {n}.", "n")
    return n


def lower_for_choices(state, opts: SamplingOptions, prompt_len: int, n: int, *, logprobs: int | None,
                      structured: dict | None, bad_words: list[list[int]] | None) -> list[dict[str, Any]]:
    """The engine sampling map for each of the n choices (seed + i, as vLLM's fan-out)."""
    try:
        max_tokens = resolve_max_tokens(opts.max_tokens, prompt_len, state.max_model_len, state.generation_defaults)
    except ContextLengthError as e:
        raise APIError(400, e.message, e.param) from None
    base = lower_sampling(opts, max_tokens=max_tokens, eos_token_id=state.tokenizer.eos_token_id,
                          defaults=state.generation_defaults)
    if logprobs is not None:
        base["logprobs"] = logprobs
    if structured is not None:
        base["structured_outputs"] = structured
    if bad_words:
        base["_bad_words_token_ids"] = bad_words
    out = []
    for i in range(n):
        p = dict(base)
        if opts.seed is not None and n > 1:
            p["seed"] = opts.seed + i
        out.append(p)
    return out


def is_greedy(state, temperature: float | None) -> bool:
    t = temperature if temperature is not None else state.generation_defaults.sampling.get("temperature", 1.0)
    return t < 1e-5


def new_choice(state, index: int, prompt_ids: list[int], opts: SamplingOptions, assistant) -> Choice:
    return Choice(
        index,
        TextStream(
            state.tokenizer.new_detokenizer(
                prompt_ids,
                skip_special_tokens=opts.skip_special_tokens,
                spaces_between_special_tokens=opts.spaces_between_special_tokens,
            ),
            opts.stop,
            include_stop_str_in_output=opts.include_stop_str_in_output,
            min_tokens=opts.min_tokens,
        ),
        assistant,
    )


def stream_flags(req: Any) -> tuple[bool, bool, bool]:
    stream = bool(req.stream)
    so = req.stream_options
    if so is not None and not stream and (so.include_usage or so.continuous_usage_stats):
        raise APIError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
    return stream, bool(so and so.include_usage), bool(so and so.continuous_usage_stats)


def new_sse(state, run_id: str, model: str, created: int, object_name: str) -> SSEWriter:
    sse = SSEWriter(run_id, model, created, object_name)
    sse.set_fingerprint(state.system_fingerprint)
    return sse
