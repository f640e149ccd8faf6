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

# qwen3_xml: vLLM's name for Qwen3-Coder's XML format (also accepted here: JSON in <tool_call>,
# vllm-rs's meaning of the name; tests/parsers/test_streaming_args.py covers that form).
TOOL_CASES += [
    ToolCase("qwen3_xml", c.name, c.text, c.content, c.calls)
    for c in ALL_CASES
    if c.fmt == "qwen3_coder" and c.name not in DOCUMENTED and not c.malformed
]

KNOWN_GAPS: dict[str, str] = {}  # none left: `hf` is parsers/response_template/
