"""Grammars for XML-style calls: DSML (deepseek_v32 / deepseek_v4), qwen3_coder,
glm45, minimax_m2.

Parameters arrive as text; the arguments JSON is built from them. DSML says
per parameter whether its value is a string (``string="true"``) or JSON; the
other formats leave it to the tool's schema (`coerce_params`), as vLLM does.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from vllm_pyfrontend.parsers.combinators import (
    P,
    choice,
    fmap,
    lit,
    many,
    opt,
    seq,
    take_until,
    ws,
)
from vllm_pyfrontend.parsers.tool.base import (
    Call,
    Section,
    ToolFormat,
    coerce_params,
    dumps_args,
    tool_properties,
)

DSML = "｜DSML｜"


def _name(text: str) -> str:
    name = text.strip()
    if not name or any(c.isspace() or c in "<>\"'" for c in name):
        raise ValueError("bad name")
    return name


class XmlFormat(ToolFormat):
    """Formats whose values need the request's tools (schema coercion)."""

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        self.tools = list(tools)
        self.sections = self.build()

    def build(self) -> dict[str, Section]:  # pragma: no cover - abstract
        raise NotImplementedError

    def make_call(self, name: str, params: list[tuple[str, str]]) -> Call:
        props = tool_properties(self.tools, name) if self.tools else {}
        return Call(name=name, arguments=dumps_args(coerce_params(dict(params), props)))


# ---------------------------------------------------------------------- DSML
class Dsml(XmlFormat):
    """DeepSeek V3.2 / V4::

        <｜DSML｜tool_calls>
        <｜DSML｜invoke name="get_weather">
        <｜DSML｜parameter name="city" string="true">杭州</｜DSML｜parameter>
        <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
        </｜DSML｜invoke>
        </｜DSML｜tool_calls>

    V3.2 wraps calls in ``function_calls`` instead of ``tool_calls``.
    """

    def __init__(
        self,
        wrappers: Sequence[str],
        tools: Sequence[Any] = (),
        variants: Sequence[str] = (),
    ) -> None:
        self.wrappers = tuple(wrappers)
        # misspelt openings seen in production, closed by the first wrapper's end
        self.variants = tuple(variants)
        super().__init__(tools)

    def _invoke(self) -> P:
        param = fmap(
            seq(
                lit(f"<{DSML}parameter"),
                ws(1),
                lit('name="'),
                take_until('"'),
                lit('"'),
                opt(fmap(seq(ws(1), lit('string="'), take_until('"'), lit('"')), lambda v: v[2])),
                ws(),
                lit(">"),
                take_until(f"</{DSML}parameter>"),
                lit(f"</{DSML}parameter>"),
            ),
            lambda v: (_name(v[3]), v[5], v[8]),
        )

        def build(v: list[Any]) -> Call:
            name = _name(v[1])
            args: dict[str, Any] = {}
            for key, is_str, value in v[4]:
                if is_str == "true":
                    args[key] = value
                else:
                    try:
                        args[key] = json.loads(value)
                    except ValueError:
                        args[key] = value
            return Call(name=name, arguments=dumps_args(args))

        return fmap(
            seq(
                lit(f'<{DSML}invoke name="'),
                take_until('"'),
                lit('">'),
                ws(),
                many(param, sep=ws()),
                ws(),
                lit(f"</{DSML}invoke>"),
            ),
            build,
        )

    def build(self) -> dict[str, Section]:
        body = fmap(seq(ws(), many(self._invoke(), sep=ws(), minimum=1), ws()), lambda v: v[1])
        sections = {}
        for w in self.wrappers:
            end = f"</{DSML}{w}>"
            sections[f"<{DSML}{w}>"] = Section(body=body, ends=(end,))
        for v in self.variants:
            sections[f"<{DSML}{v}>"] = Section(body=body, ends=(f"</{DSML}{self.wrappers[0]}>",))
        return sections


# ---------------------------------------------------------------- qwen3 coder
def _trim_newlines(value: str) -> str:
    """One leading and one trailing newline are the template's framing."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


class Qwen3Coder(XmlFormat):
    """Qwen3-Coder / Qwen3.5::

        <tool_call>
        <function=get_weather>
        <parameter=city>
        Paris
        </parameter>
        </function>
        </tool_call>
    """

    def build(self) -> dict[str, Section]:
        param = fmap(
            seq(
                lit("<parameter="),
                take_until(">"),
                lit(">"),
                take_until("</parameter>"),
                lit("</parameter>"),
            ),
            lambda v: (_name(v[1]), _trim_newlines(v[3])),
        )
        function = fmap(
            seq(
                lit("<function="),
                take_until(">"),
                lit(">"),
                ws(),
                many(param, sep=ws()),
                ws(),
                lit("</function>"),
            ),
            lambda v: self.make_call(_name(v[1]), v[4]),
        )
        body = fmap(seq(ws(), many(function, sep=ws(), minimum=1), ws()), lambda v: v[1])
        return {"<tool_call>": Section(body=body, ends=("</tool_call>",))}


# --------------------------------------------------------------------- glm45
class Glm45(XmlFormat):
    """GLM-4.5 / 4.6 / 4.7::

        <tool_call>get_weather
        <arg_key>city</arg_key>
        <arg_value>Paris</arg_value>
        </tool_call>
    """

    def build(self) -> dict[str, Section]:
        arg = fmap(
            seq(
                lit("<arg_key>"),
                take_until("</arg_key>"),
                lit("</arg_key>"),
                ws(),
                lit("<arg_value>"),
                take_until("</arg_value>"),
                lit("</arg_value>"),
            ),
            lambda v: (_name(v[1]), v[5]),
        )
        body = fmap(
            seq(
                ws(),
                take_until("<arg_key>", at_eof=True, minimum=1),
                many(arg, sep=ws()),
                ws(),
            ),
            lambda v: [self.make_call(_name(v[1]), v[2])],
        )
        return {"<tool_call>": Section(body=body, ends=("</tool_call>",), eof_closes=False)}


# ---------------------------------------------------------------- minimax m2
def _attr_value() -> P:
    """``"x"``, ``'x'`` or a bare ``x`` (up to ``>`` or whitespace)."""
    return choice(
        fmap(seq(lit('"'), take_until('"'), lit('"')), lambda v: v[1]),
        fmap(seq(lit("'"), take_until("'"), lit("'")), lambda v: v[1]),
        take_until(">", minimum=1),
    )


class MinimaxM2(XmlFormat):
    """MiniMax-M2::

        <minimax:tool_call>
        <invoke name="get_weather">
        <parameter name="city">Paris</parameter>
        </invoke>
        </minimax:tool_call>
    """

    def build(self) -> dict[str, Section]:
        param = fmap(
            seq(
                lit("<parameter"),
                ws(1),
                lit("name="),
                _attr_value(),
                ws(),
                lit(">"),
                take_until("</parameter>"),
                lit("</parameter>"),
            ),
            lambda v: (_name(v[3]), v[6]),
        )
        invoke = fmap(
            seq(
                lit("<invoke"),
                ws(1),
                lit("name="),
                _attr_value(),
                ws(),
                lit(">"),
                ws(),
                many(param, sep=ws()),
                ws(),
                lit("</invoke>"),
            ),
            lambda v: self.make_call(_name(v[3]), v[7]),
        )
        body = fmap(seq(ws(), many(invoke, sep=ws(), minimum=1), ws()), lambda v: v[1])
        return {"<minimax:tool_call>": Section(body=body, ends=("</minimax:tool_call>",))}

