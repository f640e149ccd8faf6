"""``auto`` picks the pythonic, JSON, XML and harmony formats from template markers and config.json's model_type."""

from __future__ import annotations

import pytest

from vllm_pyfrontend.parsers.auto import auto_reasoning_parser, auto_tool_parser

GPT_OSS = ("{{ '<|start|>assistant<|channel|>commentary to=functions.' + name + ' <|constrain|>json<|message|>' }}"
           "{{ '<|channel|>analysis<|message|>' }}")


@pytest.mark.parametrize("template, name", [
    (GPT_OSS, "openai"),
    ("{{ '<seed:tool_call>' }}<function={{ n }}>", "seed_oss"),
    ("<longcat_tool_call>{{ call | tojson }}</longcat_tool_call>", "longcat"),
    ("<|tool_call_start|>[{{ calls }}]<|tool_call_end|>", "lfm2"),
    ("<|plamo:begin_tool_requests:plamo|>", "plamo3"),
    ("]<]minimax[>[<tool_call>", "minimax_m3"),
    ('<steptml:invoke name="{{ n }}">', "step3"),
    ("<atem:function_calls>", "muse_glimmer"),
    ("<function_calls>{{ c }}</function_calls>", "olmo3"),
    ("functools[{{ calls | tojson }}]", "phi4_mini_json"),
])
def test_tool_parser_from_template(template: str, name: str) -> None:
    assert auto_tool_parser(template) == name


def test_from_model_type() -> None:
    assert auto_tool_parser(None, "gpt_oss") == "openai"
    assert auto_reasoning_parser(None, "gpt_oss") == "openai_gptoss"
    assert auto_reasoning_parser(GPT_OSS) == "openai_gptoss"
    assert auto_tool_parser(None, "seed_oss") == "seed_oss"
    # the formats before are still found
    assert auto_tool_parser("{{ '<tool_call>' }}{{ tool_call | tojson }}") == "hermes"
    assert auto_reasoning_parser("{% if enable_thinking %}<think>{% endif %}") == "qwen3"
