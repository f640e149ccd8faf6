"""Schema-typed values for formats whose parameters arrive as text (tagged_params.py, gemma.py).

`schema_types` reads the types a JSON schema allows (``type`` as a string or a
list, types implied by ``enum``, and ``anyOf``/``oneOf``/``allOf`` alternatives);
`typed_value` turns a parameter's text into the JSON value of the first type
that accepts it, in the order null, integer, number, boolean, object, array,
string. Text that no declared type accepts is decoded as JSON when it is JSON
and is kept as text otherwise. This is the order vLLM's parsers use.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

_ALIASES = {
    "str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
    "int": "integer", "int32": "integer", "int64": "integer", "uint": "integer",
    "uint32": "integer", "uint64": "integer", "long": "integer", "short": "integer",
    "unsigned": "integer", "float": "number", "float32": "number", "float64": "number",
    "double": "number", "bool": "boolean", "binary": "boolean", "dict": "object",
    "map": "object", "list": "array",
}  # fmt: skip

_ORDER = ("null", "integer", "number", "boolean", "object", "array", "string")


#: the JSON type of an ``enum`` member, by its Python class (bool before int: a bool is an int)
_ENUM_TYPES = (
    (type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"),
    (str, "string"), (list, "array"), (dict, "object"),
)  # fmt: skip


def normalize_type(name: str) -> str:
    key = name.strip().lower()
    return _ALIASES.get(key, key)


def schema_types(schema: Any) -> set[str]:
    """Every type ``schema`` allows (normalised); ``{"string"}`` when it says none."""
    types: set[str] = set()
    if not isinstance(schema, dict):
        return {"string"}
    t = schema.get("type")
    if isinstance(t, str):
        types.add(normalize_type(t))
    elif isinstance(t, list):
        types.update(normalize_type(x) for x in t if isinstance(x, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        for v in enum:
            kind = next((name for cls, name in _ENUM_TYPES if isinstance(v, cls)), None)
            if kind is not None:
                types.add(kind)
    for key in ("anyOf", "oneOf", "allOf"):
        alts = schema.get(key)
        if isinstance(alts, list):
            for alt in alts:
                types |= schema_types(alt)
    return types or {"string"}


def _finite(v: Any) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, list):
        return all(_finite(x) for x in v)
    if isinstance(v, dict):
        return all(_finite(x) for x in v.values())
    return True


def typed_value(text: str, types: set[str] | Sequence[str]) -> Any:
    """``text`` as the first of ``types`` that accepts it (see module docstring)."""
    types = {normalize_type(t) for t in types}
    for t in _ORDER:
        if t not in types:
            continue
        if t == "null":
            if text.lower() == "null":
                return None
        elif t == "string":
            return text
        elif t == "integer":
            try:
                return int(text)
            except ValueError:
                pass
        elif t == "number":
            try:
                val = float(text)
            except ValueError:
                continue
            if math.isfinite(val):
                return int(val) if val == int(val) else val
        elif t == "boolean":
            low = text.strip().lower()
            if low in ("true", "1"):
                return True
            if low in ("false", "0"):
                return False
        else:  # object, array
            try:
                parsed = json.loads(text)
            except ValueError:
                continue
            if _finite(parsed):
                return parsed
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return parsed if _finite(parsed) else text


def tool_schema(tools: Sequence[Any], name: str) -> dict[str, Any] | None:
    """The parameters schema of tool ``name`` (OpenAI tool dicts); None: no such tool."""
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else getattr(tool, "function", None)
        if fn is None:
            continue
        fn_name = fn.get("name") if isinstance(fn, dict) else getattr(fn, "name", None)
        if fn_name != name:
            continue
        params = fn.get("parameters") if isinstance(fn, dict) else getattr(fn, "parameters", None)
        return params if isinstance(params, dict) else {}
    return None


def tool_names(tools: Sequence[Any]) -> set[str]:
    out = set()
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else getattr(tool, "function", None)
        name = fn.get("name") if isinstance(fn, dict) else getattr(fn, "name", None)
        if isinstance(name, str):
            out.add(name)
    return out


def param_schema(tools: Sequence[Any], name: str, key: str) -> Any:
    schema = tool_schema(tools, name) or {}
    props = schema.get("properties")
    return props.get(key) if isinstance(props, dict) else None
