"""More XML-style call formats: the Qwen3-Coder kin (mimo, seed_oss, step3p5),
step3 (steptml), minicpm5, minimax_m3 (namespaced, nested elements) and
muse_glimmer (ATEM).

Parameters arrive as text and the arguments JSON is built from them, typed by
the tool's schema where the format leaves it to the schema.
"""

from __future__ import annotations

import ast
import html
import json
import re
from dataclasses import replace
from typing import Any

from vllm_pyfrontend.parsers.combinators import (
    NEED,
    Fail,
    Ok,
    P,
    Result,
    fmap,
    lit,
    many,
    opt,
    scan_json,
    seq,
    tag,
    take_until,
    ws,
)
from vllm_pyfrontend.parsers.tool.base import (
    Call,
    Section,
    coerce_params,
    coerce_value,
    is_string_param,
)
from vllm_pyfrontend.parsers.tool.xml_calls import (
    Qwen3Coder,
    SchemaTyping,
    XmlFormat,
    XmlParam,
    XmlTyping,
    _attr_value,
    _name,
    call_name,
    xml_args,
    xml_call,
)


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


# ---------------------------------------------------------------------- step3
_S3_CALLS_BEGIN = "<｜tool_calls_begin｜>"
_S3_CALLS_END = "<｜tool_calls_end｜>"
_S3_CALL_BEGIN = "<｜tool_call_begin｜>"
_S3_CALL_END = "<｜tool_call_end｜>"
_S3_SEP = "<｜tool_sep｜>"


class Step3(XmlFormat):
    """StepFun Step-3::

        <｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>get_weather
        <steptml:invoke name="get_weather">
        <steptml:parameter name="city">Paris</steptml:parameter>
        </steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>

    The ``function<｜tool_sep｜>NAME`` header is optional; calls may be separated by
    ``<｜tool_sep｜>``. String values are kept as written (whitespace is data for edit
    tools); other values are stripped and typed by the schema.
    """

    def build(self) -> dict[str, Section]:
        typing = _Step3Typing(self.tools)
        param = XmlParam(
            fmap(seq(lit('<steptml:parameter name="'), take_until('"'), lit('">')), lambda v: _name(v[1])),
            "</steptml:parameter>",
        )
        make = xml_call(typing)
        header = seq(lit("function"), ws(), lit(_S3_SEP), take_until("<steptml:invoke"))
        call = tag(
            "call",
            fmap(
                seq(
                    lit(_S3_CALL_BEGIN),
                    ws(),
                    opt(header),
                    lit('<steptml:invoke name="'),
                    call_name(take_until('"')),
                    lit('">'),
                    ws(),
                    xml_args(param, typing),
                    ws(),
                    lit("</steptml:invoke>"),
                    ws(),
                    lit(_S3_CALL_END),
                ),
                lambda v: make(v[4], v[7]),
            ),
        )
        sep = seq(ws(), opt(lit(_S3_SEP)), ws())
        body = fmap(seq(ws(), many(call, sep=sep, minimum=1), ws()), lambda v: v[1])
        return {_S3_CALLS_BEGIN: Section(body=body, ends=(_S3_CALLS_END,))}


class _Step3Typing(SchemaTyping):
    """String values are kept as written (whitespace is data for edit tools);
    other values are stripped, then typed by the schema."""

    def _verbatim(self, schema: Any) -> bool:
        return not isinstance(schema, dict) or schema.get("type") in (None, "string")

    def is_string(self, name: str, key: str, meta: Any) -> bool:
        schema = self.props(name).get(key)
        return self._verbatim(schema) and is_string_param(schema)

    def convert(self, name: str, key: str, meta: Any, text: str) -> Any:
        schema = self.props(name).get(key)
        return coerce_value(text if self._verbatim(schema) else text.strip(), schema)


# ------------------------------------------------------------------- minicpm5
def _minicpm_value(text: str, schema: Any) -> Any:
    """A ``<param>`` text: XML entities and CDATA undone; typed unless the
    schema says string (JSON, else a Python literal, else the text)."""
    if text.startswith("<![CDATA[") and text.endswith("]]>"):
        text = text[len("<![CDATA[") : -len("]]>")]
    else:
        text = html.unescape(text)
    if isinstance(schema, dict) and schema.get("type") == "string":
        return text
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value = ast.literal_eval(text)
        json.dumps(value)
        return value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


_CDATA = "<![CDATA["
#: an entity reference still open at the end of a value: ``&`` and its run so far
_OPEN_ENTITY = re.compile(r"&(?:#[xX]?[0-9a-fA-F]*|[^\t\n\f <&;]{0,32})\Z")


class _MiniCpmParam(XmlParam):
    """A ``<param>`` whose streamed text is unescaped as it arrives: held from
    an entity reference that may still grow, and whole while the value may be
    CDATA."""

    def held(self, value: str) -> int:
        if value.startswith(_CDATA[: len(value)]) or value.startswith(_CDATA):
            return 0
        m = _OPEN_ENTITY.search(value)
        return m.start() if m else len(value)

    def decode(self, text: str) -> str:
        return html.unescape(text)


class _MiniCpmTyping(SchemaTyping):
    def is_string(self, name: str, key: str, meta: Any) -> bool:
        schema = self.props(name).get(key)
        return isinstance(schema, dict) and schema.get("type") == "string"

    def convert(self, name: str, key: str, meta: Any, text: str) -> Any:
        return _minicpm_value(text, self.props(name).get(key))


class MiniCpm5(XmlFormat):
    """MiniCPM 5::

        <function name="get_weather">
        <param name="city">Paris</param>
        </function>

    String values (by the schema) stream, unescaped as they arrive.
    """

    def build(self) -> dict[str, Section]:
        typing = _MiniCpmTyping(self.tools)
        head = fmap(
            seq(lit("<param"), ws(1), lit("name="), _attr_value(), ws(), lit(">")),
            lambda v: _name(v[3]),
        )
        param = _MiniCpmParam(head, "</param>")
        make = xml_call(typing)

        def build_call(v: list[Any]) -> list[Call]:
            keys = [k for k, _, _ in v[4]]
            if len(set(keys)) != len(keys):
                raise ValueError("repeated parameter")
            return [make(v[0], v[4])]

        call = tag(
            "call",
            fmap(
                seq(call_name(_attr_value()), take_until(">"), lit(">"), ws(), xml_args(param, typing), ws()),
                build_call,
            ),
        )
        # a call cut off before </function> is not a call (the output comes back as
        # text), unless it was announced while its arguments streamed (committed)
        return {"<function name=": Section(body=call, ends=("</function>",), eof_closes=False)}


# ----------------------------------------------------------------- minimax m3
NS = "]<]minimax[>["


class _M3Element(P):
    """``NS<name>`` text or child elements ``NS</name>`` -> (name, str | list)."""

    __slots__ = ("depth",)

    def __init__(self, depth: int = 0) -> None:
        self.depth = depth

    def parse(self, s: str, pos: int, eof: bool) -> Result:
        if self.depth > 64:
            return Fail(pos)
        head = seq(lit(NS + "<"), take_until(">"), lit(">")).parse(s, pos, eof)
        if not isinstance(head, Ok):
            return head
        name = head.value[1]
        if not name.strip() or name.startswith("/") or any(c in name for c in "<[]"):
            return Fail(pos)
        close = f"{NS}</{name}>"
        i = head.end
        texts: list[str] = []
        children: list[tuple[str, Any]] = []
        child = _M3Element(self.depth + 1)
        while True:
            j = s.find(NS, i)
            if j == -1:
                # text so far may still be followed by the closing tag
                if eof:
                    return Fail(len(s))
                return NEED
            texts.append(s[i:j])
            r = lit(close).parse(s, j, eof)
            if isinstance(r, Ok):
                i = r.end
                break
            if r is NEED:
                return NEED
            r = child.parse(s, j, eof)
            if not isinstance(r, Ok):
                return r
            children.append(r.value)
            i = r.end
        text = "".join(texts)
        if not children:
            return Ok(i, (name, text))
        if text.strip():
            children.append(("$text", text))
        return Ok(i, (name, children))


def _m3_container(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return None
    t = schema.get("type")
    for kind in ("array", "object"):
        if t == kind or (isinstance(t, list) and kind in t):
            return kind
    if t is None:
        if "items" in schema:
            return "array"
        if "properties" in schema or "additionalProperties" in schema:
            return "object"
    for key in ("anyOf", "oneOf"):
        for alt in schema.get(key) or ():
            found = _m3_container(alt)
            if found:
                return found
    return None


def _m3_convert(value: Any, schema: Any) -> Any:
    kind = _m3_container(schema)
    if isinstance(value, str):
        if not isinstance(schema, dict):
            return value
        if kind is not None and schema.get("type") != "string" and not value.strip():
            return [] if kind == "array" else {}
        out = coerce_params({"v": value}, {"v": schema})["v"]
        if isinstance(out, str) and schema.get("type") in ("integer", "number"):
            try:  # "018956": not JSON, still the number the schema asks for
                return int(out.strip()) if schema["type"] == "integer" else float(out.strip())
            except ValueError:
                pass
        return out
    if kind == "array":
        items = schema.get("items") if isinstance(schema, dict) else None
        return [_m3_convert(child, items) for _, child in value]
    return _m3_object(value, schema if isinstance(schema, dict) else None)


def _m3_object(elements: list[tuple[str, Any]], schema: dict[str, Any] | None) -> dict[str, Any]:
    props = (schema or {}).get("properties") or {}
    extra = (schema or {}).get("additionalProperties")
    out: dict[str, Any] = {}
    repeated: set[str] = set()
    for name, element in elements:
        converted = _m3_convert(element, props.get(name, extra))
        if name not in out:
            out[name] = converted
        elif name in repeated:
            out[name].append(converted)
        else:
            out[name] = [out[name], converted]
            repeated.add(name)
    return out


def _m3_key(text: str) -> str:
    if not text.strip() or text.startswith("/") or any(c in text for c in "<[]"):
        raise ValueError("not an element name")
    return text


_M3_HEAD = fmap(seq(lit(NS + "<"), fmap(take_until(">"), _m3_key), lit(">")), lambda v: v[1])


class _M3Param(XmlParam):
    """One argument element of a call. An argument whose schema says text is
    text only (its value streams; an element inside it is malformed); any
    other is an element with children (`_M3Element`), sent when complete."""

    __slots__ = ("text_key",)

    def __init__(self, text_key: Any) -> None:
        super().__init__(_M3_HEAD, NS)
        self.text_key = text_key  # key -> whether the value is text only

    def parse(self, s: str, pos: int, eof: bool) -> Result:
        h = self.head.parse(s, pos, eof)
        if not isinstance(h, Ok):
            return h
        key = h.value
        if self.text_key(key):
            j = s.find(NS, h.end)
            if j == -1:
                return Fail(len(s)) if eof else NEED
            r = lit(f"{NS}</{key}>").parse(s, j, eof)
            if not isinstance(r, Ok):
                return r
            return Ok(r.end, (key, None, s[h.end : j]))
        r = _M3Element().parse(s, pos, eof)
        if not isinstance(r, Ok):
            return r
        return Ok(r.end, (key, None, r.value[1]))

    def held(self, value: str) -> int:
        j = value.find(NS)  # a tag inside a text value (malformed) ends what streams
        return j if j != -1 else len(value)


class _M3Typing(SchemaTyping):
    def convert(self, name: str, key: str, meta: Any, text: Any) -> Any:
        return _m3_convert(text, self.props(name).get(key))


class _M3Invoke(P):
    """``NS<invoke name=...>`` arguments ``NS</invoke>``: the arguments' grammar
    depends on the call's tool (which arguments are text)."""

    __slots__ = ("typing", "head", "tail")

    def __init__(self, typing: _M3Typing) -> None:
        self.typing = typing
        self.head = seq(lit(f"{NS}<invoke"), ws(1), lit("name="), call_name(_attr_value()), ws(), lit(">"), ws())
        self.tail = seq(ws(), lit(f"{NS}</invoke>"))

    def parse(self, s: str, pos: int, eof: bool) -> Result:
        h = self.head.parse(s, pos, eof)
        if not isinstance(h, Ok):
            return h
        name = h.value[3]
        props = self.typing.props(name)
        param = _M3Param(lambda key: is_string_param(props.get(key)))
        a = xml_args(param, self.typing).parse(s, h.end, eof)
        if not isinstance(a, Ok):
            return a
        t = self.tail.parse(s, a.end, eof)
        if not isinstance(t, Ok):
            return t
        return Ok(t.end, xml_call(self.typing)(name, list(a.value)))


class MinimaxM3(XmlFormat):
    """MiniMax M3: every tag prefixed by ``]<]minimax[>[``; parameters are
    elements named after the argument, nested for objects, ``<item>`` for
    array elements, typed by the schema::

        ]<]minimax[>[<tool_call>
        ]<]minimax[>[<invoke name="create_order">
        ]<]minimax[>[<user_id>42]<]minimax[>[</user_id>
        ]<]minimax[>[</invoke>
        ]<]minimax[>[</tool_call>

    Text arguments stream as generated; nested ones are sent when complete. A
    repeated argument keeps its first value (one already sent cannot become a
    list; repeated elements inside a nested value do become lists).
    """

    def build(self) -> dict[str, Section]:
        invoke = tag("call", _M3Invoke(_M3Typing(self.tools)))
        body = fmap(seq(ws(), many(invoke, sep=ws(), minimum=1), ws()), lambda v: v[1])
        return {f"{NS}<tool_call>": Section(body=body, ends=(f"{NS}</tool_call>",))}


# --------------------------------------------------------------- muse glimmer
def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


class MuseGlimmer(XmlFormat):
    """MuseGlimmer (ATEM)::

        <atem:function_calls>
        <atem:invoke name="get_weather">
        <atem:parameter name="city">Paris</atem:parameter>
        </atem:invoke>
        </atem:function_calls>

    Values are JSON where they parse, else text. Only the ATEM block; the
    channel framing (``<|start|>assistant to=…<|message|>``) is not parsed here.
    """

    def build(self) -> dict[str, Section]:
        typing = JsonOrTextTyping()
        param = XmlParam(
            fmap(
                seq(lit("<atem:parameter"), ws(1), lit("name="), _attr_value(), take_until(">"), lit(">")),
                lambda v: _name(v[3]),
            ),
            "</atem:parameter>",
        )
        make = xml_call(typing)
        invoke = tag(
            "call",
            fmap(
                seq(
                    lit("<atem:invoke"),
                    ws(1),
                    lit("name="),
                    call_name(_attr_value()),
                    take_until(">"),
                    lit(">"),
                    ws(),
                    xml_args(param, typing),
                    ws(),
                    lit("</atem:invoke>"),
                ),
                lambda v: make(v[3], v[7]),
            ),
        )
        body = fmap(seq(ws(), many(invoke, sep=ws(), minimum=1), ws()), lambda v: v[1])
        return {"<atem:function_calls>": Section(body=body, ends=("</atem:function_calls>",))}


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
