"""Cases for the tool-call parser names apertus .. kimi_k3 (alphabetically).

Per name: no call, one call, parallel calls, text before, nested/escaped JSON,
unicode, empty arguments, malformed (given back as content). Outputs are
written the way each model writes them (read off vLLM's parsers).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from tests.parsers.cases import ToolCase
from tests.parsers.corpus import EMPTY, NESTED, ONE, PARALLEL, PLAIN, UNICODE

Calls = list[tuple[str, dict[str, Any]]]


def _j(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)


def _x(v: Any) -> str:
    """A parameter value as XML-style formats write it."""
    return v if isinstance(v, str) else _j(v)


# ----------------------------------------------------------------- renderers
def apertus(calls: Calls) -> str:
    return "<|tools_prefix|>" + _j([{n: a} for n, a in calls]) + "<|tools_suffix|>"


def cohere(calls: Calls) -> str:
    items = [{"tool_call_id": str(i), "tool_name": n, "parameters": a} for i, (n, a) in enumerate(calls)]
    return "<|START_ACTION|>" + _j(items) + "<|END_ACTION|>"


def dsml_spaced(calls: Calls) -> str:
    p = "｜DSML｜ "
    out = [f"<{p}calls>"]
    for n, a in calls:
        out.append(f'<{p}invoke name="{n}">')
        for k, v in a.items():
            s = "true" if isinstance(v, str) else "false"
            out.append(f'<{p}parameter name="{k}" string="{s}">{_x(v)}</{p}parameter>')
        out.append(f"</{p}invoke>")
    out.append(f"</{p}calls>")
    return "\n".join(out)


def dots(calls: Calls) -> str:
    out = []
    for n, a in calls:
        params = "".join(f'<parameter name="{k}">{_x(v)}</parameter>\n' for k, v in a.items())
        out.append(f'<dots_function_call>\n<invoke name="{n}">\n{params}</invoke>\n</dots_function_call>')
    return "\n".join(out)


def hermes_like(calls: Calls) -> str:
    return "\n".join(f'<tool_call>\n{{"name": "{n}", "arguments": {_j(a)}}}\n</tool_call>' for n, a in calls)


def functiongemma(calls: Calls) -> str:
    return "".join(
        "<start_function_call>call:" + n + "{" + ",".join(f"{k}:<escape>{_x(v)}<escape>" for k, v in a.items()) + "}<end_function_call>"
        for n, a in calls
    )


Q = '<|"|>'


def _g4(v: Any) -> str:
    if isinstance(v, str):
        return Q + v + Q
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_g4(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_g4(x) for x in v) + "]"
    return _j(v)


def gemma4(calls: Calls) -> str:
    return "".join(f"<|tool_call>call:{n}{_g4(a)}<tool_call|>" for n, a in calls)


def gigachat3(calls: Calls) -> str:
    ((n, a),) = calls
    return f'<|message_sep|>\n\nfunction call<|role_sep|>\n{{"name": "{n}", "arguments": {_j(a)}}}'


def granite(calls: Calls) -> str:
    return "<|tool_call|>" + _j([{"name": n, "arguments": a} for n, a in calls])


def granite20(calls: Calls) -> str:
    return " ".join(f'<function_call> {{"name": "{n}", "arguments": {_j(a)}}}' for n, a in calls)


def tool_calls_array(calls: Calls) -> str:
    return "<tool_calls>" + _j([{"name": n, "arguments": a} for n, a in calls]) + "</tool_calls>"


def hy(sep: str) -> Callable[[Calls], str]:
    def render(calls: Calls) -> str:
        out = ["<tool_calls>"]
        for n, a in calls:
            args = "".join(f"<arg_key>{k}</arg_key><arg_value>{_x(v)}</arg_value>" for k, v in a.items())
            out.append(f"<tool_call>{n}{sep}{args}</tool_call>")
        return "".join(out) + "</tool_calls>"

    return render


def glm47(calls: Calls) -> str:
    return "".join(
        f"<tool_call>{n}" + "".join(f"<arg_key>{k}</arg_key><arg_value>{_x(v)}</arg_value>" for k, v in a.items()) + "</tool_call>"
        for n, a in calls
    )


def inkling(calls: Calls) -> str:
    return "".join(
        "<|message_model|><|content_invoke_tool_json|>" + _j({"name": n, "args": a}) + "<|end_message|>"
        for n, a in calls
    )


def internlm(calls: Calls) -> str:
    ((n, a),) = calls
    return f'<|action_start|><|plugin|>\n{{"name": "{n}", "parameters": {_j(a)}}}<|action_end|>'


def k2_horizon(calls: Calls) -> str:
    out = ["<ifm|tool_calls>"]
    for n, a in calls:
        args = "".join(
            f"<ifm|arg_key>{k}</ifm|arg_key><ifm|arg_value>{_x(v)}</ifm|arg_value>" for k, v in a.items()
        )
        out.append(f"<ifm|tool_call>{n}{args}</ifm|tool_call>")
    return "".join(out) + "</ifm|tool_calls>"


def kimi_k3(calls: Calls) -> str:
    out = ["<|open|>tools<|sep|>"]
    for i, (n, a) in enumerate(calls):
        out.append(f'<|open|>call tool="{n}" index="{i + 1}"<|sep|>')
        for k, v in a.items():
            t = "string" if isinstance(v, str) else ("integer" if isinstance(v, int) else "object")
            out.append(f'<|open|>argument key="{k}" type="{t}"<|sep|>{_x(v)}<|close|>argument<|sep|>')
        out.append("<|close|>call<|sep|>")
    out.append("<|close|>tools<|sep|>")
    return "".join(out)


#: name -> (renderer, single call only, malformed output)
FORMATS: dict[str, tuple[Callable[[Calls], str], bool, str]] = {
    "apertus": (apertus, False, '<|tools_prefix|>[{"get_weather": {"city": }]<|tools_suffix|>'),
    "cohere_command3": (cohere, False, '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": }]<|END_ACTION|>'),
    "cohere_command4": (cohere, False, '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": }]<|END_ACTION|>'),
    "deepseek_v41": (dsml_spaced, False, '<｜DSML｜ calls>\n<｜DSML｜ invoke name="get_weather">\n</｜DSML｜ calls>'),
    "dots": (dots, False, '<dots_function_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</dots_function_call>'),
    "ernie45": (hermes_like, False, '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>'),
    "functiongemma": (functiongemma, False, "<start_function_call>call:get weather{}<end_function_call>"),
    "gemma4": (gemma4, False, "<|tool_call>call:get weather{}<tool_call|>"),
    "gigachat3": (gigachat3, True, '<|function_call|>{"name": "get_weather", "arguments": {"city": }'),
    "glm47": (glm47, False, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</tool_call>"),
    "granite": (granite, False, '<|tool_call|>[{"name": "get_weather", "arguments": {"city": }]'),
    "granite-20b-fc": (granite20, False, '<function_call> {"name": "get_weather", "arguments": {"city": }'),
    "granite4": (hermes_like, False, '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>'),
    "hunyuan_a13b": (tool_calls_array, False, '<tool_calls>[{"name": "get_weather", "arguments": {"city": }]</tool_calls>'),
    "hy_v3": (hy("<tool_sep>"), False, "<tool_calls><tool_call>get_weather<arg_key>city</arg_key></tool_calls>"),
    "hy_v4": (hy(""), False, "<tool_calls><tool_call>get weather<arg_key>city</arg_key></tool_calls>"),
    "inkling": (inkling, False, '<|content_invoke_tool_json|>{"name": "get_weather", "args": {"city": }'),
    "internlm": (internlm, True, '<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": }<|action_end|>'),
    "jamba": (tool_calls_array, False, '<tool_calls>[{"name": "get_weather", "arguments": {"city": }]</tool_calls>'),
    "k2_horizon": (k2_horizon, False, "<ifm|tool_calls><ifm|tool_call>get_weather<ifm|arg_key>city</ifm|tool_calls>"),
    "kimi_k3": (kimi_k3, False, '<|open|>tools<|sep|><|open|>call tool="get_weather"<|sep|><|close|>tools<|sep|>'),
}


def _standard(parser: str, render: Callable[[Calls], str], single: bool, malformed: str) -> list[ToolCase]:
    out = [
        ToolCase(parser, "no_call", PLAIN, PLAIN),
        ToolCase(parser, "one", render(ONE), "", ONE),
        ToolCase(parser, "text_before", "Let me check.\n\n" + render(ONE), "Let me check.", ONE),
        ToolCase(parser, "nested", render(NESTED), "", NESTED),
        ToolCase(parser, "unicode", render(UNICODE), "", UNICODE),
        ToolCase(parser, "empty_args", render(EMPTY), "", EMPTY),
        ToolCase(parser, "malformed", malformed, malformed),
    ]
    if not single:
        out.append(ToolCase(parser, "parallel", render(PARALLEL), "", PARALLEL))
    return out


TOOL_CASES: list[ToolCase] = []
for _name, (_render, _single, _bad) in FORMATS.items():
    TOOL_CASES += _standard(_name, _render, _single, _bad)

_MALFORMED_KEPT = "malformed output is given back whole as content"
DIFFERENCES: dict[str, str] = {
    **{
        f"tool:cohere_command{v}:{case}": why
        for v in (3, 4)
        for case, why in {
            "empty_args": "cohere_melody gives an empty call's arguments as '' (not JSON); we give {}",
            "parallel": "cohere_melody gives the empty call's arguments as '' (not JSON); we give {}",
            "malformed": "invalid JSON is not a call: cohere_melody passes the invalid text on as "
            "arguments; " + _MALFORMED_KEPT,
        }.items()
    },
    "tool:cohere_command4:no_call": "cohere_melody's cmd4 preset starts in reasoning: text before "
    "any marker is reasoning there. Reasoning is the reasoning parser's to claim "
    "(--reasoning-parser cohere_command4); the tool parser keeps it as content",
    "tool:cohere_command4:text_before": "as cohere_command4:no_call (text before the action is "
    "reasoning in cohere_melody's cmd4 preset)",
    "tool:deepseek_v41:malformed": "an invoke without </｜DSML｜ invoke> is not a call: vLLM calls "
    "get_weather with {}; " + _MALFORMED_KEPT,
    "tool:gemma4:malformed": "a function name with a space is refused: vLLM calls 'get weather'; "
    + _MALFORMED_KEPT,
    "tool:gemma4:nested": "Gemma 4 writes every string between <|\"|>, so a bare word nested in an "
    "object or array without a schema type is decoded (1, true, null); vLLM keeps it as text",
    "tool:glm47:malformed": "an <arg_value> without its closing tag is not a call: vLLM calls "
    "get_weather with {}; " + _MALFORMED_KEPT,
    "tool:granite:malformed": "invalid JSON arguments are not a call: vLLM passes the invalid "
    "text on as arguments; " + _MALFORMED_KEPT,
    "tool:hy_v3:malformed": "vLLM drops the unterminated block (no content, no call); " + _MALFORMED_KEPT,
    "tool:inkling:malformed": "invalid JSON arguments are not a call: vLLM passes the invalid "
    "text on as arguments; " + _MALFORMED_KEPT,
    "tool:internlm:malformed": "vLLM raises JSONDecodeError on the invalid JSON; " + _MALFORMED_KEPT,
    "tool:kimi_k3:malformed": "vLLM drops the tools channel with a call that has no arguments "
    "block (no content, no call); " + _MALFORMED_KEPT,
}

EXTRA_TOKENS = [
    "<|tool_call>", "<tool_call|>", "<|channel>", "<channel|>", '<|"|>',
    "<start_function_call>", "<end_function_call>", "<escape>", "<|tool_call|>",
    "<tool_calls>", "</tool_calls>", "<tool_sep>", "<arg_key>", "</arg_key>", "<arg_value>",
    "</arg_value>", "<|tools_prefix|>", "<|tools_suffix|>", "<|action_start|>", "<|plugin|>",
    "<|action_end|>", "<function_call>", "<|open|>", "<|close|>", "<|sep|>",
    "<|message_model|>", "<|content_text|>", "<|content_thinking|>",
    "<|content_invoke_tool_json|>", "<|content_invoke_tool_text|>", "<|content_tool_error|>",
    "<|content_model_end_sampling|>", "<|end_message|>", "<ifm|tool_calls>", "</ifm|tool_calls>",
    "<ifm|tool_call>", "</ifm|tool_call>", "<ifm|arg_key>", "</ifm|arg_key>", "<ifm|arg_value>",
    "</ifm|arg_value>", "<ifm|arg_type>", "</ifm|arg_type>", "<response>", "</response>",
    "<0x0A>", "<|role_sep|>", "<|message_sep|>", "<|function_call|>", "<dots_function_call>",
    "</dots_function_call>", "<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>",
    "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>", "<|START_THINKING|>", "<|END_THINKING|>",
]  # fmt: skip
