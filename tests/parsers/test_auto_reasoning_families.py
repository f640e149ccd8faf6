"""``--reasoning-parser auto`` for the reasoning formats beyond DeepSeek/Qwen3/GLM/Kimi/MiniMax
each format's own markers in the chat template, else config.json's model_type for
the ``<think>`` families. Template snippets are the formats' generation-prompt lines."""

from __future__ import annotations

import pytest

from vllm_pyfrontend.parsers.auto import auto_reasoning_parser
from vllm_pyfrontend.parsers.reasoning import reasoning_parser_names
from vllm_pyfrontend.supervisor.demo_model import deepseek_v4_template_path

BY_TEMPLATE = {
    "cohere_command3": "{{ '<|START_THINKING|>' }}{{ thinking }}{{ '<|END_THINKING|>' }}",
    "gemma4": "{%- if enable_thinking %}<|channel>thought\n{{ t }}<channel|>{% endif %}",
    "inkling": "<|message_model|><|content_thinking|>{{ r }}<|end_message|>",
    "kimi_k3": "<|open|>think<|sep|>{{ r }}<|close|>think<|sep|>",
    "k2_horizon": "{{ '<ifm|think>' if reasoning_effort == 'high' else '<ifm|think_fast>' }}",
    "minimax_m3": "<mm:think>{{ r }}</mm:think>",
    "seed_oss": "<seed:think>{{ r }}</seed:think>",
    "plamo3": "<|plamo:begin_think:plamo|>{{ r }}<|plamo:end_think:plamo|>",
    "mistral": "[THINK]{{ r }}[/THINK]",
    "muse_glimmer": "<|start|>assistant to=self<|message|>{{ r }}<|eom|>",
    "granite": "Respond with 'Here is my thought process:' then 'Here is my response:'",
    "hunyuan_a13b": "<think>\n{{ r }}\n</think>\n<answer>\n{{ c }}\n</answer>",
}

BY_MODEL_TYPE = {
    "ernie4_5_moe": "ernie45",
    "step3": "step3",
    "step3p5": "step3p5",
    "olmo3": "olmo3",
    "mimo": "mimo",
    "nemotron_h": "nemotron_v3",
    "seed_oss": "seed_oss",
    "minicpmv": "minicpmv",
}


@pytest.mark.parametrize("name", sorted(BY_TEMPLATE))
def test_by_template_markers(name: str) -> None:
    assert auto_reasoning_parser(BY_TEMPLATE[name]) == name
    assert name in reasoning_parser_names()


@pytest.mark.parametrize("model_type", sorted(BY_MODEL_TYPE))
def test_think_template_by_model_type(model_type: str) -> None:
    name = BY_MODEL_TYPE[model_type]
    assert auto_reasoning_parser("{{ '<think>' }}{{ r }}{{ '</think>' }}", model_type) == name
    assert auto_reasoning_parser(None, model_type) == name
    assert name in reasoning_parser_names()


def test_earlier_choices_unchanged() -> None:
    src = deepseek_v4_template_path().read_text(encoding="utf-8")
    assert auto_reasoning_parser(src) == "deepseek_v4"
    assert auto_reasoning_parser("{% if enable_thinking %}<think>{% endif %}") == "qwen3"
    assert auto_reasoning_parser("<think>", "glm4_moe") == "glm45"
    assert auto_reasoning_parser("no reasoning markers", "step3") is None
