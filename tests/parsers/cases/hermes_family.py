"""Formats implemented before the all-names work: the shared corpus, as cases per name."""

from __future__ import annotations

from tests.parsers.cases import ReasoningCase, ToolCase
from tests.parsers.corpus import ALL_CASES
from tests.parsers.test_vllm_differential import DOCUMENTED

TOOL_CASES = [ToolCase(c.fmt, c.name, c.text, c.content, c.calls) for c in ALL_CASES if c.name not in DOCUMENTED]

REASONING_CASES = [
    ReasoningCase(name, "both", "<think>I think</think>Answer.", "I think", "Answer.")
    for name in ("deepseek_r1", "qwen3")
]
