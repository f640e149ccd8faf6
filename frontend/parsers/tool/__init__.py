"""Tool-call parsers, by vLLM's ``--tool-call-parser`` names.

Each parser is an incremental transformer over the content text of one
choice: ``feed(text, token_ids=None) -> AssistantDelta | None`` and
``finish() -> AssistantDelta | None`` (see base.py for the engine and
special.py for the token-id contract).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from vllm_pyfrontend.parsers.special import SpecialGate
from vllm_pyfrontend.parsers.tool.base import SectionToolParser, ToolFormat
from vllm_pyfrontend.parsers.tool.forced import NamedCall, RequiredCalls
from vllm_pyfrontend.parsers.tool.json_calls import (
    DeepSeekV3,
    DeepSeekV31,
    Hermes,
    KimiK2,
    Llama3Json,
    Mistral,
)
from vllm_pyfrontend.parsers.tool.xml_calls import Dsml, Glm45, MinimaxM2, Qwen3Coder, Qwen3Xml

#: name -> factory(tools) -> ToolFormat
FormatFactory = Callable[[Sequence[Any]], ToolFormat]

_REGISTRY: dict[str, FormatFactory] = {}


def register_tool_parser(name: str, factory: FormatFactory) -> None:
    """Register a format under a ``--tool-call-parser`` name (replaces any)."""
    _REGISTRY[name] = factory


def tool_parser_names() -> list[str]:
    return sorted(_REGISTRY)


def get_tool_parser(
    name: str,
    tokenizer: Any = None,
    tools: Sequence[Any] | None = None,
    gate: SpecialGate | None = None,
) -> SectionToolParser:
    """A fresh parser for one choice. ``tools``: the request's OpenAI tool dicts
    (schema-driven value types for XML formats)."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown tool parser {name!r}; known: {', '.join(tool_parser_names())}"
        ) from None
    fmt = factory(list(tools or []))
    parser = SectionToolParser(fmt, tokenizer=tokenizer, tools=tools, gate=gate)
    # a format may wrap its parser (channels.py: framing markers dropped)
    wrap = getattr(fmt, "wrap_parser", None)
    return wrap(parser) if wrap is not None else parser


def forced_tool_parser(tool_choice_name: str | None) -> SectionToolParser:
    """Parser for output forced by structured outputs: ``tool_choice`` "required"
    (``tool_choice_name=None``) or a named function. Not a ``--tool-call-parser``:
    with a forced choice the model's own call syntax is not used (as in vLLM)."""
    fmt = RequiredCalls() if tool_choice_name is None else NamedCall(tool_choice_name)
    return SectionToolParser(fmt)


def tool_markers(name: str) -> list[str]:
    """Every start and end marker of a format (for gates shared with reasoning)."""
    fmt = _REGISTRY[name]([])
    out = list(fmt.sections)
    for sec in fmt.sections.values():
        out.extend(sec.ends)
    return out


register_tool_parser("hermes", lambda tools: Hermes())
register_tool_parser("qwen3_json", lambda tools: Hermes())
register_tool_parser("qwen3_coder", lambda tools: Qwen3Coder(tools))
register_tool_parser("qwen3_xml", lambda tools: Qwen3Xml(tools))
register_tool_parser("deepseek_v3", lambda tools: DeepSeekV3())
register_tool_parser("deepseek_v31", lambda tools: DeepSeekV31())
register_tool_parser("deepseek_v32", lambda tools: Dsml(("function_calls",), tools))
register_tool_parser(
    "deepseek_v4", lambda tools: Dsml(("tool_calls",), tools, variants=("toolcalls", "tool"))
)
register_tool_parser("llama3_json", lambda tools: Llama3Json())
register_tool_parser("llama4_json", lambda tools: Llama3Json())
register_tool_parser("mistral", lambda tools: Mistral())
register_tool_parser("kimi_k2", lambda tools: KimiK2())
register_tool_parser("glm45", lambda tools: Glm45(tools))
register_tool_parser("glm47", lambda tools: Glm45(tools))
register_tool_parser("minimax_m2", lambda tools: MinimaxM2(tools))


# --- helper 15a: every remaining vLLM tool-call parser name (a-k) ------------------
from vllm_pyfrontend.parsers.tool import channels as _ch  # noqa: E402
from vllm_pyfrontend.parsers.tool import gemma as _gm  # noqa: E402
from vllm_pyfrontend.parsers.tool import json_families as _jf  # noqa: E402
from vllm_pyfrontend.parsers.tool import tagged_params as _tp  # noqa: E402

register_tool_parser("apertus", lambda tools: _jf.Apertus())
register_tool_parser("cohere_command3", lambda tools: _ch.CohereCommand(tools))
register_tool_parser("cohere_command4", lambda tools: _ch.CohereCommand(tools, cmd4=True))
register_tool_parser("deepseek_v41", lambda tools: _tp.DsmlSpaced(tools))
register_tool_parser("dots", lambda tools: _tp.Dots(tools))
register_tool_parser("ernie45", lambda tools: _jf.Ernie45())
register_tool_parser("functiongemma", lambda tools: _gm.FunctionGemma(tools))
register_tool_parser("gemma4", lambda tools: _gm.Gemma4(tools))
register_tool_parser("gigachat3", lambda tools: _jf.GigaChat3())
register_tool_parser("granite", lambda tools: _jf.Granite())
register_tool_parser("granite-20b-fc", lambda tools: _jf.Granite20bFC())
register_tool_parser("granite4", lambda tools: _jf.Granite4())
register_tool_parser("hunyuan_a13b", lambda tools: _jf.ToolCallsArray())
register_tool_parser("hy_v3", lambda tools: _tp.HyV3(tools))
register_tool_parser("hy_v4", lambda tools: _tp.HyV4(tools))
register_tool_parser("inkling", lambda tools: _ch.Inkling(tools))
register_tool_parser("internlm", lambda tools: _jf.Internlm(tools))
register_tool_parser("jamba", lambda tools: _jf.ToolCallsArray())
register_tool_parser("k2_horizon", lambda tools: _tp.K2Horizon(tools))
register_tool_parser("kimi_k3", lambda tools: _ch.KimiK3(tools))
