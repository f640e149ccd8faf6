"""Gemma call formats: gemma4 and functiongemma.

Gemma 4 writes ``call:NAME{key:value,...}`` with its own value syntax: strings
between ``<|"|>`` delimiters, objects ``{...}``, arrays ``[...]`` and bare
words (numbers, booleans). A bare word takes the type the tool's schema gives
its parameter (an ``items`` / ``properties`` schema for nested values); where
the schema says nothing it stays text, as vLLM does.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from vllm_pyfrontend.parsers.combinators import (
    Ok,
    P,
    chars_while,
    choice,
    fmap,
    lazy,
    lit,
    many,
    opt,
    partial_tail,
    seq,
    tag,
    take_until,
    ws,
    ws_list,
)
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.schema_values import schema_types, tool_schema, typed_value
from vllm_pyfrontend.parsers.tool.streaming import (
    MemberArgs,
    ValuePrefix,
    XmlStringTail,
    dumps_value,
    escape,
    first_wins,
    items_prefix,
    members_prefix,
    xml_args_text,
)
from vllm_pyfrontend.parsers.tool.xml_calls import JsonOrTextTyping, XmlParam, call_element, xml_args, xml_call

Q = '<|"|>'


def _ident(c: str) -> bool:
    return c.isalnum() or c in "_-."


class _Bare:
    """A bare word, typed later by the schema."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _typed(value: Any, schema: Any) -> Any:
    if isinstance(value, _Bare):
        types = schema_types(schema)
        if types == {"string"} and not (isinstance(schema, dict) and ("type" in schema or "enum" in schema)):
            # no schema type: Gemma 4 writes every string between <|"|>, so a
            # bare word is a number, a boolean or null when it parses as one
            types = set()
        return typed_value(value.text, types)
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        return [_typed(v, items) for v in value]
    if isinstance(value, dict):
        props = schema.get("properties") if isinstance(schema, dict) else None
        props = props if isinstance(props, dict) else {}
        return {k: _typed(v, props.get(k)) for k, v in value.items()}
    return value


def _gemma4_values() -> tuple[P, P, P, P]:
    """(object members parser -> dict, value parser, member parser -> (key,
    value), member head parser ``key:`` -> key)."""
    sep = seq(ws(), lit(","), ws())
    string = fmap(seq(lit(Q), take_until(Q), lit(Q)), lambda v: v[1])
    bare = fmap(chars_while(lambda c: c not in ",}]" and not c.isspace()), _Bare)
    value = lazy(lambda: choice(string, obj, arr, bare))
    key = choice(string, chars_while(_ident))
    member = fmap(seq(key, ws(), lit(":"), ws(), value), lambda v: (v[0], v[4]))
    members = fmap(many(member, sep=sep), first_wins)
    obj = fmap(seq(lit("{"), ws(), members, ws(), lit("}")), lambda v: v[2])
    arr = fmap(seq(lit("["), ws(), many(value, sep=sep), ws(), lit("]")), lambda v: v[2])
    key_head = fmap(seq(key, ws(), lit(":"), ws()), lambda v: v[0])
    return members, value, member, key_head


class _QuoteParam:
    """What `XmlStringTail` needs of a ``<|"|>`` string value: its end."""

    ends = (Q,)
    trim = False

    @staticmethod
    def held(value: str) -> int:
        return len(value)


# ------------------------------------------------------- nested values, streamed
_G_SEP = seq(ws(), lit(","), ws())
_MAX_DEPTH = 32


def _sub_schema(schema: Any, kind: str, key: str | None = None) -> Any:
    if not isinstance(schema, dict):
        return None
    if kind == "items":
        return schema.get("items")
    props = schema.get("properties")
    return props.get(key) if isinstance(props, dict) else None


class _Nested:
    """What is certain of the JSON of an open Gemma 4 value: objects member by
    member, arrays item by item (completed ones typed by the schema), a
    ``<|"|>`` string as it arrives; bare words go out complete."""

    __slots__ = ("value", "key_head")

    def __init__(self, value: P, key_head: P) -> None:
        self.value = value
        self.key_head = key_head

    def prefix(self, s: str, i: int, schema: Any, least: int, depth: int = 0) -> tuple[str, str, Any] | None:
        n = len(s)
        if i >= n or depth > _MAX_DEPTH:
            return None
        if s.startswith(Q, i):
            raw = s[i + len(Q) :]
            cut = partial_tail(raw, (Q,))
            if Q in raw or cut < least:
                return None
            return '"' + escape(raw[:cut]), '"', XmlStringTail(_QuoteParam, raw[cut:], False)
        if s[i] == "[":
            return self._items(s, i + 1, _sub_schema(schema, "items"), least, depth)
        if s[i] == "{":
            return self._members(s, i + 1, schema, least, depth)
        return None

    def _items(self, s: str, i: int, schema: Any, least: int, depth: int) -> tuple[str, str, Any]:
        return items_prefix(
            s, i, self.value, _G_SEP,
            lambda item: dumps_value(_typed(item, schema)),
            lambda at: self.prefix(s, at, schema, least, depth + 1),
        )

    def _members(self, s: str, i: int, schema: Any, least: int, depth: int) -> tuple[str, str, Any]:
        def head(text: str, at: int) -> tuple[str, int] | None:
            h = self.key_head.parse(text, at, False)
            return (h.value, h.end) if isinstance(h, Ok) else None

        return members_prefix(
            s, i, head, self.value, _G_SEP,
            lambda key, value: dumps_value(_typed(value, _sub_schema(schema, "properties", key))),
            lambda key, at: self.prefix(s, at, _sub_schema(schema, "properties", key), least, depth + 1),
        )


class _Gemma4Args(MemberArgs):
    """The top-level members of a call, ``key:value`` separated by commas ->
    ``[(key, value)]``; streamed member by member: completed members typed by
    the schema, an open ``<|"|>`` string as it arrives (a delimited string is
    text whatever the schema says)."""

    __slots__ = ("schema_of", "nested")

    def __init__(self, member: P, head: P, value: P, schema_of: Callable[[str, str], Any]) -> None:
        # head: ``key:`` -> key
        sep = seq(ws(), lit(","), ws())
        super().__init__(many(member, sep=sep), member, head, sep)
        self.schema_of = schema_of  # (call name, key) -> the parameter's schema
        self.nested = _Nested(value, head)

    def typed(self, name: str, key: str, value: Any) -> Any:
        return _typed(value, self.schema_of(name, key))

    def value_prefix(self, s: str, at: int, name: str, key: str, least: int) -> ValuePrefix | None:
        return self.nested.prefix(s, at, self.schema_of(name, key), least)


class Gemma4(ToolFormat):
    """Gemma 4: ``<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>``."""

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        self.tools = list(tools)
        _, value, member, head = _gemma4_values()

        def schema_of(name: str, key: str) -> Any:
            props = (tool_schema(self.tools, name) or {}).get("properties")
            return props.get(key) if isinstance(props, dict) else None

        node = _Gemma4Args(member, head, value, schema_of)

        def build(v: list[Any]) -> Call:
            name = v[1]
            return Call(name=name, arguments=xml_args_text([(k, node.typed(name, k, x)) for k, x in v[4]]))

        call = tag(
            "call",
            fmap(
                seq(
                    lit("call:"),
                    tag("name", chars_while(_ident)),
                    ws(),
                    lit("{"),
                    fmap(seq(ws(), tag("args", node, node.partial), ws()), lambda v: v[1]),
                    lit("}"),
                ),
                lambda v: build([v[0], v[1], None, None, v[4]]),
            ),
        )
        body = ws_list(call)
        self.sections = {"<|tool_call>": Section(body=body, ends=("<tool_call|>",))}


class FunctionGemma(ToolFormat):
    """FunctionGemma: ``<start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>``.
    Values between ``<escape>`` marks are decoded as JSON when they are JSON; the
    comma between arguments may be missing."""

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        # streamed as the values arrive (`xml_args`); a value streams once it
        # cannot be JSON (`JsonOrTextTyping`)
        typing = JsonOrTextTyping()
        param = XmlParam(
            fmap(seq(chars_while(lambda c: c.isalnum() or c == "_"), lit(":<escape>")), lambda v: v[0]),
            "<escape>",
        )
        make = xml_call(typing)
        call = call_element(
            (lit("call:"),),
            tag("name", chars_while(lambda c: c.isalnum() or c == "_")),
            (lit("{"),),
            xml_args(param, typing, sep=seq(ws(), opt(lit(",")), ws())),
            "}",
            lambda name, params: [make(name, params)],
        )
        self.sections = {
            "<start_function_call>": Section(body=call, ends=("<end_function_call>",))
        }


register_tool_parser("gemma4", lambda tools: Gemma4(tools))
register_tool_parser("functiongemma", lambda tools: FunctionGemma(tools))
