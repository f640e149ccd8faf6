"""MiniCPM 5's tool-call format: ``<function name=...>`` with ``<param>``
values that may be entity-escaped or CDATA: minicpm5.
"""

from __future__ import annotations

import ast
import html
import json
import re
from typing import Any

from vllm_pyfrontend.parsers.combinators import fmap, lit, seq, tag, take_until, ws
from vllm_pyfrontend.parsers.tool.base import Call, Section
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.xml_calls import (
    SchemaTyping,
    XmlFormat,
    XmlParam,
    attr_value,
    call_name,
    named_param,
    xml_args,
    xml_call,
)


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
        param = _MiniCpmParam(named_param("param"), "</param>")
        make = xml_call(typing)

        def build_call(v: list[Any]) -> list[Call]:
            keys = [k for k, _, _ in v[4]]
            if len(set(keys)) != len(keys):
                raise ValueError("repeated parameter")
            return [make(v[0], v[4])]

        call = tag(
            "call",
            fmap(
                seq(call_name(attr_value()), take_until(">"), lit(">"), ws(), xml_args(param, typing), ws()),
                build_call,
            ),
        )
        # a call cut off before </function> is not a call (the output comes back as
        # text), unless it was announced while its arguments streamed (committed)
        return {"<function name=": Section(body=call, ends=("</function>",), eof_closes=False)}


register_tool_parser("minicpm5", lambda tools: MiniCpm5(tools))
