"""The request checks vLLM's Python server makes before anything is generated, beyond the
engine's own (`engine/validate.py`): what `SamplingParams._verify_args` refuses in fields the
engine never reads (stop strings, bad words), the output and truncation budgets that vLLM's
`TokenizeParams` holds against the context length, and the cache-salt rules.

Each raises `InvalidRequestError` (a 400 naming the field). Every API style that takes these
fields (chat, completions, the token-in generate route) calls the same functions, so they refuse
the same requests vLLM refuses; tests/e2e/test_validation_parity.py holds one row per check.
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_pyfrontend import environment
from vllm_pyfrontend.errors import InvalidRequestError, with_parameter

# `check_stop`'s default bound: vLLM's VLLM_MAX_STOP_STRINGS (default 4), the request
# protocol's bound on `stop`, read when a request gives stop strings.
VLLM_MAX_STOP_STRINGS = -1
_MAX_CACHE_SALT_LENGTH = 128
_CACHE_SALT_FORBIDDEN = frozenset("@/\\\x00")


def check_stop(stop: str | Sequence[str] | None, *, limit: int | None = VLLM_MAX_STOP_STRINGS) -> list[str]:
    """The stop strings as a list: none empty (vLLM: "stop cannot contain an empty string"),
    and at most `limit` of them (None: any number; by default vLLM's request protocol's bound,
    VLLM_MAX_STOP_STRINGS)."""
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    if limit == VLLM_MAX_STOP_STRINGS:
        limit = environment.max_stop_strings()
    if limit is not None and len(stops) > limit:
        raise InvalidRequestError(f"stop may hold at most {limit} strings, got {len(stops)}.", "stop")
    if any(not s for s in stops):
        raise InvalidRequestError("stop cannot contain an empty string.", "stop")
    return stops


def check_bad_words(words: Sequence[str] | None) -> None:
    if words and any(not w for w in words):
        raise InvalidRequestError(f"bad_words cannot contain an empty string. Got bad_words={list(words)}",
                                  "bad_words")


def check_allowed_token_ids(ids: Sequence[int] | None) -> None:
    if ids is not None and len(ids) == 0:
        raise InvalidRequestError(with_parameter("allowed_token_ids is not None and empty!", "allowed_token_ids",
                                                 list(ids)), "allowed_token_ids")


def check_output_budget(max_tokens: int | None, max_model_len: int, param: str = "max_tokens") -> None:
    """vLLM's TokenizeParams: asking for more output tokens than the model's whole context is
    refused up front (a smaller request that only overruns the room left is clamped)."""
    if max_tokens is not None and max_tokens > max_model_len:
        raise InvalidRequestError(with_parameter(
            f"{param}={max_tokens} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.", param, max_tokens), param)


def check_truncation(truncate_prompt_tokens: int | None, max_model_len: int) -> None:
    if truncate_prompt_tokens is not None and truncate_prompt_tokens > max_model_len:
        raise InvalidRequestError(with_parameter(
            f"truncate_prompt_tokens={truncate_prompt_tokens} cannot be greater than max_model_len = "
            f"{max_model_len}. Please request a smaller truncation size.", "truncate_prompt_tokens",
            truncate_prompt_tokens), "truncate_prompt_tokens")


def check_cache_salt(cache_salt: object) -> None:
    """vLLM's validate_cache_salt: a non-empty string of at most 128 characters without
    '@', '/', '\\' or NUL (the salt ends up in cache keys and paths); its messages carry vLLM's
    ` (parameter=cache_salt)`."""
    if cache_salt is None:
        return
    if not isinstance(cache_salt, str) or not cache_salt:
        raise InvalidRequestError(with_parameter("Parameter 'cache_salt' must be a non-empty string if provided.",
                                                 "cache_salt"), "cache_salt")
    if len(cache_salt) > _MAX_CACHE_SALT_LENGTH or any(c in _CACHE_SALT_FORBIDDEN for c in cache_salt):
        raise InvalidRequestError(with_parameter("Parameter 'cache_salt' must be at most 128 characters and must "
                                                 "not contain '@', '/', '\\\\', or NUL.", "cache_salt"),
                                  "cache_salt")
