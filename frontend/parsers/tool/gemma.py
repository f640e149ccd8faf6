"""Gemma call formats (helper 15a): gemma4 and functiongemma.

Gemma 4 writes ``call:NAME{key:value,...}`` with its own value syntax: strings
between ``<|"|>`` delimiters, objects ``{...}``, arrays ``[...]`` and bare
words (numbers, booleans). A bare word takes the type the tool's schema gives
its parameter (an ``items`` / ``properties`` schema for nested values); where
the schema says nothing it stays text, as vLLM does.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from vllm_pyfrontend.parsers.combinators import (
    P,
    chars_while,
    choice,
    fmap,
    lazy,
    lit,
    many,
    opt,
    seq,
    take_until,
    ws,
)
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat, dumps_args
from vllm_pyfrontend.parsers.tool.schema_values import schema_types, tool_schema, typed_value

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


def _gemma4_values() -> tuple[P, P]:
    """(object members parser -> dict, value parser)."""
    sep = seq(ws(), lit(","), ws())
    string = fmap(seq(lit(Q), take_until(Q), lit(Q)), lambda v: v[1])
    bare = fmap(chars_while(lambda c: c not in ",}]" and not c.isspace()), _Bare)
    value = lazy(lambda: choice(string, obj, arr, bare))
    key = choice(string, chars_while(_ident))
    member = fmap(seq(key, ws(), lit(":"), ws(), value), lambda v: (v[0], v[4]))
    members = fmap(many(member, sep=sep), dict)
    obj = fmap(seq(lit("{"), ws(), members, ws(), lit("}")), lambda v: v[2])
    arr = fmap(seq(lit("["), ws(), many(value, sep=sep), ws(), lit("]")), lambda v: v[2])
    return members, value


class Gemma4(ToolFormat):
    """Gemma 4: ``<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>``."""

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        self.tools = list(tools)
        members, _ = _gemma4_values()

        def build(v: list[Any]) -> Call:
            name = v[1]
            schema = tool_schema(self.tools, name) or {}
            return Call(name=name, arguments=dumps_args(_typed(v[4], schema)))

        call = fmap(
            seq(lit("call:"), chars_while(_ident), ws(), lit("{"), fmap(seq(ws(), members, ws()), lambda v: v[1]), lit("}")),
            lambda v: build([v[0], v[1], None, None, v[4]]),
        )
        body = fmap(seq(ws(), many(call, sep=ws(), minimum=1), ws()), lambda v: v[1])
        self.sections = {"<|tool_call>": Section(body=body, ends=("<tool_call|>",))}


class FunctionGemma(ToolFormat):
    """FunctionGemma: ``<start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>``.
    Values between ``<escape>`` marks are decoded as JSON when they are JSON; the
    comma between arguments may be missing."""

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        def value(text: str) -> Any:
            try:
                return json.loads(text)
            except ValueError:
                return text

        arg = fmap(
            seq(chars_while(lambda c: c.isalnum() or c == "_"), lit(":<escape>"), take_until("<escape>"), lit("<escape>")),
            lambda v: (v[0], value(v[2])),
        )
        call = fmap(
            seq(
                lit("call:"),
                chars_while(lambda c: c.isalnum() or c == "_"),
                lit("{"),
                ws(),
                many(arg, sep=seq(ws(), opt(lit(",")), ws())),
                ws(),
                lit("}"),
            ),
            lambda v: [Call(name=v[1], arguments=dumps_args(dict(v[4])))],
        )
        self.sections = {
            "<start_function_call>": Section(body=call, ends=("<end_function_call>",))
        }
