"""Tool-call argument values: a tool's schema, strict JSON, and text parameters typed by it.

Formats that write each parameter as text (XML-style tags: xml_calls.py,
step.py, minimax.py) must give the client the
JSON value the tool's schema declares, so ``<n>5</n>`` becomes ``5`` for an
integer parameter and stays ``"5"`` for a string one. `coerce_value` does that
per parameter from `schema_types`; `loads_strict` is ``json.loads`` without
Python's NaN / Infinity, which are not JSON. They live apart from the
streaming engine in base.py: they type values, they do not find calls.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from vllm_pyfrontend.parsers.tool.schema_values import tool_schema
from vllm_pyfrontend.parsers.tool.streaming import dumps_value


def tool_properties(tools: Sequence[Any], name: str) -> dict[str, Any]:
    """The JSON-schema properties of tool ``name`` (OpenAI tool dicts); {} when it has none."""
    props = (tool_schema(tools, name) or {}).get("properties")
    return props if isinstance(props, dict) else {}


def schema_types(schema: Any) -> set[str]:
    """The JSON types a parameter schema allows: ``type`` (a name or a list),
    the branches of ``anyOf`` / ``oneOf`` / ``allOf`` (Pydantic's Optional),
    the types of ``enum`` / ``const`` values, and the types implied by
    ``items`` (array) and ``properties`` (object). Empty: no information."""
    if not isinstance(schema, dict):
        return set()
    types: set[str] = set()
    t = schema.get("type")
    if isinstance(t, str):
        types.add(t)
    elif isinstance(t, list):
        types.update(x for x in t if isinstance(x, str))
    values = list(schema["enum"]) if isinstance(schema.get("enum"), list) else []
    if "const" in schema:
        values.append(schema["const"])
    for v in values:
        types.add(_json_type(v))
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            for b in branches:
                types |= schema_types(b)
    if not types:
        if "items" in schema or "prefixItems" in schema:
            types.add("array")
        if "properties" in schema or "additionalProperties" in schema:
            types.add("object")
    return types


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_strict(text: str) -> Any:
    """``json.loads`` without Python's NaN / Infinity extensions."""
    return json.loads(text, parse_constant=_no_constants)


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def is_string_param(schema: Any) -> bool:
    """The value is text whatever it looks like (no schema counts as text)."""
    types = schema_types(schema)
    return not types or types == {"string"}


def coerce_value(text: str, schema: Any) -> Any:
    """An XML-style parameter's text -> the JSON value its schema says.

    Tried in order null, integer, number, boolean (``true``/``false``, also
    ``1``/``0``), object, array, then string; the first the text fits wins.
    Text that fits none of a schema without ``string`` is decoded as JSON if
    it can be, else kept as text.
    """
    types = schema_types(schema)
    if not types or types == {"string"}:
        return text
    t = text.strip()
    if "null" in types and t == "null":
        return None
    if "integer" in types:
        try:
            v = loads_strict(t)
        except ValueError:
            v = None
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, float) and v.is_integer() and "number" not in types:
            return int(v)
    if "number" in types:
        try:
            v = loads_strict(t)
        except ValueError:
            v = None
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
    if "boolean" in types:
        low = t.lower()
        if low in ("true", "1"):
            return True
        if low in ("false", "0"):
            return False
    for kind, cls in (("object", dict), ("array", list)):
        if kind in types:
            try:
                v = loads_strict(t)
            except ValueError:
                continue
            if isinstance(v, cls):
                return v
    if "string" in types:
        return text
    try:
        return loads_strict(t)
    except ValueError:
        return text


def coerce_params(params: dict[str, str], props: dict[str, Any]) -> dict[str, Any]:
    """XML-style string values -> JSON values where the tool schema says so
    (`coerce_value` per parameter)."""
    return {key: coerce_value(value, props.get(key)) for key, value in params.items()}


def dumps_args(args: dict[str, Any]) -> str:
    return dumps_value(args)
