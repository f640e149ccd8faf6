"""Formats whose parameters are tagged text, typed by the tool's schema:
hy_v3, hy_v4, k2_horizon (``<arg_key>``/``<arg_value>`` kin), dots (``<invoke>``);
deepseek.py builds deepseek_v41 (spaced DSML) from `TypedFormat`.

Each parameter's text becomes a JSON value through `schema_values.typed_value`,
with the types the request's tool declares for it.
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
    tag,
    take_until,
    ws,
    ws_list,
)
from vllm_pyfrontend.parsers.tool.arg_values import dumps_args
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat
from vllm_pyfrontend.parsers.tool.json_grammar import json_members
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.schema_values import (
    param_schema,
    schema_types,
    tool_names,
    tool_schema,
    typed_value,
)
from vllm_pyfrontend.parsers.tool.xml_calls import XmlParam, XmlTyping, call_element, xml_args, xml_call


def tagged_name(text: str) -> str:
    """A function name as these formats accept it (no whitespace, brackets or quotes)."""
    name = text.strip()
    if not name or any(c.isspace() or c in "<>\"'{}" for c in name):
        raise ValueError("bad name")
    return name


class TypedFormat(ToolFormat):
    """A format whose grammar depends on the request's tools (values typed by their schemas)."""

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        self.tools = list(tools)
        self.sections = self.build()

    def build(self) -> dict[str, Section]:  # pragma: no cover - abstract
        raise NotImplementedError

    def value(self, name: str, key: str, text: str) -> Any:
        return typed_value(text, schema_types(param_schema(self.tools, name, key)))


class _SchemaTyped(XmlTyping):
    """Values typed by `schema_values.typed_value`; streamed while the schema
    says text only."""

    def __init__(self, tools: Sequence[Any]) -> None:
        self.tools = list(tools)

    def is_string(self, name: str, key: str, meta: Any) -> bool:
        return schema_types(param_schema(self.tools, name, key)) == {"string"}

    def convert(self, name: str, key: str, meta: Any, text: str) -> Any:
        return typed_value(text, schema_types(param_schema(self.tools, name, key)))


# ------------------------------------------------------------ hy_v3 / hy_v4
class HyV3(TypedFormat):
    """Hunyuan (HY) V3::

        <tool_calls><tool_call>get_weather<tool_sep>
        <arg_key>city</arg_key>
        <arg_value>Paris</arg_value>
        </tool_call></tool_calls>
    """

    sep: str | None = "<tool_sep>"
    #: an unclosed ``<tool_calls>`` at the end of output counts (V4: content)
    eof_closes = True

    def build(self) -> dict[str, Section]:
        typing = _SchemaTyped(self.tools)
        param = XmlParam(
            fmap(
                seq(lit("<arg_key>"), take_until("</arg_key>"), lit("</arg_key>"), ws(), lit("<arg_value>")),
                lambda v: v[1],
            ),
            "</arg_value>",
        )
        if self.sep is not None:
            head = fmap(seq(take_until(self.sep), lit(self.sep)), lambda v: v[0])
        else:
            head = take_until("<arg_key>", "</tool_call>")
        call = call_element(
            (lit("<tool_call>"),),
            tag("name", fmap(head, tagged_name)),
            (),
            xml_args(param, typing),
            "</tool_call>",
            xml_call(typing),
        )
        return {
            "<tool_calls>": Section(
                body=ws_list(call), ends=("</tool_calls>",), eof_closes=self.eof_closes
            )
        }


class HyV4(HyV3):
    """Hunyuan (HY) V4: as V3 without ``<tool_sep>`` (the name runs up to the first
    ``<arg_key>``); an unclosed block is content, as in vLLM's strict V4 parser,
    unless a call in it was already announced: arguments stream as generated, so
    a block that turns out malformed after that keeps its announced calls
    (completed with valid JSON) and the rest is content (the commit rule, pinned
    in tests/parsers/cases/committed_streamed_args.py)."""

    sep = None
    eof_closes = False


# ---------------------------------------------------------------- k2_horizon
class K2Horizon(TypedFormat):
    """K2 Horizon (IFM XML)::

        <ifm|tool_calls><ifm|tool_call>get_weather
        <ifm|arg_key>city</ifm|arg_key><ifm|arg_value>Paris</ifm|arg_value>
        </ifm|tool_call></ifm|tool_calls>

    An ``<ifm|arg_type>`` tag between key and value (the typed variant) picks
    among the schema's types; a JSON call ``{"name": ..., "arguments": {...}}``
    in ``<ifm|tool_call>`` is the third variant. All three are accepted (vLLM
    picks one by the request's ``tool_call_format`` template kwarg, which a tool
    parser here is not given). With tools in the request, the name must be one.
    """

    def build(self) -> dict[str, Section]:
        known = tool_names(self.tools)

        def build_json(members: dict[str, str]) -> Call:
            raw_name = members.get("name")
            if raw_name is None or not raw_name.startswith('"'):
                raise ValueError("no name")
            name = tagged_name(json.loads(raw_name))
            if known and name not in known:
                raise ValueError("unknown tool")
            raw = members.get("arguments", "{}")
            if not raw.startswith("{"):
                raise ValueError("arguments must be an object")
            args = {}
            for key, value in json.loads(raw).items():
                schema = param_schema(self.tools, name, key)
                if isinstance(schema, dict):
                    types = schema_types(schema)
                    if isinstance(value, str):
                        value = typed_value(value, types)
                    elif types == {"string"}:
                        value = json.dumps(value, ensure_ascii=False)
                args[key] = value
            return Call(name=name, arguments=dumps_args(args))

        typing = _K2Typing(self.tools)
        head = fmap(
            seq(
                lit("<ifm|arg_key>"),
                fmap(take_until("</ifm|arg_key>"), _key),
                lit("</ifm|arg_key>"),
                ws(),
                opt(
                    fmap(
                        seq(lit("<ifm|arg_type>"), take_until("</ifm|arg_type>"), lit("</ifm|arg_type>"), ws()),
                        lambda v: v[1].strip(),
                    )
                ),
                lit("<ifm|arg_value>"),
            ),
            lambda v: (v[1], v[4]),
        )
        param = XmlParam(head, "</ifm|arg_value>")
        make = xml_call(typing)

        def checked(text: str) -> str:
            name = tagged_name(text)
            if known and name not in known:
                raise ValueError("unknown tool")
            return name

        def build_xml(v: list[Any]) -> Call:
            keys = [k for k, _, _ in v[2]]
            if len(set(keys)) != len(keys):
                raise ValueError("repeated argument name")
            return make(v[1], v[2])

        xml_call_ = tag(
            "call",
            fmap(
                seq(
                    lit("<ifm|tool_call>"),
                    tag("name", fmap(take_until("<ifm|arg_key>", "</ifm|tool_call>"), checked)),
                    xml_args(param, typing),
                    ws(),
                    lit("</ifm|tool_call>"),
                ),
                build_xml,
            ),
        )
        json_call = fmap(
            seq(lit("<ifm|tool_call>"), ws(), fmap(json_members(), build_json), ws(), lit("</ifm|tool_call>")),
            lambda v: v[2],
        )
        call = choice(json_call, xml_call_)
        return {
            "<ifm|tool_calls>": Section(
                body=ws_list(call), ends=("</ifm|tool_calls>",), eof_closes=False
            )
        }


def _key(text: str) -> str:
    key = text.strip()
    if not key:
        raise ValueError("missing argument name")
    return key


class _K2Typing(XmlTyping):
    """K2 Horizon: an ``<ifm|arg_type>`` (meta) picks among the schema's types;
    without a schema it is the type. Text values keep their whitespace, others
    are stripped; a value streams when its type is text only."""

    def __init__(self, tools: Sequence[Any]) -> None:
        self.tools = list(tools)

    def types(self, name: str, key: str, meta: Any) -> set[str] | None:
        """The value's types; None: kept as written (``any``)."""
        schema = param_schema(self.tools, name, key)
        types = schema_types(schema)
        base = meta.split("[", 1)[0].strip().lower() if meta else None
        if isinstance(schema, dict):
            if base in types and len(types) > 1:
                types = {base}
        elif base == "any":
            return None
        elif base:
            types = {base}
        return types

    def is_string(self, name: str, key: str, meta: Any) -> bool:
        types = self.types(name, key, meta)
        return types is None or types == {"string"}

    def convert(self, name: str, key: str, meta: Any, text: str) -> Any:
        types = self.types(name, key, meta)
        if types is None:
            return text
        return typed_value(text if "string" in types else text.strip(), types)


# ---------------------------------------------------------------------- dots
def _attr(stop: str = ">") -> P:
    """An attribute value up to ``>``: quotes around it are removed."""

    def unquote(text: str) -> str:
        text = text.strip()
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
            return text[1:-1]
        return text

    return fmap(take_until(stop, minimum=1), unquote)


def _dots_value(text: str, schema_type: Any) -> Any:
    """dots.llm's own conversion: the first non-null declared type decides."""
    if text.lower() == "null":
        return None
    if isinstance(schema_type, list):
        schema_type = next((t for t in schema_type if t != "null"), "string")
    t = str(schema_type).lower()
    if t in ("string", "str", "text"):
        return text
    if t in ("integer", "int"):
        try:
            return int(text)
        except ValueError:
            return text
    if t in ("number", "float"):
        try:
            f = float(text)
        except ValueError:
            return text
        return int(f) if f.is_integer() else f
    if t in ("boolean", "bool"):
        return text.lower() in ("true", "1")
    try:
        return json.loads(text)
    except ValueError:
        return text


def _resolve_type(schema: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    if not isinstance(schema, dict) or depth > 10:
        return None
    if "type" in schema:
        return schema["type"]
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _resolve_type(defs.get(ref.rsplit("/", 1)[-1]), defs, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        alts = schema.get(key)
        if isinstance(alts, list):
            for alt in alts:
                if isinstance(alt, dict) and alt.get("type") == "null":
                    continue
                found = _resolve_type(alt, defs, depth + 1)
                if found is not None:
                    return found
    return None


class Dots(TypedFormat):
    """dots.llm::

        <dots_function_call>
        <invoke name="search">
        <parameter name="query">weather in Shanghai</parameter>
        </invoke>
        </dots_function_call>

    or a JSON object ``{"name": ..., "arguments": {...}}`` in the wrapper. The
    name must be one of the request's tools. Values are stripped, then typed by
    dots.llm's own rule; string values stream (`xml_args`).
    """

    def build(self) -> dict[str, Section]:
        typing = _DotsTyping(self)
        head = fmap(
            seq(lit("<parameter"), ws(1), lit("name"), ws(), lit("="), ws(), _attr(), lit(">"), ws()),
            lambda v: v[6],
        )
        # leading whitespace is eaten by the head, trailing whitespace held
        param = XmlParam(
            head, "</parameter>", stops=("</invoke>", "</dots_function_call>"), hold=lambda v: len(v.rstrip())
        )
        invoke = call_element(
            (lit("<invoke"), ws(1), lit("name"), ws(), lit("="), ws()),
            tag("name", fmap(_attr(), lambda n: tagged_name(self._check(n)))),
            (lit(">"),),
            xml_args(param, typing),
            "</invoke>",
            xml_call(typing),
        )
        as_json = fmap(json_members(), self._json_call)
        body = fmap(
            seq(ws(), choice(many(invoke, sep=ws(), minimum=1), fmap(as_json, lambda c: [c])), ws()),
            lambda v: v[1],
        )
        return {"<dots_function_call>": Section(body=body, ends=("</dots_function_call>",))}

    def param_type(self, name: str, key: str) -> Any:
        schema = tool_schema(self.tools, name) or {}
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        defs = schema.get("$defs") if isinstance(schema.get("$defs"), dict) else {}
        return (_resolve_type(props[key], defs) if key in props else None) or "string"

    def _check(self, name: str) -> str:
        if name not in tool_names(self.tools):
            raise ValueError("not one of the request's tools")
        return name

    def _json_call(self, members: dict[str, str]) -> Call:
        raw_name = members.get("name")
        if raw_name is None or not raw_name.startswith('"'):
            raise ValueError("no name")
        name = self._check(json.loads(raw_name))
        raw = members.get("arguments", members.get("parameters"))
        if raw is None or raw == "null":
            return Call(name=name, arguments="{}")
        if not raw.startswith("{"):
            raise ValueError("arguments must be an object")
        return Call(name=name, arguments=raw)


class _DotsTyping(XmlTyping):
    """dots.llm: the first non-null declared type decides (`_dots_value`); a
    value streams while that type is text and it cannot be ``null``."""

    def __init__(self, fmt: Dots) -> None:
        self.fmt = fmt

    def is_string(self, name: str, key: str, meta: Any) -> bool:
        t = self.fmt.param_type(name, key)
        if isinstance(t, list):
            t = next((x for x in t if x != "null"), "string")
        return str(t).lower() in ("string", "str", "text")

    def streams(self, name: str, key: str, meta: Any, raw: str) -> bool:
        return self.is_string(name, key, meta) and not "null".startswith(raw.strip().lower())

    def convert(self, name: str, key: str, meta: Any, text: str) -> Any:
        return _dots_value(text.strip(), self.fmt.param_type(name, key))


register_tool_parser("hy_v3", lambda tools: HyV3(tools))
register_tool_parser("hy_v4", lambda tools: HyV4(tools))
register_tool_parser("k2_horizon", lambda tools: K2Horizon(tools))
register_tool_parser("dots", lambda tools: Dots(tools))
