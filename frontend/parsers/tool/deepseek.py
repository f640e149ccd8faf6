"""DeepSeek's tool-call formats: deepseek_v3 and deepseek_v31 (a JSON object in
DeepSeek's call markers), deepseek_v32 and deepseek_v4 (DSML, XML-style), and
deepseek_v41 (DSML with a space after the tag prefix).

DSML says per parameter whether its value is a string (``string="true"``) or
JSON, so these grammars do not read the request's tools.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from vllm_pyfrontend.parsers.combinators import (
    NEED,
    Fail,
    Ok,
    P,
    Probe,
    Result,
    fmap,
    lit,
    lit_mismatch,
    opt,
    seq,
    tag,
    take_until,
    ws,
    ws_list,
)
from vllm_pyfrontend.parsers.tool.arg_values import loads_strict
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat
from vllm_pyfrontend.parsers.tool.json_grammar import call, json_args, name_ok
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.streaming import skip_ws
from vllm_pyfrontend.parsers.tool.tagged_params import TypedFormat, tagged_name
from vllm_pyfrontend.parsers.tool.xml_calls import XmlParam, XmlTyping, call_element, xml_args, xml_call, xml_name


# --------------------------------------------------------------- deepseek v3
_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
_CALLS_END = "<｜tool▁calls▁end｜>"
_CALL_BEGIN = "<｜tool▁call▁begin｜>"
_CALL_END = "<｜tool▁call▁end｜>"
_SEP = "<｜tool▁sep｜>"


def _deepseek_section(call: P) -> Section:
    return Section(
        body=ws_list(call),
        ends=(_CALLS_END,),
    )


class DeepSeekV3(ToolFormat):
    """``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``."""

    sections = {
        _CALLS_BEGIN: _deepseek_section(
            call(
                seq(
                    lit(_CALL_BEGIN),
                    take_until(_SEP),
                    lit(_SEP),
                    tag("name", fmap(take_until("\n"), name_ok)),
                    lit("\n```json\n"),
                    ws(),
                    json_args(),
                    ws(),
                    lit("```"),
                    ws(),
                    lit(_CALL_END),
                ),
                lambda v: Call(name=v[3], arguments=v[6]),
            )
        )
    }


class DeepSeekV31(ToolFormat):
    """``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``."""

    sections = {
        _CALLS_BEGIN: _deepseek_section(
            call(
                seq(
                    lit(_CALL_BEGIN),
                    tag("name", fmap(take_until(_SEP), name_ok)),
                    lit(_SEP),
                    ws(),
                    json_args(),
                    ws(),
                    lit(_CALL_END),
                ),
                lambda v: Call(name=v[1], arguments=v[4]),
            )
        )
    }


# ---------------------------------------------------------------------- DSML
DSML = "｜DSML｜"


def _dsml_hold(value: str) -> int:
    """Where a DSML value's droppable end starts: trailing whitespace and a
    (misspelled) closing tag the model wrote instead of the real one."""
    k = len(value.rstrip())
    lt = value.rfind("<", 0, k)
    if lt != -1:
        tag_text = value[lt:k]
        if tag_text == "<" or (tag_text.startswith("</") and ">" not in tag_text[:-1]):
            return len(value[:lt].rstrip())
    return k


def dsml_param_head_grammar(prefix: str = DSML) -> P:
    """A DSML parameter's opening tag, ``<｜DSML｜parameter name="city" string="true">``
    (``prefix``: the tag prefix, ``｜DSML｜ `` in DeepSeek V4.1's spaced DSML): value
    ``(name, string-attribute or None)``. The specification of `DsmlParamHead`, which parses
    the same (same results, NEED and failure positions) without the combinators' per-part
    calls: the head is most of the work of every partial parse of a DSML call."""
    return fmap(
        seq(
            lit(f"<{prefix}parameter"),
            ws(1),
            lit('name="'),
            take_until('"'),
            lit('"'),
            opt(fmap(seq(ws(1), lit('string="'), take_until('"'), lit('"')), lambda v: v[2])),
            ws(),
            lit(">"),
        ),
        lambda v: (xml_name(v[3]), v[5]),
    )


def _lit_at(s: str, pos: int, text: str, eof: bool) -> Result | None:
    """`lit(text)` at ``pos``: None when it matches, else its NEED or failure."""
    return None if s.startswith(text, pos) else lit_mismatch(s, pos, text, eof)


class DsmlParamHead(P):
    """`dsml_param_head_grammar(prefix)`, by hand (see there). A whole head is one regular
    expression match (``\\s`` is `str.isspace`, as `ws` reads it; the grammar's greedy parts
    match as the expression's do when the whole head is there); a head cut short or malformed
    takes the step-by-step path, which says NEED or where it fails."""

    __slots__ = ("_open", "_whole")

    def __init__(self, prefix: str = DSML) -> None:
        self._open = f"<{prefix}parameter"
        self._whole = re.compile(re.escape(self._open) + r'\s+name="([^"]*)"(?:\s+string="([^"]*)")?\s*>')

    def parse(self, s: str, pos: int, eof: bool, pr: Probe | None = None) -> Result:
        m = self._whole.match(s, pos)
        if m is not None:
            try:
                return Ok(m.end(), (xml_name(m.group(1)), m.group(2)))
            except ValueError:
                return Fail(pos)
        n = len(s)
        r = _lit_at(s, pos, self._open, eof)
        if r is not None:
            return r
        i = pos + len(self._open)
        j = skip_ws(s, i)
        if j == n and not eof:
            return NEED
        if j == i:
            return Fail(j)
        r = _lit_at(s, j, 'name="', eof)
        if r is not None:
            return r
        i = j + 6
        k = s.find('"', i)
        if k == -1:
            return NEED if not eof else Fail(n)
        name = s[i:k]
        i = k + 1
        meta = None
        # opt(ws(1) 'string="' text '"'): NEED passes through, a failure leaves it out
        j = skip_ws(s, i)
        if j == n and not eof:
            return NEED
        if j > i:
            r = _lit_at(s, j, 'string="', eof)
            if r is NEED:
                return NEED
            if r is None:
                k = s.find('"', j + 8)
                if k == -1:
                    if not eof:
                        return NEED
                else:
                    meta = s[j + 8 : k]
                    i = k + 1
        i = skip_ws(s, i)
        if i == n and not eof:
            return NEED
        if i < n and s[i] == ">":
            try:
                return Ok(i + 1, (xml_name(name), meta))
            except ValueError:
                return Fail(pos)
        return Fail(i)


def dsml_invoke_grammar(args: P, make: Callable[[str, list], Call], prefix: str = DSML,
                        name_of: Callable[[str], str] = xml_name) -> P:
    """One DSML call, ``<｜DSML｜invoke name="NAME">`` PARAMETERS ``</｜DSML｜invoke>``
    (``args``: the tagged parameters' parser, ``make``: the call from its name and parameters,
    ``name_of``: the name's check), reported to the tool engine as ``"call"``, its name as
    ``"name"``. The specification of `DsmlInvoke`."""
    return call_element(
        (lit(f'<{prefix}invoke name="'),),
        tag("name", fmap(take_until('"'), name_of)),
        (lit('">'),),
        args,
        f"</{prefix}invoke>",
        make,
    )


class DsmlInvoke(P):
    """`dsml_invoke_grammar(args, make, prefix, name_of)`, by hand: the same results, NEED and failure
    positions, and the same events under a probe (the open call is parsed again at every
    partial parse of its section, and the combinators' per-part calls were half of that)."""

    __slots__ = ("args", "make", "name_of", "_open", "_close")

    def __init__(self, args: P, make: Callable[[str, list], Call], prefix: str = DSML,
                 name_of: Callable[[str], str] = xml_name) -> None:
        self.args = args
        self.make = make
        self.name_of = name_of
        self._open = f'<{prefix}invoke name="'
        self._close = f"</{prefix}invoke>"

    def parse(self, s: str, pos: int, eof: bool, pr: Probe | None = None) -> Result:
        if pr is None:
            return self._parse(s, pos, eof, None, None)
        r = self._parse(s, pos, eof, pr, pr.events)
        if type(r) is Ok:
            pr.events.append(("call", pos, r.end, r.value))
        elif r is NEED:
            pr.events.append(("call", pos, -1, None))
        return r

    def _parse(self, s: str, pos: int, eof: bool, pr: Probe | None, events: list | None) -> Result:
        mark = len(events) if events is not None else 0
        r = _lit_at(s, pos, self._open, eof)
        if r is not None:
            return r
        i = pos + len(self._open)
        j = s.find('"', i)
        if j == -1:  # take_until('"')
            if eof:
                return Fail(len(s))
            if events is not None:
                events.append(("name", i, -1, None))
            return NEED
        try:
            name = self.name_of(s[i:j])
        except ValueError:
            return Fail(i)
        if events is not None:
            events.append(("name", i, j, name))
        r = _lit_at(s, j, '">', eof)
        if r is not None:
            return r
        n = len(s)
        k = skip_ws(s, j + 2)
        if k == n and not eof:
            return NEED
        a = self.args.parse(s, k, eof, pr)
        if type(a) is not Ok:
            return a
        k = skip_ws(s, a.end)
        if k == n and not eof:
            return NEED
        r = _lit_at(s, k, self._close, eof)
        if r is not None:
            return r
        try:
            return Ok(k + len(self._close), self.make(name, a.value))
        except ValueError:  # (`fmap`: a rejected call's events go with it)
            if events is not None:
                del events[mark:]
            return Fail(pos)


class DsmlTyping(XmlTyping):
    """DSML says per parameter whether its value is a string (``string="true"``)
    or JSON (anything else: decoded when it is JSON, else kept as text)."""

    def is_string(self, name: str, key: str, meta: Any) -> bool:
        return meta == "true"

    def convert(self, name: str, key: str, meta: Any, text: str) -> Any:
        if meta == "true":
            return text
        try:
            return loads_strict(text)
        except ValueError:
            return text


class Dsml(ToolFormat):
    """DeepSeek V3.2 / V4::

        <｜DSML｜tool_calls>
        <｜DSML｜invoke name="get_weather">
        <｜DSML｜parameter name="city" string="true">杭州</｜DSML｜parameter>
        <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
        </｜DSML｜invoke>
        </｜DSML｜tool_calls>

    V3.2 wraps calls in ``function_calls`` instead of ``tool_calls``. A value
    whose closing tag is missing or misspelled ends where the next parameter
    or the invoke's end begins (the misspelled tag is not part of the value).
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
        self.tools = list(tools)
        self.sections = self.build()

    def _invoke_parts(self) -> tuple[P, Callable[[str, list], Call], str, Callable[[str], str]]:
        """`DsmlInvoke`'s arguments (also `dsml_invoke_grammar`'s)."""
        param = XmlParam(
            DsmlParamHead(),
            f"</{DSML}parameter>",
            stops=(f"<{DSML}parameter", f"</{DSML}invoke>"),
            hold=_dsml_hold,
        )
        typing = DsmlTyping()
        return xml_args(param, typing), xml_call(typing), DSML, xml_name

    def build(self) -> dict[str, Section]:
        body = ws_list(DsmlInvoke(*self._invoke_parts()))
        sections = {}
        for w in self.wrappers:
            end = f"</{DSML}{w}>"
            sections[f"<{DSML}{w}>"] = Section(body=body, ends=(end,))
        for v in self.variants:
            sections[f"<{DSML}{v}>"] = Section(body=body, ends=(f"</{DSML}{self.wrappers[0]}>",))
        return sections


# -------------------------------------------------------------- deepseek v4.1
class DsmlSpaced(TypedFormat):
    """DeepSeek V4.1: DSML with a space after the tag prefix::

        <｜DSML｜ calls>
        <｜DSML｜ invoke name="get_weather">
        <｜DSML｜ parameter name="city" string="true">杭州</｜DSML｜ parameter>
        </｜DSML｜ invoke>
        </｜DSML｜ calls>
    """

    prefix = "｜DSML｜ "
    wrapper = "calls"

    def build(self) -> dict[str, Section]:
        p = self.prefix
        return {
            f"<{p}{self.wrapper}>": Section(body=ws_list(DsmlInvoke(*self._invoke_parts())),
                                            ends=(f"</{p}{self.wrapper}>",))
        }

    def _invoke_parts(self) -> tuple[P, Callable[[str, list], Call], str, Callable[[str], str]]:
        """`DsmlInvoke`'s arguments (also `dsml_invoke_grammar`'s)."""
        p = self.prefix
        typing = DsmlTyping()
        return xml_args(XmlParam(DsmlParamHead(p), f"</{p}parameter>"), typing), xml_call(typing), p, tagged_name


register_tool_parser("deepseek_v3", lambda tools: DeepSeekV3(), note="DeepSeek V3 (JSON in a code fence)")
register_tool_parser("deepseek_v31", lambda tools: DeepSeekV31(), note="DeepSeek V3.1")
# DSML says each value's type itself: the grammar does not read the tools
register_tool_parser(
    "deepseek_v32", lambda tools: Dsml(("function_calls",)), shared=True, note="DeepSeek V3.2 (DSML)"
)
register_tool_parser(
    "deepseek_v4",
    lambda tools: Dsml(("tool_calls",), variants=("toolcalls", "tool")),
    shared=True,
    note="DeepSeek V4 (DSML)",
)
register_tool_parser("deepseek_v41", lambda tools: DsmlSpaced(tools), note="DeepSeek V4.1 (spaced DSML)")
