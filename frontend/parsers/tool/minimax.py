"""MiniMax's tool-call formats: minimax_m2 (``<invoke>`` / ``<parameter>``
elements) and minimax_m3 (namespaced, nested elements typed by the schema).
"""

from __future__ import annotations

from typing import Any

from vllm_pyfrontend.parsers.combinators import (
    NEED,
    Fail,
    Ok,
    P,
    Probe,
    Result,
    fmap,
    lit,
    seq,
    tag,
    take_until,
    ws,
    ws_list,
)
from vllm_pyfrontend.parsers.tool.arg_values import coerce_params, is_string_param
from vllm_pyfrontend.parsers.tool.base import Section
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.xml_calls import (
    SchemaTyping,
    XmlFormat,
    XmlParam,
    attr_value,
    call_name,
    named_invoke,
    named_param,
    xml_args,
    xml_call,
)


# ---------------------------------------------------------------- minimax m2
class MinimaxM2(XmlFormat):
    """MiniMax-M2::

        <minimax:tool_call>
        <invoke name="get_weather">
        <parameter name="city">Paris</parameter>
        </invoke>
        </minimax:tool_call>
    """

    def build(self) -> dict[str, Section]:
        param = XmlParam(named_param("parameter"), "</parameter>")
        body = ws_list(named_invoke("invoke", param, self.typing))
        return {"<minimax:tool_call>": Section(body=body, ends=("</minimax:tool_call>",))}


# ----------------------------------------------------------------- minimax m3
NS = "]<]minimax[>["


class _M3Element(P):
    """``NS<name>`` text or child elements ``NS</name>`` -> (name, str | list)."""

    __slots__ = ("depth",)

    def __init__(self, depth: int = 0) -> None:
        self.depth = depth

    def parse(self, s: str, pos: int, eof: bool, pr: Probe | None = None) -> Result:
        if self.depth > 64:
            return Fail(pos)
        head = seq(lit(NS + "<"), take_until(">"), lit(">")).parse(s, pos, eof, pr)
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
            r = lit(close).parse(s, j, eof, pr)
            if isinstance(r, Ok):
                i = r.end
                break
            if r is NEED:
                return NEED
            r = child.parse(s, j, eof, pr)
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

    def parse(self, s: str, pos: int, eof: bool, pr: Probe | None = None) -> Result:
        h = self.head.parse(s, pos, eof, pr)
        if not isinstance(h, Ok):
            return h
        key = h.value
        if self.text_key(key):
            j = s.find(NS, h.end)
            if j == -1:
                return Fail(len(s)) if eof else NEED
            r = lit(f"{NS}</{key}>").parse(s, j, eof, pr)
            if not isinstance(r, Ok):
                return r
            return Ok(r.end, (key, None, s[h.end : j]))
        r = _M3Element().parse(s, pos, eof, pr)
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
        self.head = seq(lit(f"{NS}<invoke"), ws(1), lit("name="), call_name(attr_value()), ws(), lit(">"), ws())
        self.tail = seq(ws(), lit(f"{NS}</invoke>"))

    def parse(self, s: str, pos: int, eof: bool, pr: Probe | None = None) -> Result:
        h = self.head.parse(s, pos, eof, pr)
        if not isinstance(h, Ok):
            return h
        name = h.value[3]
        props = self.typing.props(name)
        param = _M3Param(lambda key: is_string_param(props.get(key)))
        a = xml_args(param, self.typing).parse(s, h.end, eof, pr)
        if not isinstance(a, Ok):
            return a
        t = self.tail.parse(s, a.end, eof, pr)
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
        body = ws_list(invoke)
        return {f"{NS}<tool_call>": Section(body=body, ends=(f"{NS}</tool_call>",))}


register_tool_parser("minimax_m2", lambda tools: MinimaxM2(tools))
register_tool_parser("minimax_m3", lambda tools: MinimaxM3(tools))
