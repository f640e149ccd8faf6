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
#: names whose format does not depend on the request's tools: built once, shared by every
#: parser (a grammar holds no per-stream state; building one costs more than a short call)
_SHARED: set[str] = set()
_SHARED_FORMATS: dict[str, ToolFormat] = {}
#: name -> make(tokenizer, tools) for parsers that are not section grammars (harmony)
_CUSTOM: dict[str, Callable[[Any, Sequence[Any] | None], Any]] = {}


def register_tool_parser(name: str, factory: FormatFactory, *, shared: bool = False) -> None:
    """Register a format under a ``--tool-call-parser`` name (replaces any). ``shared``: the
    factory ignores the tools and its format keeps no state, so one instance serves all."""
    _REGISTRY[name] = factory
    _SHARED_FORMATS.pop(name, None)
    if shared:
        _SHARED.add(name)
    else:
        _SHARED.discard(name)


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
    custom = _CUSTOM.get(name)
    if custom is not None:  # a parser that is not a section grammar (gpt-oss harmony)
        return custom(tokenizer, tools)
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown tool parser {name!r}; known: {', '.join(tool_parser_names())}"
        ) from None
    if name in _SHARED:
        fmt = _SHARED_FORMATS.get(name)
        if fmt is None:
            fmt = _SHARED_FORMATS[name] = factory([])
    else:
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
# DSML says each value's type itself: the grammar does not read the tools
register_tool_parser("deepseek_v32", lambda tools: Dsml(("function_calls",)), shared=True)
register_tool_parser(
    "deepseek_v4", lambda tools: Dsml(("tool_calls",), variants=("toolcalls", "tool")), shared=True
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

# ---- issue 15b: more tool-call formats (pythonic, JSON, XML kin) --------------------------
from vllm_pyfrontend.parsers.tool.json_more import Longcat, Phi4MiniJson, Plamo3, Xlam  # noqa: E402
from vllm_pyfrontend.parsers.tool.pythonic import Lfm2, Llama4Pythonic, Olmo3, Pythonic  # noqa: E402
from vllm_pyfrontend.parsers.tool.xml_more import (  # noqa: E402
    MiMo,
    MiniCpm5,
    MinimaxM3,
    MuseGlimmer,
    SeedOss,
    Step3,
)

register_tool_parser("pythonic", lambda tools: Pythonic())
register_tool_parser("llama4_pythonic", lambda tools: Llama4Pythonic())
register_tool_parser("olmo3", lambda tools: Olmo3())
register_tool_parser("lfm2", lambda tools: Lfm2())
register_tool_parser("longcat", lambda tools: Longcat())
register_tool_parser("phi4_mini_json", lambda tools: Phi4MiniJson())
register_tool_parser("xlam", lambda tools: Xlam())
register_tool_parser("plamo3", lambda tools: Plamo3())
register_tool_parser("ling3", lambda tools: Glm45(tools))  # GLM-4.7's format
register_tool_parser("poolside_v1", lambda tools: Glm45(tools))  # GLM-4's format
register_tool_parser("step3p5", lambda tools: Qwen3Coder(tools))  # Qwen3-Coder's format
register_tool_parser("seed_oss", lambda tools: SeedOss(tools))
register_tool_parser("mimo", lambda tools: MiMo(tools))
register_tool_parser("step3", lambda tools: Step3(tools))
register_tool_parser("minicpm5", lambda tools: MiniCpm5(tools))
register_tool_parser("minimax_m3", lambda tools: MinimaxM3(tools))
register_tool_parser("muse_glimmer", lambda tools: MuseGlimmer(tools))

# gpt-oss: harmony messages, parsed by the openai-harmony package (parsers/harmony.py); the
# ToolFormat entry only lists the name (no section markers)
from vllm_pyfrontend.parsers import harmony as _harmony  # noqa: E402

register_tool_parser(_harmony.HARMONY_TOOL, lambda tools: ToolFormat())
_CUSTOM[_harmony.HARMONY_TOOL] = _harmony.tool_stream


def register_custom_tool_parser(name: str, make: Callable[[Any, Sequence[Any] | None], Any]) -> None:
    """Register a parser that is not a section grammar (``--tool-parser-plugin``, see plugin.py):
    ``make(tokenizer, tools)`` -> an object with ``feed``, ``finish`` and ``n_calls``."""
    register_tool_parser(name, lambda tools: ToolFormat())  # listed, no section markers
    _CUSTOM[name] = make

# ---- helper 15hf: `hf`, the checkpoint's own response_template (parsers/response_template.py);
# the ToolFormat entry only lists the name (the template's regions are not section markers)
from vllm_pyfrontend.parsers import response_template as _rt  # noqa: E402

register_tool_parser(_rt.HF, lambda tools: ToolFormat())
_CUSTOM[_rt.HF] = _rt.tool_stream
