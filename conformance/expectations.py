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

_EMBED = "tests/entrypoints/pooling/embed/test_online.py::"
_CLASSIFY = "tests/entrypoints/pooling/classify/test_online.py::"
_TOKEN_CLASSIFY = "tests/entrypoints/pooling/token_classify/test_online.py::"
_TOKEN_EMBED = "tests/entrypoints/pooling/token_embed/test_online.py::"
_CROSS_ENCODER = "tests/entrypoints/pooling/scoring/test_cross_encoder_online.py::"
_BI_ENCODER = "tests/entrypoints/pooling/scoring/test_bi_encoder_online.py::"
_REWARD = "tests/entrypoints/pooling/reward/test_token_reward_online.py::"
_INTERNLM2 = "internlm/internlm2-1_8b-reward"
_E5 = "intfloat/multilingual-e5-small"
_APEACH = "jason9693/Qwen2.5-1.5B-apeach"

_INVOCATIONS = ("POST /invocations on a pooling model: 400 `Cannot find suitable handler for request. Expected one "
                "of: ['ChatCompletionRequest', 'CompletionRequest']` (a chat body goes to the chat handler); vLLM "
                "dispatches it to the model's pooling handler (/v1/embeddings, /classify)")
_PLUGIN = ("POST /pooling with task 'plugin' and no IO processor: `Unsupported task: 'plugin' Supported tasks: [...]`; "
           "vLLM answers `No IOProcessor plugin installed.`")
_OTHER_TASK = ("POST /pooling with a task the model has but is not serving: `The model's pooling task is 'X', not 'Y'. "
               "Try switching ...`; vLLM's message starts `Try switching the model's pooling_task via`")
_NO_SCORE = ("POST /score and /rerank on a classifier with num_labels != 1: vLLM registers no such route (404 "
             "`{\"detail\": \"Not Found\"}`); this frontend answers 400 `The model does not support scoring: a "
             "classifier scores pairs only with one label (num_labels == 1), ...` (KeyError: 'detail')")
_TOO_LONG = ("a score or rerank pair longer than max_model_len: 400 `This model's maximum context length is 100 tokens. "
             "However, you requested N tokens in the input ... reduce the length of the input or set "
             "`truncate_prompt_tokens`.`; vLLM's message says `Please reduce the length of the input prompt`")
_LITERAL = ("an invalid enum value is refused with `Invalid enum value 'bad_...' - at `$.field``; vLLM's message "
            "(pydantic) names the error type `literal_error`")

KNOWN_GAPS: dict[str, str] = {
    _EMBED + f"test_padding[{_E5}]": "`padding: \"max_length\"` is ignored (prompt_tokens stays 3); vLLM pads the "
    "prompt to the maximum length, and refuses `padding: \"longest\"`",
    _EMBED + "test_invocations_completion_request": _INVOCATIONS,
    _EMBED + "test_invocations_chat_request": _INVOCATIONS,
    _EMBED + f"test_base64_embed_dtype_and_endianness[{_E5}]": "embed_dtype `fp8_e4m3` / `fp8_e5m2` refused (400, "
    "KeyError: 'data'): only float32, float16, bfloat16 are accepted",
    _EMBED + f"test_bytes_embed_dtype_and_endianness[{_E5}]": "encoding_format `bytes` refused (400; no `metadata` "
    "header, KeyError: 'metadata'): only float and base64 are accepted",
    _EMBED + f"test_bytes_only_embed_dtype_and_endianness[{_E5}]": "encoding_format `bytes_only` refused (400; the "
    "JSON error body read as tensor bytes: ValueError: buffer size must be a multiple of element size)",
    **{_EMBED + f"test_params_not_supported[{p}-{_E5}]": _LITERAL for p in ("encoding_format", "embed_dtype", "endianness")},
    _EMBED + f"test_pooling_not_supported[token_embed-{_E5}]": _OTHER_TASK,
    _EMBED + f"test_pooling_not_supported[plugin-{_E5}]": _PLUGIN,
    _CLASSIFY + "test_invocations_completion_request": _INVOCATIONS,
    _CLASSIFY + "test_invocations_chat_request": _INVOCATIONS,
    _CLASSIFY + f"test_score[{_APEACH}]": _NO_SCORE,
    _CLASSIFY + f"test_rerank[{_APEACH}]": _NO_SCORE,
    _CLASSIFY + f"test_pooling_not_supported[token_classify-{_APEACH}]": _OTHER_TASK,
    _CLASSIFY + f"test_pooling_not_supported[plugin-{_APEACH}]": _PLUGIN,
    _TOKEN_CLASSIFY + f"test_pooling_not_supported[classify-{_APEACH}]": _OTHER_TASK,
    _TOKEN_CLASSIFY + f"test_pooling_not_supported[plugin-{_APEACH}]": _PLUGIN,
    _CROSS_ENCODER + "test_rerank_api_max_model_len": _TOO_LONG,
    _CROSS_ENCODER + "test_score_api_max_model_len": _TOO_LONG,
    _CROSS_ENCODER + "test_invocations": _INVOCATIONS.replace("/v1/embeddings, /classify", "/rerank"),
    _CROSS_ENCODER + "test_rerank_max_tokens_per_doc_validation": "a negative max_tokens_per_doc is refused with "
    "`Input should be greater than or equal to 0 [type=greater_than_equal] - at `$.max_tokens_per_doc``; vLLM says "
    "`max_tokens_per_doc must be a non-negative integer`",
    "tests/entrypoints/pooling/basic/test_truncation.py::test_bigger_truncation_size": "/v1/embeddings with "
    "truncate_prompt_tokens > max_model_len: 400 `truncate_prompt_tokens=129 cannot be greater than max_model_len = "
    "128. Please request a smaller truncation size.` (frontend/llm/limits.py, the completions wording); vLLM's "
    "pooling message is exactly `truncate_prompt_tokens value is greater than max_model_len. Please request a "
    "smaller truncation size.`",
    _BI_ENCODER + "test_rerank_api_max_model_len": _TOO_LONG,
    _BI_ENCODER + "test_score_api_max_model_len": _TOO_LONG,
    **{f"tests/entrypoints/pooling/embed/test_online_long_text.py::{t}[{_E5}]": "`--pooler-config "
       "'{\"enable_chunked_processing\": true, \"max_embed_len\": 10000, ...}'` is not honoured: an input longer "
       "than max_model_len (512) is refused with 400 `This model's maximum context length is 512 tokens. However, "
       "you requested 1694 tokens in the input. ...`; vLLM embeds it in chunks up to max_embed_len"
       for t in ("test_long_text_embedding_1500_chars", "test_long_text_embedding_2500_chars",
                 "test_batch_long_text_embedding", "test_chunked_processing_response_format")},
    _REWARD + f"test_base64_embed_dtype_and_endianness[{_INTERNLM2}]": "/pooling: embed_dtype `fp8_e4m3` / "
    "`fp8_e5m2` refused (400, KeyError: 'data'): only float32, float16, bfloat16 are accepted",
    _REWARD + f"test_bytes_embed_dtype_and_endianness[{_INTERNLM2}]": "/pooling: encoding_format `bytes` refused "
    "(400; no `metadata` header, KeyError: 'metadata')",
    _REWARD + f"test_bytes_only_embed_dtype_and_endianness[{_INTERNLM2}]": "/pooling: encoding_format `bytes_only` "
    "refused (400; the JSON error body read as tensor bytes: cosine similarity 0.0000 with the float output)",
    **{_REWARD + f"test_params_not_supported[{p}-{_INTERNLM2}]": _LITERAL for p in ("encoding_format", "embed_dtype", "endianness")},
    _REWARD + "test_invocations_chat_request": _INVOCATIONS.replace("/v1/embeddings, /classify", "/pooling"),
    _REWARD + "test_invocations_conversation_chat_request": _INVOCATIONS.replace("/v1/embeddings, /classify", "/pooling"),
    _BI_ENCODER + "test_pooling_not_supported[plugin]": _PLUGIN,
    _BI_ENCODER + "test_invocations": _INVOCATIONS.replace("/v1/embeddings, /classify", "/rerank"),
    _CROSS_ENCODER + "test_pooling_not_supported[token_classify]": _OTHER_TASK,
    _CROSS_ENCODER + "test_pooling_not_supported[plugin]": _PLUGIN,
    _TOKEN_EMBED + f"test_pooling_not_supported[embed-{_E5}]": _OTHER_TASK,
    _TOKEN_EMBED + f"test_pooling_not_supported[plugin-{_E5}]": _PLUGIN,
}
