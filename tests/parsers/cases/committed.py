"""Malformed outputs whose first call was announced while streaming (the commit rule).

Tool-call arguments stream as they are generated (frontend/parsers/tool/base.py):
a call goes out (id, name, first argument text) once its name is complete and
its arguments have begun, and cannot be taken back. If the output then turns
out malformed, or ends inside the call, the call is completed (its arguments
closed into valid JSON) and the text from where the body stopped being valid
is content; the same streamed or whole. The case modules wrote these outputs
as "given back whole as content" (the answer before arguments streamed): the
expectations here replace theirs, and vLLM (which gives the text back, or
passes invalid arguments on) differs by design. tests/parsers/test_streaming_args.py
pins the rule itself.
"""

from __future__ import annotations

WHY = (
    "commit rule: the call was announced while its arguments streamed, so it is "
    "completed with valid JSON arguments and the rest is content; vLLM gives the "
    "malformed text back (or passes invalid arguments on)"
)

#: case id -> (content, calls) under the commit rule
COMMITTED: dict[str, tuple[str, list]] = {
    'tool:longcat:malformed_truncated': ('', [('get_weather', {'city': 'Pari'})]),
    'tool:longcat:malformed_broken': (',}}\n</longcat_tool_call> tail', [('f', {'a': 1})]),
    'tool:phi4_mini_json:malformed_truncated': ('', [('get_weather', {})]),
    'tool:phi4_mini_json:malformed_broken': ('a: 1}}] tail', [('f', {})]),
    'tool:xlam:malformed_truncated': ('', [('get_weather', {})]),
    'tool:xlam:malformed_broken': ('] tail', [('f', {'a': 1})]),
    'tool:plamo3:malformed_truncated': ('', [('get_weather', {'city': 'Pari'})]),
    'tool:plamo3:malformed_broken': ('oops}<|plamo:end_tool_arguments:plamo|><|plamo:end_tool_request:plamo|><|plamo:end_tool_requests:plamo|> tail', [('f', {})]),
    'tool:llama4_json:malformed_truncated': ('', [('get_weather', {})]),
    'tool:llama4_json:malformed_broken': ('} tail', [('f', {'a': 1})]),
    'tool:qwen3_json:malformed_truncated': ('', [('get_weather', {'city': 'P'})]),
    'tool:qwen3_json:malformed_broken': (',}}\n</tool_call> tail', [('f', {'a': 1})]),
    'tool:apertus:malformed': ('}]<|tools_suffix|>', [('get_weather', {})]),
    'tool:ernie45:malformed': ('}\n</tool_call>', [('get_weather', {})]),
    'tool:gigachat3:malformed': ('}', [('get_weather', {})]),
    'tool:granite:malformed': ('}]', [('get_weather', {})]),
    'tool:granite-20b-fc:malformed': ('}', [('get_weather', {})]),
    'tool:granite4:malformed': ('}\n</tool_call>', [('get_weather', {})]),
    'tool:hunyuan_a13b:malformed': ('}]</tool_calls>', [('get_weather', {})]),
    'tool:internlm:malformed': ('}<|action_end|>', [('get_weather', {})]),
    'tool:jamba:malformed': ('}]</tool_calls>', [('get_weather', {})]),
    'tool:phi4_mini_json:vllm_test_malformed_input_0': ('', [('func', {})]),
    'tool:longcat:vllm_test_malformed_input_0': ('', [('func', {})]),
    'tool:apertus:vllm_incomplete_tool_call': ('', [('get_weather', {'location': 'London'})]),
    'tool:gemma4:vllm_test_incomplete_tool_call': ('', [('get_weather', {'location': 'London'})]),
    'tool:ling3:malformed_truncated': ('', [('get_weather', {'city': 'Paris'})]),
    'tool:poolside_v1:malformed_truncated': ('', [('get_weather', {'city': 'Paris'})]),
    'tool:step3p5:malformed_truncated': ('', [('get_weather', {'city': 'Paris'})]),
    'tool:seed_oss:malformed_truncated': ('', [('get_weather', {'city': 'Paris'})]),
    'tool:mimo:malformed_truncated': ('', [('get_weather', {'city': 'Paris'})]),
    'tool:step3:malformed_truncated': ('', [('get_weather', {'city': 'Paris'})]),
    'tool:muse_glimmer:malformed_truncated': ('', [('get_weather', {'city': 'Paris'})]),
    'tool:cohere_command3:malformed': ('}]<|END_ACTION|>', [('get_weather', {})]),
    'tool:cohere_command4:malformed': ('}]<|END_ACTION|>', [('get_weather', {})]),
    'tool:inkling:malformed': ('}', [('get_weather', {})]),
    'tool:pythonic:malformed_truncated': ('', [('get_weather', {'city': 'Pari'})]),
    'tool:llama4_pythonic:malformed_truncated': ('', [('get_weather', {'city': 'Pari'})]),
    'tool:olmo3:malformed_truncated': ('', [('get_weather', {'city': 'Paris'})]),
    'tool:lfm2:malformed_truncated': ('', [('get_weather', {'city': 'Paris'})]),
    'tool:lfm2:vllm_test_tool_call_nested_quote': ("360,450p' /testbed/sympy/matrices/common.py')]<|tool_call_end|>", [('bash', {'command': 'sed -n '})]),
}

#: ids (committed above or elsewhere) where vLLM's parser gives the same answer:
#: no documented difference (vLLM also completes a call cut by the end of output)
AGREES = {
    "tool:apertus:vllm_incomplete_tool_call",
    "tool:gemma4:vllm_test_incomplete_tool_call",
    "tool:ling3:malformed_truncated",
    "tool:step3p5:malformed_truncated",
    "tool:seed_oss:malformed_truncated",
    "tool:mimo:malformed_truncated",
    "tool:plamo3:vllm_test_extract_tool_calls_partial_marker",
}
