"""The token-in / token-out wire shapes of vLLM's scale-out API (vLLM 0.32
`entrypoints/scale_out/token_in_token_out/protocol.py`), shared by /inference/v1/generate
(`generate_tokens.py`) and the render / derender routes (`render.py`).

`GenerateRequest.sampling_params` is vLLM's `SamplingParams` by field name; `SamplingBody` types
the fields a client may set (the engine-private ones are ignored, as vLLM's struct ignores keys it
does not know). `sampling_dump` writes one back the way vLLM's render serializes its struct
(msgspec `omit_defaults`), so a render body here equals vLLM's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from vllm_pyfrontend.llm.sampling import SamplingOptions, plain_options
from vllm_pyfrontend.api.openai.schemas import StreamOptions

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

# vLLM's RequestOutputKind: the generate route streams deltas or answers once.
OUTPUT_KIND_DELTA = 1
OUTPUT_KIND_FINAL_ONLY = 2


class SamplingBody(msgspec.Struct, omit_defaults=True):
    """SamplingParams' client-settable fields with their dataclass defaults (max_tokens: None
    here = "not given", which the server fills from the context left, as vLLM does)."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = None
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: int | None = None  # set by the server from `stream`
    stream_interval: Annotated[int, Meta(ge=1)] | None = None
    skip_clone: bool = False
    structured_outputs: dict[str, Any] | None = None
    logit_bias: dict[str, float] | None = None
    allowed_token_ids: list[int] | None = None
    extra_args: dict[str, Any] | None = None
    bad_words: list[str] | None = None
    thinking_token_budget: int | None = None
    repetition_detection: dict[str, Any] | None = None
    skip_reading_prefix_cache: bool | None = None


class GenerateRequest(msgspec.Struct, omit_defaults=True):
    token_ids: list[Annotated[int, Meta(ge=0)]]
    sampling_params: SamplingBody
    request_id: str | None = None
    model: str | None = None
    token_offsets: Any = None
    features: dict[str, Any] | None = None
    content_parts: list[dict[str, Any]] | None = None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: dict[str, Any] | None = None
    return_token_ids: bool | None = None
    output_mode: Literal["tokens", "text"] = "tokens"
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    cache_salt: str | None = None
    priority: Annotated[int, Meta(ge=_INT64_MIN, le=_INT64_MAX)] = 0
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None


def options_of(sp: SamplingBody) -> SamplingOptions:
    """`llm` sampling options from a SamplingParams body (its defaults are explicit values, so
    no generation-config default applies, as in vLLM's generate route)."""
    logit_bias = None
    if sp.logit_bias:
        from vllm_pyfrontend.errors import InvalidRequestError

        try:
            logit_bias = {int(k): min(100.0, max(-100.0, v)) for k, v in sp.logit_bias.items()}
        except ValueError:
            raise InvalidRequestError("logit_bias contains key(s) that cannot be converted to integer "
                                      "token IDs.", "logit_bias") from None
    stop = [sp.stop] if isinstance(sp.stop, str) else list(sp.stop or [])
    return SamplingOptions(
        max_tokens=sp.max_tokens,
        seed=None if sp.seed == -1 else sp.seed,
        stop=stop,
        stop_token_ids=list(dict.fromkeys(sp.stop_token_ids or [])),
        logprobs=sp.logprobs,
        logit_bias=logit_bias,
        extra_args=sp.extra_args,
        **plain_options(sp),
    )


def sampling_dump(
    opts: SamplingOptions, *, n: int, max_tokens: int | None, logprobs: int | None, stream: bool,
    structured: dict[str, Any] | None, bad_words: list[str] | None, prompt_logprobs: int | None = None,
) -> dict[str, Any]:
    """SamplingParams as vLLM's render answers it: msgspec `omit_defaults`, which omits a value
    only when it is the default object itself. So the penalties and temperature (copied from a
    defaults table) always appear; top_p / min_p too, except under greedy sampling, where
    SamplingParams resets them to its own constants; ints appear when they differ from the
    default (small ints are shared objects); lists made in `__post_init__` always appear."""
    temperature = 1.0 if opts.temperature is None else opts.temperature
    greedy = temperature < 1e-5
    d: dict[str, Any] = {}
    if n != 1:
        d["n"] = n
    d["presence_penalty"] = float(opts.presence_penalty or 0.0)
    d["frequency_penalty"] = float(opts.frequency_penalty or 0.0)
    d["repetition_penalty"] = float(1.0 if opts.repetition_penalty is None else opts.repetition_penalty)
    d["temperature"] = float(max(temperature, 0.01) if 0 < temperature < 0.01 else temperature)
    if not greedy:
        d["top_p"] = float(1.0 if opts.top_p is None else opts.top_p)
        if opts.top_k not in (None, 0):
            d["top_k"] = opts.top_k
        d["min_p"] = float(opts.min_p or 0.0)
    if opts.seed is not None:
        d["seed"] = opts.seed
    d["stop"] = list(opts.stop)
    d["stop_token_ids"] = list(opts.stop_token_ids)
    if opts.ignore_eos:
        d["ignore_eos"] = True
    if max_tokens is not None and max_tokens != 16:
        d["max_tokens"] = max_tokens
    if opts.min_tokens:
        d["min_tokens"] = opts.min_tokens
    if logprobs is not None:
        d["logprobs"] = logprobs
    if prompt_logprobs is not None:
        d["prompt_logprobs"] = prompt_logprobs
    if not opts.skip_special_tokens:
        d["skip_special_tokens"] = False
    if not opts.spaces_between_special_tokens:
        d["spaces_between_special_tokens"] = False
    if opts.include_stop_str_in_output:
        d["include_stop_str_in_output"] = True
    d["output_kind"] = OUTPUT_KIND_DELTA if stream else OUTPUT_KIND_FINAL_ONLY
    d["skip_clone"] = True
    if opts.stop and not opts.include_stop_str_in_output:
        buffer = max(len(s) for s in opts.stop) - 1
        if buffer:
            d["output_text_buffer_length"] = buffer
    if structured is not None:
        d["structured_outputs"] = structured
    if opts.logit_bias:
        d["logit_bias"] = {str(k): float(v) for k, v in opts.logit_bias.items()}
    if opts.allowed_token_ids is not None:
        d["allowed_token_ids"] = list(opts.allowed_token_ids)
    if opts.extra_args:
        d["extra_args"] = dict(opts.extra_args)
    d["bad_words"] = list(dict.fromkeys(bad_words or []))
    d["skip_reading_prefix_cache"] = prompt_logprobs is not None
    return d
