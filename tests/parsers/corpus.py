"""Model outputs for every tool-call format, built from abstract calls.

Each format has a renderer that writes calls the way the model does (read
off vLLM's parsers and tests). A `Case` pairs an output with what a parser
must return: content text and ``(name, arguments)`` per call, arguments as
decoded JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

DSML = "｜DSML｜"

Calls = list[tuple[str, dict[str, Any]]]


@dataclass
class Case:
    fmt: str
    name: str
    text: str
    content: str
    calls: Calls = field(default_factory=list)
    #: the output is malformed: everything must come back as content, unless
    #: ``committed``
    malformed: bool = False
    #: malformed after a call's name was complete: that call was announced
    #: while streaming and cannot be taken back, so it is completed (its
    #: arguments closed into valid JSON) and the rest is content
    committed: bool = False

    @property
    def id(self) -> str:
        return f"{self.fmt}-{self.name}"


def _j(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False)


# ----------------------------------------------------------------- renderers
def hermes(calls: Calls) -> str:
    return "\n".join(
        f'<tool_call>\n{{"name": "{n}", "arguments": {_j(a)}}}\n</tool_call>' for n, a in calls
    )


def _xml_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def dsml(wrapper: str) -> Callable[[Calls], str]:
    def render(calls: Calls) -> str:
        out = [f"<{DSML}{wrapper}>"]
        for n, a in calls:
            out.append(f'<{DSML}invoke name="{n}">')
            for k, v in a.items():
                is_str = "true" if isinstance(v, str) else "false"
                out.append(
                    f'<{DSML}parameter name="{k}" string="{is_str}">{_xml_value(v)}</{DSML}parameter>'
                )
            out.append(f"</{DSML}invoke>")
        out.append(f"</{DSML}{wrapper}>")
        return "\n".join(out)

    return render


def qwen3_coder(calls: Calls) -> str:
    blocks = []
    for n, a in calls:
        params = "".join(f"<parameter={k}>\n{_xml_value(v)}\n</parameter>\n" for k, v in a.items())
        blocks.append(f"<tool_call>\n<function={n}>\n{params}</function>\n</tool_call>")
    return "\n".join(blocks)


def deepseek_v3(calls: Calls) -> str:
    inner = "\n".join(
        f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n{_j(a)}\n```<｜tool▁call▁end｜>"
        for n, a in calls
    )
    return f"<｜tool▁calls▁begin｜>{inner}<｜tool▁calls▁end｜>"


def deepseek_v31(calls: Calls) -> str:
    inner = "".join(
        f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>{_j(a)}<｜tool▁call▁end｜>" for n, a in calls
    )
    return f"<｜tool▁calls▁begin｜>{inner}<｜tool▁calls▁end｜>"


def llama3_json(calls: Calls) -> str:
    return "; ".join(f'{{"name": "{n}", "parameters": {_j(a)}}}' for n, a in calls)


def mistral(calls: Calls) -> str:
    return "".join(f"[TOOL_CALLS]{n}[ARGS]{_j(a)}" for n, a in calls)


def kimi_k2(calls: Calls) -> str:
    inner = "".join(
        f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{_j(a)}<|tool_call_end|>"
        for i, (n, a) in enumerate(calls)
    )
    return f"<|tool_calls_section_begin|>{inner}<|tool_calls_section_end|>"


def glm45(calls: Calls) -> str:
    blocks = []
    for n, a in calls:
        args = "".join(
            f"<arg_key>{k}</arg_key>\n<arg_value>{_xml_value(v)}</arg_value>\n" for k, v in a.items()
        )
        blocks.append(f"<tool_call>{n}\n{args}</tool_call>")
    return "\n".join(blocks)


def minimax_m2(calls: Calls) -> str:
    out = ["<minimax:tool_call>"]
    for n, a in calls:
        out.append(f'<invoke name="{n}">')
        for k, v in a.items():
            out.append(f'<parameter name="{k}">{_xml_value(v)}</parameter>')
        out.append("</invoke>")
    out.append("</minimax:tool_call>")
    return "\n".join(out)


RENDER: dict[str, Callable[[Calls], str]] = {
    "hermes": hermes,
    "deepseek_v4": dsml("tool_calls"),
    "deepseek_v32": dsml("function_calls"),
    "qwen3_coder": qwen3_coder,
    "deepseek_v3": deepseek_v3,
    "deepseek_v31": deepseek_v31,
    "llama3_json": llama3_json,
    "mistral": mistral,
    "kimi_k2": kimi_k2,
    "glm45": glm45,
    "minimax_m2": minimax_m2,
}

#: formats whose values are text unless the tool schema says otherwise
SCHEMA_TYPED = {"qwen3_coder", "glm45", "minimax_m2"}

#: tools of the request (schemas used by SCHEMA_TYPED formats)
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "nested": {"type": "object"},
                    "flags": {"type": "array"},
                    "code": {"type": "string"},
                    "note": {"type": "string"},
                },
            },
        },
    }
    for name in ("get_weather", "search", "run_code", "noop", "天气")
]

ONE: Calls = [("get_weather", {"city": "Paris", "days": 3})]
PARALLEL: Calls = [
    ("get_weather", {"city": "Paris", "days": 3}),
    ("search", {"city": "Tokyo"}),
    ("noop", {}),
]
NESTED: Calls = [
    (
        "run_code",
        {
            "nested": {"a": [1, {"b": None, "c": [True, False]}], "d": {"e": -1.5e3}},
            "code": 'print("a\\"b")\n\tif x < 3 and y > 2: return {"k": [1]}',
        },
    )
]
EMPTY: Calls = [("noop", {})]
UNICODE: Calls = [("天气", {"city": "杭州 😀 Ünïcödé", "note": "ж \u2028 ｜ ▁"})]

PLAIN = "Hello! 1 < 2 and 3 > 2; {not json} [brackets] <b>tag</b> 杭州 😀"


def _malformed(fmt: str) -> list[tuple[str, str]]:
    """(name, text) of outputs that are not valid calls for ``fmt``."""
    full = RENDER[fmt](ONE)
    out = [
        ("truncated", full[: len(full) * 2 // 3]),
        ("only_start", full[: max(1, len(full) // 6)]),
    ]
    broken = {
        "hermes": '<tool_call>\n{"name": "f", "arguments": {"a": 1,,}}\n</tool_call> tail',
        "deepseek_v4": f'<{DSML}tool_calls>\n<{DSML}invoke nam="f">\n</{DSML}invoke>\n</{DSML}tool_calls> tail',
        "deepseek_v32": f'<{DSML}function_calls>\n<{DSML}parameter name="x">1</{DSML}parameter>\n</{DSML}function_calls> tail',
        "qwen3_coder": "<tool_call>\n<func=f>\n</function>\n</tool_call> tail",
        "deepseek_v3": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{oops}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜> tail",
        "deepseek_v31": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>[1]<｜tool▁call▁end｜><｜tool▁calls▁end｜> tail",
        "llama3_json": '{"name": "f", "parameters": {"a": 1}, } tail',
        "mistral": "[TOOL_CALLS]f[ARGS]{'a': 1} tail",
        "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\" 1}<|tool_call_end|><|tool_calls_section_end|> tail",
        "glm45": "<tool_call>\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call> tail",
        "minimax_m2": '<minimax:tool_call>\n<invoke>\n</invoke>\n</minimax:tool_call> tail',
    }[fmt]
    out.append(("broken", broken))
    return out



#: formats whose "broken" sample breaks after the call's name is complete
_BROKEN_AFTER_NAME = {"hermes", "deepseek_v3", "llama3_json", "kimi_k2", "mistral"}


def cases(fmt: str) -> list[Case]:
    r = RENDER[fmt]
    out = [
        Case(fmt, "no_call", PLAIN, PLAIN),
        Case(fmt, "single", r(ONE), "", ONE),
        Case(fmt, "parallel", r(PARALLEL), "", PARALLEL),
        Case(fmt, "nested_escaped", r(NESTED), "", NESTED),
        Case(fmt, "empty_args", r(EMPTY), "", EMPTY),
        Case(fmt, "unicode", r(UNICODE), "", UNICODE),
    ]
    if fmt == "llama3_json":
        # calls only when the output starts with one; text after is content
        out.append(Case(fmt, "text_after", r(ONE) + "\n\nDone.", "Done.", ONE))
        out.append(Case(fmt, "text_before", "Sure. " + r(ONE), "Sure. " + r(ONE)))
        out.append(Case(fmt, "python_tag", "<|python_tag|>" + r(ONE), "", ONE))
    else:
        out.append(
            Case(
                fmt,
                "text_before_after",
                "Let me check.\n\n" + r(ONE) + "\n\nDone: 杭州.",
                "Let me check.\n\nDone: 杭州.",
                ONE,
            )
        )
        out.append(
            Case(fmt, "two_sections_text_between", r(ONE) + " and " + r(EMPTY), " and", ONE + EMPTY)
        )
    for name, text in _malformed(fmt):
        committed = name == "truncated" or (name == "broken" and fmt in _BROKEN_AFTER_NAME)
        out.append(
            Case(fmt, "malformed_" + name, text, text, [], malformed=True, committed=committed)
        )
    return out


FORMATS = list(RENDER)
ALL_CASES = [c for f in FORMATS for c in cases(f)]
