"""User-level sampling options and their lowering to the engine's `sampling_params` map.

The lowering mirrors what vLLM's `ChatCompletionRequest.to_sampling_params` +
`SamplingParams.update_from_generation_config` produce, so the engine sees the same values
whichever frontend sent the request. Ranges are checked again by `vllm_pyfrontend.engine.validate`
just before encoding; this module decides *values* (defaults, EOS handling, max_tokens).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from vllm_pyfrontend.errors import InvalidRequestError

# Request -> server default -> OpenAI default (vLLM's _DEFAULT_SAMPLING_PARAMS).
NEUTRAL_DEFAULTS: dict[str, Any] = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
}
_SAMPLING_EPS = 1e-5
_MAX_TEMP = 1e-2
_GENERATION_CONFIG_KEYS = (
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "max_new_tokens",
)


@dataclass(slots=True)
class GenerationDefaults:
    """Server-side defaults read from the model's generation_config.json (vLLM `--generation-config auto`)."""

    sampling: dict[str, Any] = field(default_factory=dict)
    eos_token_ids: list[int] = field(default_factory=list)

    @classmethod
    def load(cls, model_dir: str, mode: str = "auto") -> "GenerationDefaults":
        if mode == "vllm":
            return cls()
        path = os.path.join(model_dir if mode == "auto" else mode, "generation_config.json")
        try:
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError):
            return cls()
        sampling = {k: config[k] for k in _GENERATION_CONFIG_KEYS if config.get(k) is not None}
        if "max_new_tokens" in sampling:
            sampling["max_tokens"] = sampling.pop("max_new_tokens")
        eos = config.get("eos_token_id")
        eos_ids = [eos] if isinstance(eos, int) else [int(e) for e in (eos or [])]
        return cls(sampling=sampling, eos_token_ids=eos_ids)


@dataclass(slots=True)
class SamplingOptions:
    """What a client asked for, after type validation; None = not given."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int = 0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    logprobs: int | None = None
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    extra_args: dict[str, Any] | None = None


# The options a request names as `SamplingOptions` does and passes on as sent (every other
# option is converted on the way: `max_tokens`, `seed`, `stop`, `stop_token_ids`, ...).
PLAIN_OPTIONS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_tokens",
    "ignore_eos",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "allowed_token_ids",
)


def plain_options(req: Any) -> dict[str, Any]:
    """`req`'s values of `PLAIN_OPTIONS`, keyed by name (`SamplingOptions` keywords)."""
    return {name: getattr(req, name) for name in PLAIN_OPTIONS}


class ContextLengthError(InvalidRequestError):
    def __init__(self, message: str, param: str = "input_tokens"):
        super().__init__(message, param)


def resolve_max_tokens(
    requested: int | None, prompt_len: int, max_model_len: int, defaults: GenerationDefaults
) -> int:
    """vLLM's get_max_tokens: the smallest of the room left, the request, the server default."""
    if prompt_len >= max_model_len:
        raise ContextLengthError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains {prompt_len} input tokens, which "
            + ("exceeds this limit even without any output tokens. " if prompt_len > max_model_len
               else "leaves no room for output tokens. ")
            + "Please reduce the length of the input prompt.",
            "input_tokens" if prompt_len > max_model_len else "max_tokens",
        )
    room = max_model_len - prompt_len
    fallback = requested if requested is not None else defaults.sampling.get("max_tokens")
    return room if fallback is None else min(room, fallback)


def _in_range(params: dict[str, Any]) -> bool:
    top_p, top_k, min_p = params["top_p"], params["top_k"], params["min_p"]
    return (
        isinstance(top_p, (int, float)) and 0.0 < top_p <= 1.0
        and type(top_k) is int and (top_k == -1 or top_k >= 0)
        and isinstance(min_p, (int, float)) and 0.0 <= min_p <= 1.0
    )


def lower_sampling(
    opts: SamplingOptions,
    *,
    max_tokens: int,
    eos_token_id: int | None,
    defaults: GenerationDefaults,
) -> dict[str, Any]:
    """Build the engine's `sampling_params` map (keys are SamplingParams field names)."""
    params: dict[str, Any] = {}
    for name, neutral in NEUTRAL_DEFAULTS.items():
        value = getattr(opts, name)
        if value is None:
            value = defaults.sampling.get(name, neutral)
        params[name] = value
    if params["temperature"] < _SAMPLING_EPS and _in_range(params):
        # Greedy: vLLM's SamplingParams normalizes the other knobs away — after checking
        # them, so out-of-range values are left for validation to refuse.
        params["top_p"], params["top_k"], params["min_p"] = 1.0, 0, 0.0
    elif params["temperature"] < _MAX_TEMP:
        params["temperature"] = _MAX_TEMP
    params["max_tokens"] = max_tokens
    params["min_tokens"] = opts.min_tokens
    if opts.seed is not None:
        params["seed"] = opts.seed
    if opts.logprobs is not None:
        params["logprobs"] = opts.logprobs
    if opts.logit_bias:
        params["logit_bias"] = dict(opts.logit_bias)
    if opts.allowed_token_ids:
        params["allowed_token_ids"] = list(opts.allowed_token_ids)
    if opts.extra_args:
        params["extra_args"] = dict(opts.extra_args)

    stop_ids = list(dict.fromkeys(opts.stop_token_ids))
    all_stop = set(stop_ids)
    if not opts.ignore_eos:
        params["_eos_token_id"] = eos_token_id
    if eos_token_id is not None:
        all_stop.add(eos_token_id)
    extra_eos = [e for e in defaults.eos_token_ids if e != eos_token_id]
    if extra_eos:
        all_stop.update(extra_eos)
        if not opts.ignore_eos:
            stop_ids = list(dict.fromkeys([*extra_eos, *stop_ids]))
    params["stop_token_ids"] = stop_ids
    params["_all_stop_token_ids"] = sorted(all_stop)
    return params


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """What lowering needs to know of the served model (the same for every request)."""

    max_model_len: int
    eos_token_id: int | None
    defaults: GenerationDefaults
    vocab_size: int  # the model's (config.json), else the tokenizer's: the bound on token ids


def is_greedy(temperature: float | None, defaults: GenerationDefaults) -> bool:
    t = temperature if temperature is not None else defaults.sampling.get("temperature", 1.0)
    return t < _SAMPLING_EPS


def check_n(n: int | None, greedy: bool) -> int:
    """The number of choices (one engine request each), within vLLM's bounds."""
    n = 1 if n is None else n
    if n < 1:
        raise InvalidRequestError(f"n must be at least 1, got {n}.", "n")
    if n > 128:
        raise InvalidRequestError(f"n must be at most 128, got {n}.", "n")
    if n > 1 and greedy:
        raise InvalidRequestError(f"n must be 1 when using greedy sampling, got {n}.", "n")
    return n


def lower_choices(
    limits: ModelLimits,
    opts: SamplingOptions,
    prompt_len: int,
    n: int,
    *,
    logprobs: int | None = None,
    structured: dict[str, Any] | None = None,
    bad_words: list[list[int]] | None = None,
    prompt_logprobs: int | None = None,
    logprob_token_ids: list[int] | None = None,
) -> list[dict[str, Any]]:
    """The engine's sampling map for each of the n choices of one prompt (seed + i, as vLLM's
    fan-out). `structured` is a full map from `llm.structured`; `bad_words` token sequences
    from `llm.prompt.bad_words_token_ids`."""
    max_tokens = resolve_max_tokens(opts.max_tokens, prompt_len, limits.max_model_len, limits.defaults)
    base = lower_sampling(opts, max_tokens=max_tokens, eos_token_id=limits.eos_token_id, defaults=limits.defaults)
    if logprobs is not None:
        base["logprobs"] = logprobs
    if prompt_logprobs is not None:
        base["prompt_logprobs"] = prompt_logprobs
    if logprob_token_ids:
        base["logprob_token_ids"] = list(logprob_token_ids)
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
