"""vLLM's request-level checks for the OpenAI generation routes, in one call per route.

These are the checks vLLM's `SamplingParams._verify_args` and its `TokenizeParams` make before a
request is lowered: the stop / bad-words / allowed-ids rules, the output and truncation budgets
against the context length, and the cache salt. The shared rules live in
`llm/limits.py`; this module only maps the OpenAI field names onto them.
"""

from __future__ import annotations

from typing import Any

from vllm_pyfrontend.llm import limits


def check_openai_request(req: Any, max_model_len: int, *, max_tokens_param: str = "max_tokens") -> None:
    """Raises APIError / InvalidRequestError (both answered 400) for what vLLM refuses. (What
    vLLM's request models check before their fields, stream options, empty `tools`, the tool
    choice, ..., the bodies check as they are decoded: api/openai/schemas.py.)"""
    limits.check_stop(req.stop)
    limits.check_bad_words(req.bad_words)
    limits.check_allowed_token_ids(req.allowed_token_ids)
    limits.check_output_budget(getattr(req, max_tokens_param), max_model_len, max_tokens_param)
    limits.check_truncation(req.truncate_prompt_tokens, max_model_len)
    limits.check_cache_salt(req.cache_salt)
