"""Refuse, before it is sent, any request the engine would choke on.

vLLM's engine decodes an ADD request in its input thread with msgspec (strict
types: a bool is not an int, a float is not an int) and then runs
`SamplingParams.__post_init__` / `_verify_args`. A failure there is raised in
the input thread, outside any per-request error handling, and can leave the
engine deaf to every client. Some values also pass those checks and fail later
inside the engine (`max_tokens=None`, out-of-vocab ids used as logits indices,
seeds torch cannot take). This module mirrors all of those checks, so a bad
request becomes a 400 for one user instead of an outage for all.

Where it is stricter than vLLM's `SamplingParams` it says so (e.g. unknown keys,
which vLLM silently drops, are refused because they are always a bug here).
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any, Callable

import msgspec

from vllm_pyfrontend.errors import with_parameter

from .types import EngineRequest, InvalidEngineRequest

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1
_MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's MAX_LOGPROB_TOKEN_IDS
_MAX_JSON_NESTING = 64  # vLLM's MAX_STRUCTURED_OUTPUT_JSON_NESTING
_STRUCTURAL_TAG_EXTRA_NESTING = 16
_MAX_LOGIT_BIAS = 100.0
STRUCTURED_OUTPUT_BACKENDS = frozenset({"xgrammar", "guidance", "outlines", "lm-format-enforcer"})
_STRUCTURED_CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")

# Engine-level key -> OpenAI-level parameter name used in errors.
_PARAM_NAMES = {
    "max_tokens": "max_tokens",
    "stop_token_ids": "stop_token_ids",
    "_all_stop_token_ids": "stop_token_ids",
    "_eos_token_id": "stop_token_ids",
    "structured_outputs": "response_format",
    "_bad_words_token_ids": "bad_words",
    "prompt_logprobs": "prompt_logprobs",
    "logprobs": "top_logprobs",
}


def _param(key: str) -> str:
    return _PARAM_NAMES.get(key, key)


def _fail(key: str, message: str) -> InvalidEngineRequest:
    return InvalidEngineRequest(message, _param(key))


# --------------------------------------------------------------------------- type checks


def _is_int(v: Any) -> bool:
    return type(v) is int or (isinstance(v, int) and not isinstance(v, bool))


def _int(key: str, v: Any, lo: int | None = None, hi: int | None = None) -> int:
    if not _is_int(v):
        raise _fail(key, f"{_param(key)} must be an integer, got {type(v).__name__}.")
    if lo is not None and v < lo:
        raise _fail(key, f"{_param(key)} must be at least {lo}, got {v}.")
    if hi is not None and v > hi:
        raise _fail(key, f"{_param(key)} must be at most {hi}, got {v}.")
    return v


def _float(key: str, v: Any) -> float:
    """msgspec float fields take ints too, never bools; NaN/inf are refused here."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _fail(key, f"{_param(key)} must be a number, got {type(v).__name__}.")
    if isinstance(v, int):
        if not _INT64_MIN <= v <= _UINT64_MAX:
            raise _fail(key, f"{_param(key)} is out of range.")
        v = float(v)
    if not math.isfinite(v):
        raise _fail(key, f"{_param(key)} must be a finite number, got {v}.")
    return v


def _bool(key: str, v: Any) -> bool:
    if type(v) is not bool:
        raise _fail(key, f"{_param(key)} must be a boolean, got {type(v).__name__}.")
    return v


def _opt_bool(key: str, v: Any) -> None:
    if v is not None:
        _bool(key, v)


def _given(key: str, v: Any, kind: type, message: str) -> bool:
    """Whether an optional value is given (not None); one given that is not a `kind` is
    refused with `message`."""
    if v is None:
        return False
    if not isinstance(v, kind):
        raise _fail(key, message)
    return True


def _str(key: str, v: Any) -> str:
    if not isinstance(v, str):
        raise _fail(key, f"{_param(key)} must be a string, got {type(v).__name__}.")
    return v


@functools.lru_cache(maxsize=8)
def _ids_type(vocab_size: int | None) -> Any:
    """A list of token ids as msgspec checks it: ints (not bools), in [0, vocab_size)."""
    return list[Annotated[int, msgspec.Meta(ge=0) if vocab_size is None else msgspec.Meta(ge=0, lt=vocab_size)]]


def _token_ids(key: str, v: Any, vocab_size: int | None, *, allow_empty: bool = True) -> list[int]:
    if type(v) is list and v:
        # A prompt is checked once per request: one pass in C (types, range and the copy)
        # instead of four. Whatever it refuses, the checks below refuse with their message.
        try:
            return msgspec.convert(v, _ids_type(vocab_size))
        except msgspec.ValidationError:
            pass
    if not isinstance(v, (list, tuple, set, frozenset)):
        raise _fail(key, f"{_param(key)} must be a list of token ids, got {type(v).__name__}.")
    if not v:
        if allow_empty:
            return list(v)
        raise _fail(key, f"{_param(key)} must not be empty.")
    # C-speed type scan: a 10k-token prompt costs well under a millisecond.
    if set(map(type, v)) != {int}:
        for x in v:
            if not _is_int(x):
                raise _fail(key, f"{_param(key)} must contain only integers, got {x!r}.")
    lo, hi = min(v), max(v)
    if lo < 0 or (vocab_size is not None and hi >= vocab_size):
        bad = lo if lo < 0 else hi
        limit = f"[0, {vocab_size})" if vocab_size is not None else "non-negative"
        raise _fail(key, f"{_param(key)} contains token id {bad}, outside the vocabulary {limit}.")
    return list(v)


def _json_nesting_exceeds(spec: Any, limit: int) -> bool:
    import json

    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except RecursionError:
            return True
        except ValueError:
            return False  # malformed JSON is the grammar backend's to report
    level = [spec]
    for _ in range(limit):
        level = [
            child
            for node in level
            if isinstance(node, (dict, list))
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, (dict, list))
        ]
        if not level:
            return False
    return True


def _msgpack_safe(key: str, v: Any, depth: int = 0) -> None:
    """extra_args: only msgpack-native values, ints within 64 bits, str map keys."""
    if depth > 32:
        raise _fail(key, f"{key} is nested too deeply.")
    if v is None or isinstance(v, (bool, str, float)):
        return
    if isinstance(v, int):
        if not _INT64_MIN <= v <= _UINT64_MAX:
            message = f"{key} integers must be between -2**63 and 2**64 - 1."
            raise _fail(key, with_parameter(message, key) if key == "extra_args" else message)
        return
    if isinstance(v, (list, tuple)):
        for x in v:
            _msgpack_safe(key, x, depth + 1)
        return
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                raise _fail(key, f"{key} keys must be strings.")
            _msgpack_safe(key, x, depth + 1)
        return
    raise _fail(key, f"{key} contains an unsupported value of type {type(v).__name__}.")


# --------------------------------------------------------------------------- per key


class _Ctx:
    __slots__ = ("sp", "vocab_size", "max_logprobs", "max_model_len", "prompt_len")

    def __init__(self, sp: dict, vocab_size: int | None, max_logprobs: int, max_model_len: int,
                 prompt_len: int):
        self.sp = sp
        self.vocab_size = vocab_size
        self.max_logprobs = max_logprobs
        self.max_model_len = max_model_len
        self.prompt_len = prompt_len


def _penalty(key: str, v: Any, ctx: _Ctx) -> None:
    if not -2.0 <= _float(key, v) <= 2.0:
        raise _fail(key, f"{key} must be in [-2, 2], got {v}.")


def _repetition_penalty(key: str, v: Any, ctx: _Ctx) -> None:
    if _float(key, v) <= 0.0:
        raise _fail(key, f"repetition_penalty must be greater than zero, got {v}.")


def _temperature(key: str, v: Any, ctx: _Ctx) -> None:
    t = _float(key, v)
    if t < 0.0:  # (vLLM's messages, which name the parameter and value)
        raise _fail(key, with_parameter(f"temperature must be non-negative, got {t}.", "temperature", t))
    if t > 2.0:
        raise _fail(key, with_parameter(f"temperature must be in [0, 2], got {t}.", "temperature", t))


def _top_p(key: str, v: Any, ctx: _Ctx) -> None:
    p = _float(key, v)
    if not 0.0 < p <= 1.0:
        raise _fail(key, with_parameter(f"top_p must be in (0, 1], got {p}.", "top_p", p))


def _top_k(key: str, v: Any, ctx: _Ctx) -> None:
    _int(key, v, -1, _INT64_MAX)


def _min_p(key: str, v: Any, ctx: _Ctx) -> None:
    if not 0.0 <= _float(key, v) <= 1.0:
        raise _fail(key, f"min_p must be in [0, 1], got {v}.")


def _n(key: str, v: Any, ctx: _Ctx) -> None:
    # Stricter than vLLM: the engine ignores `n` (fan-out is the frontend's job).
    if _int(key, v) != 1:
        raise _fail(key, "n must be 1 at the engine level; the frontend fans out n > 1.")


def _seed(key: str, v: Any, ctx: _Ctx) -> None:
    # Stricter than SamplingParams (which takes any int): torch's generator
    # raises inside the engine for seeds beyond 64 bits, so keep to int64 like
    # vLLM's OpenAI layer does.
    if v is not None:
        _int(key, v, _INT64_MIN, _INT64_MAX)


def _stop(key: str, v: Any, ctx: _Ctx) -> None:
    if v is None:
        return
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise _fail(key, "stop must be a string or a list of strings.")
    if any(not s for s in items):
        raise _fail(key, "stop cannot contain an empty string.")
    if items and ctx.sp.get("detokenize", True) is False:
        raise _fail(key, "stop strings are only supported when detokenize is True.")


def _opt_token_ids(key: str, v: Any, ctx: _Ctx) -> None:
    if v is not None:
        _token_ids(key, v, ctx.vocab_size)


def _max_tokens(key: str, v: Any, ctx: _Ctx) -> None:
    if v is None:
        # The engine asserts max_tokens is not None when it builds the request.
        raise _fail(key, "max_tokens must be set.")
    _int(key, v, 1)
    if ctx.prompt_len + v > ctx.max_model_len:
        raise _fail(
            key,
            f"This model's maximum context length is {ctx.max_model_len} tokens. However, you "
            f"requested {ctx.prompt_len + v} tokens ({ctx.prompt_len} in the messages, {v} in "
            "the completion). Please reduce the length of the messages or completion.",
        )


def _min_tokens(key: str, v: Any, ctx: _Ctx) -> None:
    _int(key, v, 0)
    max_tokens = ctx.sp.get("max_tokens")
    if _is_int(max_tokens) and v > max_tokens:
        raise _fail(key, f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                         f"got {v}.")


def _num_logprobs(key: str, v: Any, ctx: _Ctx) -> None:
    if v is None:
        return
    _int(key, v, -1)
    limit = ctx.max_logprobs if ctx.max_logprobs != -1 else ctx.vocab_size
    n = ctx.vocab_size if v == -1 else v
    if limit is not None and n is None:
        raise _fail(key, f"Requested {_param(key)} of {v}, which is greater than the maximum "
                         f"allowed: {limit}.")
    if limit is not None and n > limit:  # vLLM's words (-1 counted as the whole vocabulary)
        kind = "sample" if key == "logprobs" else "prompt"
        raise _fail(key, with_parameter(f"Requested {kind} logprobs of {n}, which is greater than max "
                                        f"allowed: {limit}", key, n))


def _logprob_token_ids(key: str, v: Any, ctx: _Ctx) -> None:
    if v is None:
        return
    ids = _token_ids(key, v, ctx.vocab_size)
    if len(ids) > _MAX_LOGPROB_TOKEN_IDS:
        raise _fail(key, f"logprob_token_ids may hold at most {_MAX_LOGPROB_TOKEN_IDS} ids.")
    lp = ctx.sp.get("logprobs")
    if lp is not None and lp != len(ids):
        raise _fail(key, "When both logprobs and logprob_token_ids are set, logprobs must "
                         "equal len(logprob_token_ids).")


def _eos(key: str, v: Any, ctx: _Ctx) -> None:
    if v is not None:
        _token_ids(key, [v], ctx.vocab_size)


def _bool_key(key: str, v: Any, ctx: _Ctx) -> None:
    _bool(key, v)


def _opt_bool_key(key: str, v: Any, ctx: _Ctx) -> None:
    _opt_bool(key, v)


def _bad_words(key: str, v: Any, ctx: _Ctx) -> None:
    if v is None:
        return
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise _fail(key, "bad_words must be a list of strings.")
    if any(not s for s in v):
        raise _fail(key, "bad_words cannot contain an empty string.")


def _bad_words_token_ids(key: str, v: Any, ctx: _Ctx) -> None:
    if _given(key, v, list, "bad words must be lists of token ids."):
        for seq in v:
            _token_ids(key, seq, ctx.vocab_size, allow_empty=False)


def _logit_bias(key: str, v: Any, ctx: _Ctx) -> None:
    if not _given(key, v, dict, "logit_bias must be a map of token id to bias."):
        return
    _token_ids(key, list(v.keys()), ctx.vocab_size)
    for bias in v.values():
        # Stricter than SamplingParams: OpenAI's range, and never NaN/inf
        # (either would poison the logits row).
        if not -_MAX_LOGIT_BIAS <= _float(key, bias) <= _MAX_LOGIT_BIAS:
            raise _fail(key, f"logit_bias values must be in [-100, 100], got {bias}.")


def _allowed_token_ids(key: str, v: Any, ctx: _Ctx) -> None:
    if v is None:
        return
    _token_ids(key, v, ctx.vocab_size, allow_empty=False)


def _extra_args(key: str, v: Any, ctx: _Ctx) -> None:
    if _given(key, v, dict, "extra_args must be a map."):
        _msgpack_safe(key, v)


def _thinking_token_budget(key: str, v: Any, ctx: _Ctx) -> None:
    if v is not None:
        _int(key, v, -1, _INT64_MAX)


def _repetition_detection(key: str, v: Any, ctx: _Ctx) -> None:
    if v is None:
        return
    allowed = {"max_pattern_size", "min_pattern_size", "min_count"}
    if not isinstance(v, dict) or not set(v) <= allowed:
        raise _fail(key, f"repetition_detection must be a map with keys {sorted(allowed)}.")
    mx = _int(key, v.get("max_pattern_size", 0), _INT64_MIN, _INT64_MAX)
    mn = _int(key, v.get("min_pattern_size", 0), _INT64_MIN, _INT64_MAX)
    cnt = _int(key, v.get("min_count", 0), _INT64_MIN, _INT64_MAX)
    if mx < 0 or mn < 0 or mn > mx:
        raise _fail(key, "max_pattern_size, min_pattern_size must be >= 0, with "
                         "min_pattern_size <= max_pattern_size.")
    if mx > 0 and cnt < 2:
        raise _fail(key, "min_count must be >= 2 to detect repetitive patterns.")


def _structured_outputs(key: str, v: Any, ctx: _Ctx) -> None:
    if not _given(key, v, dict, "structured_outputs must be a map."):
        return
    allowed = set(_STRUCTURED_CONSTRAINTS) | {
        "disable_any_whitespace", "disable_additional_properties", "whitespace_pattern",
        "_backend", "_backend_was_auto",
    }
    unknown = set(v) - allowed
    if unknown:
        raise _fail(key, f"unknown structured output field(s): {sorted(map(str, unknown))}.")
    present = [c for c in _STRUCTURED_CONSTRAINTS if v.get(c) is not None]
    if len(present) != 1:
        raise _fail(key, "exactly one structured output constraint must be given, got "
                         f"{present or 'none'}.")
    kind = present[0]
    value = v[kind]
    if kind == "json":
        if not isinstance(value, (str, dict)):
            raise _fail(key, "json schema must be a string or an object.")
    elif kind == "choice":
        if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
            raise _fail(key, "choice must be a non-empty list of strings.")
    elif kind == "json_object":
        _bool(key, value)
    else:
        _str(key, value)
    if kind in ("json", "structural_tag"):
        limit = _MAX_JSON_NESTING + (_STRUCTURAL_TAG_EXTRA_NESTING if kind == "structural_tag" else 0)
        if value and _json_nesting_exceeds(value, limit):
            raise _fail(key, "The JSON schema is nested too deeply: objects and arrays may nest "
                             f"at most {_MAX_JSON_NESTING} levels.")
    for flag in ("disable_any_whitespace", "disable_additional_properties", "_backend_was_auto"):
        if flag in v:
            _bool(key, v[flag])
    if v.get("whitespace_pattern") is not None:
        _str(key, v["whitespace_pattern"])
    backend = v.get("_backend")
    # Without a named backend the engine raises when it builds the grammar.
    if backend not in STRUCTURED_OUTPUT_BACKENDS:
        raise _fail(key, f"structured output backend must be one of "
                         f"{sorted(STRUCTURED_OUTPUT_BACKENDS)}, got {backend!r}.")


_VALIDATORS: dict[str, Callable[[str, Any, _Ctx], None]] = {
    "n": _n,
    "presence_penalty": _penalty,
    "frequency_penalty": _penalty,
    "repetition_penalty": _repetition_penalty,
    "temperature": _temperature,
    "top_p": _top_p,
    "top_k": _top_k,
    "min_p": _min_p,
    "seed": _seed,
    "stop": _stop,
    "stop_token_ids": _opt_token_ids,
    "bad_words": _bad_words,
    "ignore_eos": _bool_key,
    "max_tokens": _max_tokens,
    "min_tokens": _min_tokens,
    "logprobs": _num_logprobs,
    "prompt_logprobs": _num_logprobs,
    "logprob_token_ids": _logprob_token_ids,
    "detokenize": _bool_key,
    "skip_special_tokens": _bool_key,
    "spaces_between_special_tokens": _bool_key,
    "include_stop_str_in_output": _bool_key,
    "_eos_token_id": _eos,
    "_all_stop_token_ids": _opt_token_ids,
    "_bad_words_token_ids": _bad_words_token_ids,
    "structured_outputs": _structured_outputs,
    "logit_bias": _logit_bias,
    "allowed_token_ids": _allowed_token_ids,
    "extra_args": _extra_args,
    "skip_reading_prefix_cache": _opt_bool_key,
    "thinking_token_budget": _thinking_token_budget,
    "repetition_detection": _repetition_detection,
}

SUPPORTED_SAMPLING_KEYS = frozenset(_VALIDATORS)


# --------------------------------------------------------------------------- entry point


def validate_engine_request(
    req: EngineRequest,
    *,
    max_model_len: int,
    vocab_size: int | None,
    num_clients: int,
    max_logprobs: int = 20,
) -> None:
    """Raise `InvalidEngineRequest(message, param)` unless the engine can take `req`.

    `max_logprobs` is the engine's `--max-logprobs` (vLLM's default 20; -1 = vocab).
    `vocab_size=None` skips the upper bound of token id checks.
    """
    if not isinstance(req.request_id, str) or not req.request_id:
        raise InvalidEngineRequest("request_id must be a non-empty string.", "request_id")
    prompt = req.prompt_token_ids
    if not isinstance(prompt, list) or not prompt:
        raise InvalidEngineRequest("The prompt must contain at least one token.", "messages")
    _token_ids("messages", prompt, vocab_size, allow_empty=False)
    prompt_len = len(prompt)
    if req.pooling_params is not None:
        # A pooling request produces no tokens: the whole context is the prompt's.
        if prompt_len > max_model_len:
            raise InvalidEngineRequest(
                f"This model's maximum context length is {max_model_len} tokens. However, you "
                f"requested {prompt_len} tokens in the input. Please reduce the length of the input.",
                "input",
            )
    elif prompt_len >= max_model_len:
        raise InvalidEngineRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"messages resulted in {prompt_len} tokens, which leaves no room for the completion. "
            "Please reduce the length of the messages.",
            "messages",
        )
    if isinstance(req.arrival_time, bool) or not isinstance(req.arrival_time, (int, float)) \
            or not math.isfinite(req.arrival_time):
        raise InvalidEngineRequest("arrival_time must be a finite number.", "arrival_time")
    _int("client_index", req.client_index, 0, num_clients - 1)
    _int("priority", req.priority, _INT64_MIN, _INT64_MAX)
    if req.external_req_id is not None:
        _str("external_req_id", req.external_req_id)
    if req.cache_salt is not None:
        _str("cache_salt", req.cache_salt)
    if req.data_parallel_rank is not None:
        _int("data_parallel_rank", req.data_parallel_rank, 0, 65535)
    if req.trace_headers is not None:
        th = req.trace_headers
        if not isinstance(th, dict) or not all(
            isinstance(k, str) and isinstance(x, str) for k, x in th.items()
        ):
            raise InvalidEngineRequest("trace_headers must map strings to strings.",
                                       "trace_headers")

    if req.pooling_params is not None:
        if req.sampling_params is not None:
            raise InvalidEngineRequest("a request has sampling or pooling params, not both.", "sampling_params")
        _pooling_params(req.pooling_params)
        return
    sp = req.sampling_params
    if not isinstance(sp, dict):
        raise InvalidEngineRequest("sampling_params must be a map.", "sampling_params")
    if "max_tokens" not in sp:
        # An omitted max_tokens silently means 16 in the engine: always send it.
        raise InvalidEngineRequest("max_tokens must be set.", "max_tokens")
    ctx = _Ctx(sp, vocab_size, max_logprobs, max_model_len, prompt_len)
    for key, value in sp.items():
        check = _VALIDATORS.get(key) if isinstance(key, str) else None
        if check is None:
            # Stricter than vLLM, which drops unknown keys without a word.
            raise InvalidEngineRequest(f"unsupported sampling parameter {key!r}.", str(key))
        check(key, value, ctx)
    # n > 1 with greedy sampling is refused by SamplingParams; n is always 1 here.


# vLLM's PoolingParams, an `array_like` struct: its fields in order, and the tasks a client
# request may carry (`plugin` and the combined task need an engine-side IO processor).
POOLING_PARAMS_FIELDS = (
    "use_activation", "dimensions", "step_tag_id", "returned_token_ids", "task",
    "requires_token_ids", "skip_reading_prefix_cache", "late_interaction_params",
    "extra_kwargs", "output_kind",
)
POOLING_TASKS = ("embed", "classify", "token_embed", "token_classify")
_OUTPUT_KIND_FINAL_ONLY = 2


def _pooling_params(pp: Any) -> None:
    """What the engine's msgspec decode and `PoolingParams.__post_init__` would refuse."""
    if not isinstance(pp, list) or len(pp) != len(POOLING_PARAMS_FIELDS):
        raise InvalidEngineRequest("pooling_params must be the full PoolingParams array.", "pooling_params")
    (use_activation, dimensions, step_tag_id, returned, task, requires_ids, skip_cache,
     late, extra, output_kind) = pp
    if use_activation is not None and not isinstance(use_activation, bool):
        raise InvalidEngineRequest("use_activation must be a boolean.", "use_activation")
    if dimensions is not None:
        _int("dimensions", dimensions, 1, _INT64_MAX)
    if step_tag_id is not None:
        _int("step_tag_id", step_tag_id, _INT64_MIN, _INT64_MAX)
    if returned is not None and not (isinstance(returned, list) and all(
            isinstance(t, int) and not isinstance(t, bool) for t in returned)):
        raise InvalidEngineRequest("returned_token_ids must be a list of ints.", "returned_token_ids")
    if task not in POOLING_TASKS:
        raise InvalidEngineRequest(f"unsupported pooling task {task!r}.", "task")
    if not isinstance(requires_ids, bool) or (skip_cache is not None and not isinstance(skip_cache, bool)):
        raise InvalidEngineRequest("bad pooling flags.", "pooling_params")
    if late is not None:
        raise InvalidEngineRequest("late_interaction_params are not sent by this frontend.", "pooling_params")
    if extra is not None and not (isinstance(extra, dict) and all(isinstance(k, str) for k in extra)):
        raise InvalidEngineRequest("extra_kwargs must be a map with string keys.", "pooling_params")
    if output_kind != _OUTPUT_KIND_FINAL_ONLY:
        raise InvalidEngineRequest("pooling output_kind must be FINAL_ONLY.", "pooling_params")
