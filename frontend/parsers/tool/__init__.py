"""Tool-call parsers, by vLLM's ``--tool-call-parser`` names.

Each parser is an incremental transformer over the content text of one
choice: ``feed(text, token_ids=None) -> AssistantDelta | None`` and
``finish() -> AssistantDelta | None`` (see base.py for the engine and
special.py for the token-id contract). Parameters written as text get their
JSON values from the tool's schema in ``arg_values.py`` (XML-style formats)
and ``schema_values.py`` (tagged_params, gemma).

Where each format lives (every module registers the names of the grammars it defines,
with `register_tool_parser` at its bottom):

- ``json_calls.py``: a JSON call object (or array of them) in the model's markers:
  hermes, qwen3_json, llama3_json, llama4_json, mistral, granite*, jamba, hunyuan_a13b,
  apertus, internlm, gigachat3, ernie45, longcat, phi4_mini_json, xlam, plamo3;
  ``json_grammar.py`` holds the JSON call object they share.
- ``xml_calls.py``: the XML-style engine (`XmlParam`, `XmlFormat`, ...) and the
  Qwen3-Coder family: qwen3_coder, qwen3_xml, step3p5, seed_oss, mimo.
- ``tagged_params.py``: tagged parameters typed by the tool's schema: hy_v3, hy_v4,
  k2_horizon, dots.
- ``pythonic.py``: Python call syntax: pythonic, llama4_pythonic, olmo3, lfm2.
- ``channels.py``: formats that frame the answer in markers: inkling, cohere_command3/4.
- one model family's own grammars: ``deepseek.py`` (deepseek_v3 … deepseek_v41),
  ``kimi.py`` (kimi_k2, kimi_k3), ``glm.py`` (glm45, glm47, ling3, poolside_v1),
  ``minimax.py`` (minimax_m2, minimax_m3), ``gemma.py`` (gemma4, functiongemma),
  ``step.py`` (step3), ``minicpm.py`` (minicpm5), ``muse.py`` (muse_glimmer).
- outside this package: ``parsers/harmony.py`` (openai, gpt-oss) and
  ``parsers/response_template/`` (hf, the checkpoint's own template) register parsers
  that are not section grammars (`register_custom_tool_parser`).

Adding a format: write its `ToolFormat` in the module of its family (a new module when
it is one model's own grammar), register its name(s) at the bottom of that module with
`register_tool_parser(name, lambda tools: MyFormat(...))` (``note=`` when the name reuses
another model's format), and import a new module below. The registry is in registry.py;
``python -m vllm_pyfrontend.parsers.catalog`` lists every name with its module.
"""

from __future__ import annotations

from vllm_pyfrontend.parsers.tool.forced import forced_tool_parser
from vllm_pyfrontend.parsers.tool.registry import (
    FormatFactory,
    get_tool_parser,
    register_custom_tool_parser,
    register_tool_parser,
    tool_markers,
    tool_parser_names,
)

# Every module that registers tool parsers, imported once here so that every name is
# registered whichever module is imported first.
from vllm_pyfrontend.parsers.tool import (  # noqa: E402,F401
    channels,
    deepseek,
    gemma,
    glm,
    json_calls,
    kimi,
    minicpm,
    minimax,
    muse,
    pythonic,
    step,
    tagged_params,
    xml_calls,
)
from vllm_pyfrontend.parsers import harmony, response_template  # noqa: E402,F401

__all__ = [
    "FormatFactory",
    "forced_tool_parser",
    "get_tool_parser",
    "register_custom_tool_parser",
    "register_tool_parser",
    "tool_markers",
    "tool_parser_names",
]
