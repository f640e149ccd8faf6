"""``auto`` parser selection from the chat template / model type."""

from __future__ import annotations

from vllm_pyfrontend.parsers.auto import auto_reasoning_parser, auto_tool_parser
from vllm_pyfrontend.supervisor.demo_model import deepseek_v4_template_path


def test_deepseek_v4_template() -> None:
    src = deepseek_v4_template_path().read_text(encoding="utf-8")
    assert auto_tool_parser(src) == "deepseek_v4"
    assert auto_reasoning_parser(src) == "deepseek_v4"
    assert auto_reasoning_parser(src, "deepseek_v4") == "deepseek_v4"


def test_other_templates() -> None:
    assert auto_tool_parser("{{ '<tool_call>' }}{{ tool_call | tojson }}") == "hermes"
    assert auto_tool_parser("<tool_call>\n<function={{ n }}>\n<parameter={{ k }}>") == "qwen3_coder"
    assert auto_tool_parser("<tool_call>{{ n }}<arg_key>{{ k }}</arg_key><arg_value>") == "glm45"
    assert auto_tool_parser("plain", "kimi_k2") == "kimi_k2"
    assert auto_tool_parser(None, None) is None
    assert auto_reasoning_parser("no thinking here", "qwen3") is None
    assert auto_reasoning_parser("{% if enable_thinking %}<think>{% endif %}") == "qwen3"
