"""Commit-rule results for the formats whose arguments stream as they are generated
(dots, hy_v4, k2_horizon, minicpm5, minimax_m3): their case modules wrote these
malformed outputs as "given back whole as content", the answer before the calls streamed.
A call whose name went out while streaming cannot be taken back: it is completed with
valid JSON arguments and the text from where the body stopped being valid is content
(tool/base.py; committed.py has the rule's other cases and its WHY).

hy_v4: vLLM's V4 parser is strict (any malformed block is content). Here well-formed
calls stream like every other format's, so its strict cases fall under the same rule.
"""

from __future__ import annotations

COMMITTED: dict[str, tuple[str, list]] = {
    'tool:dots:malformed': ('', [('get_weather', {'city': 'Paris'})]),
    'tool:k2_horizon:malformed': ('', [('get_weather', {})]),
    'tool:k2_horizon:vllm_test_malformed_and_incomplete_input_is_content_1': ('', [('ping', {})]),
    'tool:hy_v4:vllm_test_strict_returns_raw_content_missing_tool_calls_end': ('', [('get_current_date', {})]),
    'tool:hy_v4:vllm_test_strict_returns_raw_content_unbalanced_tool_call': ('', [('get_weather', {'city': 'X'})]),
    'tool:hy_v4:vllm_test_strict_returns_raw_content_unparsed_argument_payload': (
        'JUNK</tool_call></tool_calls>', [('get_weather', {'city': 'X'})]),
    'tool:hy_v4:vllm_test_strict_returns_raw_content_unbalanced_arg_tags': (
        '/tool_call></tool_calls>', [('get_weather', {})]),
    'tool:minicpm5:vllm_test_incomplete_missing_function_end': ('', [('get_weather', {'city': '北京'})]),
    'tool:minicpm5:vllm_test_param_missing_name_invalid': (
        '>北京</param><param name="date">2024-06-27</param></function>\n', [('get_weather', {})]),
    'tool:minicpm5:vllm_test_duplicate_param_names_invalid': ('', [('get_weather', {'city': '北京'})]),
    'tool:minicpm5:malformed_truncated': ('', [('get_weather', {'city': 'Paris'})]),
    'tool:minicpm5:malformed_broken': ('>1</param></function> tail', [('f', {})]),
    'tool:minimax_m3:malformed_truncated': ('', [('get_weather', {'city': 'Paris'})]),
    'tool:minimax_m3:malformed_broken': (
        'b>\n]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call> tail', [('f', {'a': '1'})]),
}

_M3_REPEAT = ("a repeated top-level argument keeps its first value: arguments stream as generated, "
              "and a value already sent cannot become a list; vLLM collects the repeats into a list "
              "(repeats inside a nested value are lists here too)")

OVERRIDES = {
    'tool:minimax_m3:repeated_element_is_list': ('', [('search', {'city': 'a'})]),
}

DIFFERENCES = {
    'tool:minimax_m3:repeated_element_is_list': _M3_REPEAT,
}

#: committed above, where vLLM's parser gives the same answer (it also completes a cut call)
AGREES = {"tool:minimax_m3:malformed_truncated"}
