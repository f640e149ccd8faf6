"""OpenAI's sampling fields, shared by chat and text completions, as `llm` typed options, and
`GenerationRequest`, the fields the chat and the text completion request have in common.

Chat and completion request structs name these fields the same way, so one function reads
either; the checks keep vLLM's wording (the differential tests compare them).
"""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_pyfrontend.llm.sampling import SamplingOptions, plain_options
from vllm_pyfrontend.errors import APIError, validation_error


class GenerationRequest(msgspec.Struct, kw_only=True):
    """What a chat request (`ChatRequest`) and a text completion request
    (`TextCompletionRequest`) share, in OpenAI's names: sampling, structured outputs, the
    choices and what they report, the engine requests. Keyword-only: each kind's own fields
    (its prompt first) come before these, and every style builds it by keyword."""

    options: SamplingOptions  # `logit_bias` left None: it is converted from `logit_bias` below
    logit_bias: dict[str, float] | None = None  # as sent: token ids as strings
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    # choices and what they report
    n: int | None = 1
    prompt_logprobs: int | None = None
    echo: bool = False
    truncate_prompt_tokens: int | None = None
    bad_words: list[str] | None = None
    return_token_ids: bool = False
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    # the engine requests
    priority: int = 0
    cache_salt: str | None = None
    lora: list[Any] | None = None  # vLLM's LoRARequest array (serving/lora.py)
    request_id: str | None = None
    use_beam_search: bool = False
    length_penalty: float = 1.0
    # logprobs as vLLM's options shape them
    return_tokens_as_token_ids: bool = False  # tokens written "token_id:N"
    logprob_token_ids: list[int] | None = None  # these ids' logprobs at each position (not a top-k)
    truncation_side: str | None = None  # "right": truncation keeps the first tokens
    stream_interval: int | None = None  # tokens per streamed chunk (vLLM's; at least the server's)


def token_bias(logit_bias: dict[str, float]) -> dict[int, float]:
    """`logit_bias` as sent (JSON keys are strings) keyed by token id."""
    try:
        return {int(k): v for k, v in logit_bias.items()}
    except ValueError:
        bad = [k for k in logit_bias if not _is_int_text(k)]
        raise APIError(400, "logit_bias contains key(s) that cannot be converted to integer token IDs: "
                       f"{bad!r}", "logit_bias") from None


def _is_int_text(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def options_from(req: Any, max_tokens: int | None, *, with_logit_bias: bool = True) -> SamplingOptions:
    """Sampling options from a chat or completion request struct (same field names).
    `with_logit_bias=False` leaves `logit_bias` for the caller to convert at its own step
    (`token_bias`), where a malformed key is reported after the prompt's errors."""
    stop = req.stop
    if isinstance(stop, str):
        stop = [stop]
    logit_bias = token_bias(req.logit_bias) if with_logit_bias and req.logit_bias else None
    extra = dict(req.vllm_xargs) if req.vllm_xargs else {}
    if req.kv_transfer_params:
        extra["kv_transfer_params"] = req.kv_transfer_params
    return SamplingOptions(
        max_tokens=max_tokens,
        seed=req.seed,
        stop=[s for s in (stop or []) if s],
        stop_token_ids=list(req.stop_token_ids or []),
        logit_bias=logit_bias,
        extra_args=extra or None,
        **plain_options(req),
    )


def check_prompt_logprobs(value: int | None, *, stream: bool, echo: bool, echo_default: int | None) -> int | None:
    """How many prompt logprobs the engine computes (vLLM: `prompt_logprobs`, else with `echo`
    the route's logprobs count), checked as vLLM checks it."""
    if value is not None:
        if stream and (value > 0 or value == -1):
            raise validation_error("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
        if value < 0 and value != -1:
            raise validation_error("`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs", value)
        return value
    return echo_default if echo else None


def stream_flags(req: Any, force_usage: bool = False) -> tuple[bool, bool, bool]:
    """(stream, include_usage, continuous_usage_stats) of an OpenAI request, as vLLM's
    `should_include_usage`: continuous stats only with `include_usage`, and both forced on by
    `--enable-force-include-usage`."""
    stream = bool(req.stream)
    so = req.stream_options
    if so is not None and not stream and so.given():
        raise validation_error("Stream options can only be defined when `stream=True`.", "stream_options")
    if force_usage:
        return stream, True, True
    include = bool(so and so.include_usage)
    return stream, include, include and bool(so.continuous_usage_stats)
