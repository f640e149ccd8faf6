"""``--tool-call-parser auto`` for the formats apertus .. kimi_k3: the template's markers decide."""

from __future__ import annotations

import pytest

from vllm_pyfrontend.parsers.auto import auto_tool_parser


@pytest.mark.parametrize(
    ("template", "name"),
    [
        ("{{ '<｜DSML｜ calls>' }}<｜DSML｜ invoke name=", "deepseek_v41"),
        ("<|tool_call>call:{{ name }}{...}<tool_call|>", "gemma4"),
        ("<start_function_call>call:{{ n }}<end_function_call>", "functiongemma"),
        ("<|tools_prefix|>{{ calls | tojson }}<|tools_suffix|>", "apertus"),
        ("<ifm|tool_calls><ifm|tool_call>{{ n }}", "k2_horizon"),
        ("<dots_function_call>\n<invoke name=", "dots"),
        ("<tool_calls><tool_call>{{ n }}<tool_sep><arg_key>k</arg_key><arg_value>", "hy_v3"),
        ("<|action_start|><|plugin|>\n{{ call | tojson }}<|action_end|>", "internlm"),
        ("<|message_model|><|content_invoke_tool_json|>", "inkling"),
        ("<|message_sep|>\n\nfunction call<|role_sep|>\n", "gigachat3"),
        ("<|tool_call|>{{ calls | tojson }}", "granite"),
        # the formats before them are still picked as before
        ("<tool_call>{{ n }}<arg_key>{{ k }}</arg_key><arg_value>", "glm45"),
        ("{{ '<tool_call>' }}{{ tool_call | tojson }}", "hermes"),
    ],
)
def test_auto_picks_by_template_markers(template: str, name: str) -> None:
    assert auto_tool_parser(template) == name
