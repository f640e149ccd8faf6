"""More JSON-bodied formats: longcat, phi4_mini_json, xlam, plamo3."""

from __future__ import annotations

from tests.parsers.cases import Calls, ToolCase
from tests.parsers.cases._builder import j, standard
from tests.parsers.corpus import ONE, PARALLEL


def longcat(calls: Calls) -> str:
    return "\n".join(
        f'<longcat_tool_call>\n{{"name": "{n}", "arguments": {j(a)}}}\n</longcat_tool_call>' for n, a in calls
    )


def _array(calls: Calls) -> str:
    return "[" + ", ".join(f'{{"name": "{n}", "arguments": {j(a)}}}' for n, a in calls) + "]"


def phi4(calls: Calls) -> str:
    return "functools" + _array(calls)


P = "<|plamo:"


def plamo3(calls: Calls) -> str:
    inner = "".join(
        f"{P}begin_tool_request:plamo|>{P}begin_tool_name:plamo|>{n}{P}end_tool_name:plamo|>"
        f"{P}begin_tool_arguments:plamo|>{P}constrain|>json{P}msg|>{j(a)}{P}end_tool_arguments:plamo|>"
        f"{P}end_tool_request:plamo|>"
        for n, a in calls
    )
    return f"{P}begin_tool_requests:plamo|>{inner}{P}end_tool_requests:plamo|>"


TOOL_CASES = [
    *standard("longcat", longcat,
              broken='<longcat_tool_call>\n{"name": "f", "arguments": {"a": 1,,}}\n</longcat_tool_call> tail'),
    *standard("phi4_mini_json", phi4, broken='functools[{"name": "f", "arguments": {a: 1}}] tail'),
    ToolCase("phi4_mini_json", "parameters_key", 'functools[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
             "", [("get_weather", {"city": "Paris"})]),
    *standard("xlam", _array, text_around=False, broken='[{"name": "f", "arguments": {"a": 1}},] tail'),
    ToolCase("xlam", "json_code_block", "```json\n" + _array(ONE) + "\n```", "", ONE),
    ToolCase("xlam", "tool_call_tags", "<tool_call>" + _array(PARALLEL) + "</tool_call>", "", PARALLEL),
    ToolCase("xlam", "text_before_is_content", "Sure: " + _array(ONE), "Sure: " + _array(ONE)),
    *standard("plamo3", plamo3,
              broken=f"{P}begin_tool_requests:plamo|>{P}begin_tool_request:plamo|>{P}begin_tool_name:plamo|>f"
                     f"{P}end_tool_name:plamo|>{P}begin_tool_arguments:plamo|>{P}constrain|>json{P}msg|>{{oops}}"
                     f"{P}end_tool_arguments:plamo|>{P}end_tool_request:plamo|>{P}end_tool_requests:plamo|> tail"),
]

_KEEP = "we keep text around the calls as content; vLLM drops it"
_INVALID = "invalid JSON arguments are not a call here (the output comes back as content); vLLM emits the call"
DIFFERENCES: dict[str, str] = {
    "tool:longcat:text_before_after": "we keep text after the call as content; vLLM (hermes) drops it",
    "tool:phi4_mini_json:text_before_after": _KEEP,
    "tool:phi4_mini_json:nested_escaped": "vLLM's non-greedy functools\\[(.*?)\\] stops at the first ']' "
                                          "inside the arguments and loses the output; we scan JSON",
    "tool:phi4_mini_json:malformed_broken": "malformed output comes back as content; vLLM returns nothing",
    "tool:plamo3:text_before_after": "we keep text after the calls as content; vLLM drops it",
    "tool:plamo3:malformed_truncated": _INVALID,
    "tool:plamo3:malformed_broken": _INVALID,
}

EXTRA_TOKENS = ["<longcat_tool_call>", "</longcat_tool_call>", "<|plamo:tag|>"]


# ---- aliases of formats implemented before: llama4_json (llama3_json), qwen3_json (hermes) --------
def _alias_cases() -> tuple[list[ToolCase], dict[str, str]]:
    from tests.parsers.corpus import cases
    from tests.parsers.test_vllm_differential import DOCUMENTED

    why = {
        "drops_text_after_calls": "we keep text after the calls as content; vLLM drops it",
        "call_from_prose": "only output that starts with a call is one here; vLLM takes JSON after prose as a call",
    }
    out, diffs = [], {}
    for alias, fmt in (("llama4_json", "llama3_json"), ("qwen3_json", "hermes")):
        for c in cases(fmt):
            case = ToolCase(alias, c.name, c.text, c.content, c.calls)
            out.append(case)
            # (the malformed cases agree once content is compared stripped)
            if DOCUMENTED.get(c.name, "loses_malformed") != "loses_malformed":
                diffs[case.id] = why.get(DOCUMENTED[c.name], DOCUMENTED[c.name])
    return out, diffs


_ALIAS_CASES, _ALIAS_DIFFS = _alias_cases()
TOOL_CASES += _ALIAS_CASES
DIFFERENCES.update(_ALIAS_DIFFS)
