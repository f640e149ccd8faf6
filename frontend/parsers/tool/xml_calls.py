"""XML-style call formats: the engine every XML-ish grammar is built from
(`XmlParam`, `XmlTyping`, `xml_args`, `call_element`, `XmlFormat`) and the
Qwen3-Coder family: qwen3_coder, qwen3_xml, step3p5, seed_oss, mimo.

Parameters arrive as text; the arguments JSON is built from them, typed by the
tool's schema (`coerce_params`) where the format leaves it to the schema, as
vLLM does. Formats of one model family built on this engine have their own
modules (deepseek.py, glm.py, minimax.py, step.py, minicpm.py, muse.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, Callable, Sequence

from vllm_pyfrontend.parsers.combinators import (
    NEED,
    Fail,
    Ok,
    P,
    Probe,
    Result,
    choice,
    find_first,
    fmap,
    lit,
    many,
    partial_tail,
    scan_json,
    seq,
    tag,
    take_until,
    ws,
    ws_list,
)
from vllm_pyfrontend.parsers.tool.arg_values import coerce_value, is_string_param, tool_properties
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat
from vllm_pyfrontend.parsers.tool.json_calls import Hermes
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.streaming import (
    ArgsPrefix,
    ParsedArgs,
    XmlStringTail,
    dumps_value,
    escape,
    min_open,
    probe_name,
    skip_ws,
    xml_args_text,
)


_BAD_NAME = re.compile(r"[\s<>\"']")


def xml_name(text: str) -> str:
    name = text.strip()
    if not name or _BAD_NAME.search(name) is not None:
        raise ValueError("bad name")
    return name


def call_name(p: P) -> P:
    """A function name (validated), reported to the streaming engine."""
    return tag("name", fmap(p, xml_name))


class XmlParam(P):
    """One parameter: ``head`` (value: the key, or ``(key, meta)``), then the
    value text up to ``close`` (consumed) or one of ``stops`` (not consumed:
    the model forgot or misspelled the close; ``hold`` is then cut off the
    value, e.g. a misspelled closing tag). With ``trim`` one leading and one
    trailing newline are the template's framing. Value: ``(key, meta, text)``."""

    __slots__ = ("head", "close", "stops", "trim", "hold", "ends")

    def __init__(
        self,
        head: P,
        close: str,
        stops: Sequence[str] = (),
        trim: bool = False,
        hold: Callable[[str], int] | None = None,
    ) -> None:
        self.head = head
        self.close = close
        self.stops = tuple(stops)
        self.trim = trim
        self.hold = hold
        self.ends = (close, *self.stops)

    def parse(self, s: str, pos: int, eof: bool, pr: Probe | None = None) -> Result:
        if pr is None:
            return self._parse(s, pos, eof, None)
        # Under a probe the open call's arguments are parsed twice (the call's grammar, then
        # `XmlArgs.partial` for what can stream): the second pass finds the first's results.
        key = (self, s, pos, eof)
        r = pr.memo.get(key)
        if r is None:
            r = pr.memo[key] = self._parse(s, pos, eof, pr)
        return r

    def _parse(self, s: str, pos: int, eof: bool, pr: Probe | None) -> Result:
        r = self.head.parse(s, pos, eof, pr)
        if not isinstance(r, Ok):
            return r
        key, meta = r.value if isinstance(r.value, tuple) else (r.value, None)
        j, m = find_first(s, self.ends, r.end)
        if j == -1:
            return NEED if not eof else Fail(len(s))
        value = s[r.end : j]
        if self.trim:
            value = _trim_newlines(value)
        if m == self.close:
            return Ok(j + len(m), (key, meta, value))
        if self.hold is not None:
            value = value[: self.hold(value)]
        return Ok(j, (key, meta, value))

    def decode(self, text: str) -> str:
        """A streamed piece of value text as the value (formats with escapes
        in their values override it together with `held`)."""
        return text

    def held(self, value: str) -> int:
        """How much of an open value can be streamed (text that the close or
        a stop could still cut off is held)."""
        if self.trim:
            return len(value) - 1 if value.endswith("\n") else len(value)
        if self.hold is not None:
            return self.hold(value)
        return len(value)


#: typer(call name, key, meta) -> the parameter's schema-like description:
#: ``is_string(...)`` decides streaming, ``convert(...)`` the final value.
class XmlTyping:
    def is_string(self, name: str, key: str, meta: Any) -> bool:  # pragma: no cover
        raise NotImplementedError

    def convert(self, name: str, key: str, meta: Any, text: str) -> Any:  # pragma: no cover
        raise NotImplementedError

    def streams(self, name: str, key: str, meta: Any, raw: str) -> bool:
        """Whether an open value (``raw`` so far) is certainly text: by default
        when `is_string` says so (formats that decide by the value override)."""
        return self.is_string(name, key, meta)


class SchemaTyping(XmlTyping):
    """Values typed by the request's tool schemas (qwen3_coder, glm45, minimax_m2)."""

    def __init__(self, tools: Sequence[Any]) -> None:
        self.tools = list(tools)
        self._props: dict[str, dict[str, Any]] = {}

    def props(self, name: str) -> dict[str, Any]:
        got = self._props.get(name)
        if got is None:
            got = self._props[name] = tool_properties(self.tools, name) if self.tools else {}
        return got

    def is_string(self, name: str, key: str, meta: Any) -> bool:
        return is_string_param(self.props(name).get(key))

    def convert(self, name: str, key: str, meta: Any, text: str) -> Any:
        return coerce_value(text, self.props(name).get(key))


class XmlArgs(P):
    """``param`` repeated (separated by whitespace): the arguments of a call,
    streamed parameter by parameter (reported to the engine as ``"args"``)."""

    __slots__ = ("param", "typing", "_many", "sep")

    def __init__(self, param: XmlParam, typing: XmlTyping, sep: P | None = None) -> None:
        self.param = param
        self.typing = typing
        self.sep = sep  # between parameters (default: whitespace)
        self._many = many(param, sep=sep) if sep is not None else ws_list(param, 0, outer=False)

    def parse(self, s: str, pos: int, eof: bool, pr: Probe | None = None) -> Result:
        r = self._many.parse(s, pos, eof, pr)
        if isinstance(r, Ok) and r.value:  # (no parameters: not begun)
            name = probe_name(pr)
            if name is not None:  # under a probe: the text too (`ParsedArgs`)
                typing = self.typing
                items = [(k, typing.convert(name, k, meta, text)) for k, meta, text in r.value]
                return Ok(r.end, ParsedArgs(r.value, xml_args_text(items)))
        return r

    def partial(self, s: str, pos: int, pr: Probe) -> ArgsPrefix | None:
        name = next((v for k, _, e, v in reversed(pr.events) if k == "name" and e != -1), None)
        if not isinstance(name, str):
            return None
        typing = self.typing
        param = self.param
        least = min_open(pr)
        parts: list[str] = []
        seen: set[str] = set()
        i = pos
        while True:
            if self.sep is not None:
                if parts or i > pos:
                    r = self.sep.parse(s, i, False, pr)
                    if not isinstance(r, Ok):
                        break
                    i = r.end
            elif parts or i > pos:
                i = skip_ws(s, i)
            r = param.parse(s, i, False, pr)
            if isinstance(r, Ok):
                key, meta, text = r.value
                if key not in seen:
                    seen.add(key)
                    value = typing.convert(name, key, meta, text)
                    parts.append(f"{dumps_value(key)}: {dumps_value(value)}")
                i = r.end
                continue
            break
        text = "{" + ", ".join(parts)
        # the open parameter: streamed when its value is text
        h = param.head.parse(s, i, False, pr)
        if isinstance(h, Ok):
            key, meta = h.value if isinstance(h.value, tuple) else (h.value, None)
            raw = s[h.end :]
            if key not in seen and len(raw) >= least and typing.streams(name, key, meta, raw[: partial_tail(raw, param.ends)]):
                if param.trim and raw.startswith("\n"):
                    raw = raw[1:]
                cut = partial_tail(raw, param.ends)
                keep = param.held(raw[:cut])
                if keep >= least:
                    sep = ", " if parts else ""
                    text += f"{sep}{dumps_value(key)}: \"" + escape(param.decode(raw[:keep]))
                    tail = XmlStringTail(param, raw[keep:], False)
                    return ArgsPrefix(text, '"}', tail)
        if not parts and least:
            return ArgsPrefix("", "")  # "{" goes out with the first parameter
        return ArgsPrefix(text, "}")


def xml_args(param: XmlParam, typing: XmlTyping, sep: P | None = None) -> P:
    node = XmlArgs(param, typing, sep)
    return tag("args", node, node.partial)


def xml_call(typing: XmlTyping) -> Callable[[str, list[tuple[str, Any, str]]], Call]:
    def make(name: str, params: list[tuple[str, Any, str]]) -> Call:
        items = [(key, typing.convert(name, key, meta, text)) for key, meta, text in params]
        return Call(name=name, arguments=xml_args_text(items))

    return make


def call_element(
    before: Sequence[P], name: P, after: Sequence[P], args: P, close: str, make: Callable[[str, Any], Any]
) -> P:
    """One call written as an element: the ``before`` parts, the function's ``name`` (a parser
    that reports it as ``"name"``), the ``after`` parts, whitespace, ``args`` (the parameters),
    whitespace and ``close``. Reported as ``"call"``; its value: ``make(name, parameters)``."""
    at_name = len(before)
    at_args = at_name + len(after) + 2
    return tag(
        "call",
        fmap(
            seq(*before, name, *after, ws(), args, ws(), lit(close)),
            lambda v: make(v[at_name], v[at_args]),
        ),
    )


class XmlFormat(ToolFormat):
    """Formats whose values need the request's tools (schema coercion)."""

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        self.tools = list(tools)
        self.typing = SchemaTyping(self.tools)
        self.sections = self.build()

    def build(self) -> dict[str, Section]:  # pragma: no cover - abstract
        raise NotImplementedError

    def make_call(self, name: str, params: list[tuple[str, str]]) -> Call:
        """A call from ``(key, text)`` pairs, typed by the schema (for formats
        that build their own grammar; they stream only with `xml_args`)."""
        return xml_call(self.typing)(name, [(k, None, v) for k, v in params])


# ---------------------------------------------------------------- attributes
def attr_value() -> P:
    """``"x"``, ``'x'`` or a bare ``x`` (up to ``>`` or whitespace)."""
    return choice(
        fmap(seq(lit('"'), take_until('"'), lit('"')), lambda v: v[1]),
        fmap(seq(lit("'"), take_until("'"), lit("'")), lambda v: v[1]),
        take_until(">", minimum=1),
    )


def named_param(element: str, rest: P | None = None) -> P:
    """A parameter's opening tag ``<ELEMENT name=KEY>`` (``KEY`` as `attr_value` reads it;
    ``rest``: what may stand before ``>``, whitespace by default) -> the key."""
    return fmap(
        seq(lit(f"<{element}"), ws(1), lit("name="), attr_value(), ws() if rest is None else rest, lit(">")),
        lambda v: xml_name(v[3]),
    )


def named_invoke(element: str, param: XmlParam, typing: XmlTyping, rest: P | None = None) -> P:
    """One call, ``<ELEMENT name=NAME>`` its parameters ``</ELEMENT>`` (``NAME`` as `attr_value`
    reads it, checked by `call_name`; ``rest`` as in `named_param`), built by `xml_call`."""
    return call_element(
        (lit(f"<{element}"), ws(1), lit("name=")),
        call_name(attr_value()),
        (ws() if rest is None else rest, lit(">")),
        xml_args(param, typing),
        f"</{element}>",
        xml_call(typing),
    )


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

    #: one framing newline on each side of a parameter value is dropped (MiMo keeps it)
    trim_values = True

    def build(self) -> dict[str, Section]:
        param = XmlParam(
            fmap(seq(lit("<parameter="), take_until(">"), lit(">")), lambda v: xml_name(v[1])),
            "</parameter>",
            trim=self.trim_values,
        )
        function = call_element(
            (lit("<function="),),
            call_name(take_until(">")),
            (lit(">"),),
            xml_args(param, self.typing),
            "</function>",
            xml_call(self.typing),
        )
        body = ws_list(function)
        return {"<tool_call>": Section(body=body, ends=("</tool_call>",))}


class Qwen3Xml(Qwen3Coder):
    """``qwen3_xml``: vLLM's Python server means the `Qwen3Coder` XML format,
    vllm-rs means JSON inside ``<tool_call>`` (hermes): both are accepted, so
    either launcher's flags work (the two bodies begin differently)."""

    def build(self) -> dict[str, Section]:
        xml = super().build()["<tool_call>"].body
        json_body = Hermes.sections["<tool_call>"].body
        return {"<tool_call>": Section(body=choice(xml, json_body), ends=("</tool_call>",))}


# ------------------------------------------------------------ qwen3-coder kin
class SeedOss(Qwen3Coder):
    """ByteDance Seed-OSS: Qwen3-Coder's grammar inside ``<seed:tool_call>``."""

    def build(self) -> dict[str, Section]:
        sec = super().build()["<tool_call>"]
        return {"<seed:tool_call>": replace(sec, ends=("</seed:tool_call>",))}


class MiMo(Qwen3Coder):
    """Xiaomi MiMo: Qwen3-Coder's grammar; parameter values are kept verbatim
    (no framing newlines trimmed), then typed by the schema (streamed:
    `xml_args`)."""

    trim_values = False


# ---------------------------------------------------------- JSON-or-text values
def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


class JsonOrTextTyping(XmlTyping):
    """Values are JSON where they parse, else text. An open value streams once
    its beginning shows it cannot be JSON (prose, code): the strict scanner
    rejects it, or a complete JSON value is followed by more text. Python's
    ``NaN`` / ``Infinity`` (accepted by the final decoding) are never streamed."""

    def is_string(self, name: str, key: str, meta: Any) -> bool:
        return False

    def streams(self, name: str, key: str, meta: Any, raw: str) -> bool:
        t = raw.lstrip(" \t\r\n")
        if not t or t[0] in "NI" or t.startswith("-I"):
            return False
        r = scan_json(t, 0, False)
        if isinstance(r, Fail):
            return True
        return isinstance(r, Ok) and bool(t[r.end :].strip(" \t\r\n"))

    def convert(self, name: str, key: str, meta: Any, text: str) -> Any:
        return _json_or_text(text)


register_tool_parser("qwen3_coder", lambda tools: Qwen3Coder(tools))
register_tool_parser(
    "qwen3_xml", lambda tools: Qwen3Xml(tools), note="Qwen3-Coder's XML or Hermes' JSON (either launcher's meaning)"
)
register_tool_parser("step3p5", lambda tools: Qwen3Coder(tools), note="Qwen3-Coder's format")
register_tool_parser("seed_oss", lambda tools: SeedOss(tools))
register_tool_parser("mimo", lambda tools: MiMo(tools))
