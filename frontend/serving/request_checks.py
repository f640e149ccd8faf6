"""vLLM's request-level checks for the OpenAI generation routes, in one call per route.

These are the checks vLLM's chat and completion protocol classes (pydantic validators) and its
`TokenizeParams` make before a request is lowered: stream options only with `stream`, no empty
`tools`, the stop / bad-words / allowed-ids rules of `SamplingParams._verify_args`, the output
and truncation budgets against the context length, and the cache salt. The shared rules live in
`llm/limits.py`; this module only maps the OpenAI field names onto them.
"""

from __future__ import annotations

from typing import Any

from vllm_pyfrontend.llm import limits
from vllm_pyfrontend.errors import APIError


def check_openai_request(req: Any, max_model_len: int, *, max_tokens_param: str = "max_tokens") -> None:
    """Raises APIError / InvalidRequestError (both answered 400) for what vLLM refuses."""
    so = req.stream_options
    if so is not None and not req.stream and so.given():
        raise APIError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
    if getattr(req, "tools", None) is not None and len(req.tools) == 0:
        raise APIError(400, "`tools` must not be an empty array. Either provide at least one tool or omit "
                       "the field entirely.", "tools")
    limits.check_stop(req.stop)
    limits.check_bad_words(req.bad_words)
    limits.check_allowed_token_ids(req.allowed_token_ids)
    limits.check_output_budget(getattr(req, max_tokens_param), max_model_len, max_tokens_param)
    limits.check_truncation(req.truncate_prompt_tokens, max_model_len)
    limits.check_cache_salt(req.cache_salt)
