"""Tests of vLLM's suites that vLLM's own frontend passes and this project's does not, on purpose
or not yet. Keys are pytest node ids relative to vLLM's source root
(`tests/entrypoints/...::test_name[params]`).

DELIBERATE_DIFFERENCES: where this project's answer is the better one for a user, each with why.
A missing feature is never a deliberate difference.

KNOWN_GAPS: differences still to close. The CI check (tests/conformance) reports them without
failing; an entry is removed when its fix lands, and any failure not listed in either fails CI.
"""

from __future__ import annotations

DELIBERATE_DIFFERENCES: dict[str, str] = {}

KNOWN_GAPS: dict[str, str] = {
    'tests/entrypoints/openai/completion/test_completion.py::test_completion_stream_options[facebook/opt-125m]':
        'stream_options include_usage=false with continuous_usage_stats=true: usage still sent on every chunk (vLLM sends none)',
    'tests/entrypoints/openai/completion/test_completion.py::test_completion_truncation_side_controls_prompt_truncation[facebook/opt-125m]':
        'truncation_side=left ignored: the last prompt tokens are kept where the first were asked for',
    'tests/entrypoints/openai/completion/test_completion.py::test_logprob_token_ids':
        'logprob_token_ids / return_tokens_as_token_ids ignored: tokens come back as text, never token_id:N',
    'tests/entrypoints/openai/completion/test_completion.py::test_logprob_token_ids_stream':
        'logprob_token_ids / return_tokens_as_token_ids ignored (streaming)',
    'tests/entrypoints/openai/completion/test_completion.py::test_single_completion[facebook/opt-125m]':
        '--enable-prompt-tokens-details not implemented: usage.prompt_tokens_details is null',
    'tests/entrypoints/openai/chat_completion/test_chat_echo.py::test_prompt_logprobs':
        '--max-logprobs not applied: prompt_logprobs=-1 (all) refused with max 20',
    'tests/entrypoints/openai/chat_completion/test_chat_echo.py::test_top_logprobs':
        'validation: "logprobs": "true" (a string) refused; vLLM coerces it to a bool',
    'tests/entrypoints/openai/chat_completion/test_chat_completion.py::test_kv_transfer_prompt_token_ids_round_trip':
        'kv_transfer_params.prompt_token_ids ignored: the messages are re-tokenized instead',
    'tests/entrypoints/openai/chat_completion/test_chat_completion.py::test_kv_transfer_prompt_token_ids_streaming':
        'kv_transfer_params.prompt_token_ids ignored (streaming)',
    'tests/entrypoints/openai/chat_completion/test_chat_logit_bias_validation.py::test_chat_logit_bias_multiple_non_integer_keys':
        'error message: a non-integer logit_bias key is not named in the 400',
    'tests/entrypoints/openai/chat_completion/test_chat_logit_bias_validation.py::test_chat_logit_bias_non_integer_key':
        'error message: a non-integer logit_bias key is not named in the 400',
    'tests/entrypoints/openai/chat_completion/test_logprob_token_ids.py::test_logprob_token_ids_returns_requested_ids[original-issue-shape]':
        'logprob_token_ids / return_tokens_as_token_ids ignored (chat)',
    'tests/entrypoints/openai/chat_completion/test_logprob_token_ids.py::test_logprob_token_ids_returns_requested_ids[sampled-inside-set]':
        'logprob_token_ids / return_tokens_as_token_ids ignored (chat)',
    'tests/entrypoints/openai/chat_completion/test_logprob_token_ids.py::test_logprob_token_ids_returns_requested_ids[sampled-outside-set]':
        'logprob_token_ids / return_tokens_as_token_ids ignored (chat)',
    'tests/entrypoints/openai/chat_completion/test_logprob_token_ids.py::test_logprob_token_ids_stream_with_no_top_k':
        'logprob_token_ids ignored (chat, streaming, no top_logprobs)',
    'tests/entrypoints/openai/chat_completion/test_root_path.py::test_chat_session_root_path_with_api_key[test_case1]':
        '--root-path not applied: /llm/v1/chat/completions is 404',
    'tests/entrypoints/openai/models/test_models.py::test_check_models':
        '/v1/models reports the resolved snapshot path as root, vLLM the name given on the command line',
    'tests/entrypoints/openai/test_return_token_ids.py::test_comparison_with_prompt_logprobs_and_logprobs':
        "return_tokens_as_token_ids ignored (completions with echo and prompt_logprobs): no token_id:N entries in logprobs.tokens",
    'tests/entrypoints/openai/test_return_tokens_as_ids.py::test_chat_return_tokens_as_token_ids_completion[True]':
        '--return-tokens-as-token-ids (server flag) ignored: tokens come back as text (chat)',
    'tests/entrypoints/openai/test_return_tokens_as_ids.py::test_completion_return_tokens_as_token_ids_completion[True]':
        '--return-tokens-as-token-ids (server flag) ignored: tokens come back as text (completions)',
}
