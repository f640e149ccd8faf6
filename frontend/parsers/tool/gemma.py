"""Gemma call formats: gemma4 and functiongemma.

Gemma 4 writes ``call:NAME{key:value,...}`` with its own value syntax: strings
between ``<|"|>`` delimiters, objects ``{...}``, arrays ``[...]`` and bare
words (numbers, booleans). A bare word takes the type the tool's schema gives
its parameter (an ``items`` / ``properties`` schema for nested values); where
the schema says nothing it stays text, as vLLM does.
"""

from __future__ import annotations

from typing import Any, Sequence

from vllm_pyfrontend.parsers.combinators import (
    NEED,
    Ok,
    P,
    Probe,
    Result,
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
    ArgsPrefix,
    ParsedArgs,
    XmlStringTail,
    complete_members,
    dumps_value,
    escape,
    first_wins,
    min_open,
    open_member_prefix,
    probe_name,
    skip_ws,
    xml_args_text,
)
from vllm_pyfrontend.parsers.tool.xml_calls import JsonOrTextTyping, XmlParam, xml_args, xml_call

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
        parts: list[str] = []
        while True:
            i = skip_ws(s, i)
            r = self.value.parse(s, i, False)
            if isinstance(r, Ok):
                parts.append(dumps_value(_typed(r.value, schema)))
                sep = _G_SEP.parse(s, r.end, False)
                if isinstance(sep, Ok):
                    i = sep.end
                    continue
            elif r is NEED:
                sub = self.prefix(s, i, schema, least, depth + 1)
                if sub is not None:
                    text, closers, tail = sub
                    return "[" + ", ".join([*parts, text]), closers + "]", tail
            return "[" + ", ".join(parts), "]", None

    def _members(self, s: str, i: int, schema: Any, least: int, depth: int) -> tuple[str, str, Any]:
        parts: list[str] = []
        seen: set[str] = set()
        while True:
            i = skip_ws(s, i)
            h = self.key_head.parse(s, i, False)
            if not isinstance(h, Ok):
                break
            key = h.value
            sub_schema = _sub_schema(schema, "properties", key)
            r = self.value.parse(s, h.end, False)
            if isinstance(r, Ok):
                if key not in seen:
                    seen.add(key)
                    parts.append(f"{dumps_value(key)}: {dumps_value(_typed(r.value, sub_schema))}")
                sep = _G_SEP.parse(s, r.end, False)
                if isinstance(sep, Ok):
                    i = sep.end
                    continue
            elif r is NEED and key not in seen:
                sub = self.prefix(s, h.end, sub_schema, least, depth + 1)
                if sub is not None:
                    text, closers, tail = sub
                    return "{" + ", ".join([*parts, f"{dumps_value(key)}: {text}"]), closers + "}", tail
            break
        return "{" + ", ".join(parts), "}", None


class _Gemma4Args(P):
    """The top-level members of a call, ``key:value`` separated by commas ->
    ``[(key, value)]``; streamed member by member (reported as ``"args"``):
    completed members typed by the schema, an open ``<|"|>`` string as it
    arrives (a delimited string is text whatever the schema says)."""

    __slots__ = ("member", "head", "typed_member", "schema_of", "nested", "_many", "_sep")

    def __init__(self, member: P, head: P, value: P, typed_member, schema_of) -> None:
        self.member = member
        self.head = head  # ``key:`` -> key
        self.typed_member = typed_member  # (call name, key, value) -> JSON value
        self.schema_of = schema_of  # (call name, key) -> the parameter's schema
        self.nested = _Nested(value, head)
        self._sep = seq(ws(), lit(","), ws())
        self._many = many(member, sep=self._sep)

    def parse(self, s: str, pos: int, eof: bool, pr: Probe | None = None) -> Result:
        r = self._many.parse(s, pos, eof, pr)
        if isinstance(r, Ok) and r.value:  # (no members: not begun)
            name = probe_name(pr)
            if name:  # under a probe: the text too (`ParsedArgs`)
                text = xml_args_text([(k, self.typed_member(name, k, v)) for k, v in r.value])
                return Ok(r.end, ParsedArgs(r.value, text))
        return r

    def partial(self, s: str, pos: int, pr: Probe) -> ArgsPrefix | None:
        name = next((v for k, _, e, v in reversed(pr.events) if k == "name" and e != -1), None)
        if not isinstance(name, str) or not name:
            return None
        least = min_open(pr)
        parts, seen, i = complete_members(s, pos, self._sep, self.member,
                                          lambda key, value: self.typed_member(name, key, value), pr)
        begun = open_member_prefix(parts, seen, self.head.parse(s, i, False, pr), least,
                                   lambda key, at: self.nested.prefix(s, at, self.schema_of(name, key), least))
        if begun is not None:
            return begun
        if not parts and least:
            return ArgsPrefix("", "")
        return ArgsPrefix("{" + ", ".join(parts), "}")


class Gemma4(ToolFormat):
    """Gemma 4: ``<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>``."""

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        self.tools = list(tools)
        _, value, member, head = _gemma4_values()

        def schema_of(name: str, key: str) -> Any:
            props = (tool_schema(self.tools, name) or {}).get("properties")
            return props.get(key) if isinstance(props, dict) else None

        def typed_member(name: str, key: str, value: Any) -> Any:
            return _typed(value, schema_of(name, key))

        node = _Gemma4Args(member, head, value, typed_member, schema_of)

        def build(v: list[Any]) -> Call:
            name = v[1]
            return Call(name=name, arguments=xml_args_text([(k, typed_member(name, k, x)) for k, x in v[4]]))

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
        call = tag(
            "call",
            fmap(
                seq(
                    lit("call:"),
                    tag("name", chars_while(lambda c: c.isalnum() or c == "_")),
                    lit("{"),
                    ws(),
                    xml_args(param, typing, sep=seq(ws(), opt(lit(",")), ws())),
                    ws(),
                    lit("}"),
                ),
                lambda v: [make(v[1], v[4])],
            ),
        )
        self.sections = {
            "<start_function_call>": Section(body=call, ends=("<end_function_call>",))
        }


register_tool_parser("gemma4", lambda tools: Gemma4(tools))
register_tool_parser("functiongemma", lambda tools: FunctionGemma(tools))
