"""Tool-call arguments cast by the request's tool schemas (``"5"`` for an integer parameter
is 5), and the calls of a parsed ``tool_calls`` value as (name, arguments JSON) pairs.
"""

from __future__ import annotations

import json
from typing import Any, Sequence


# ------------------------------------------------------------ schema casting
def schema_types(schema: Any) -> tuple[str, ...]:
    """The JSON types a parameter's schema allows (type lists, anyOf/oneOf, nullable)."""
    if not isinstance(schema, dict):
        return ()
    declared = schema.get("type")
    out = [declared] if isinstance(declared, str) else []
    if isinstance(declared, list):
        out += [t for t in declared if isinstance(t, str)]
    for union in ("anyOf", "oneOf"):
        for choice in schema.get(union) or []:
            out += schema_types(choice)
    if schema.get("nullable") and "null" not in out:
        out.append("null")
    return tuple(out)


def _cast(raw: str, types: tuple[str, ...]) -> Any:
    """A string argument cast to the first of ``types`` it reads as (else kept)."""
    for t in types:
        try:
            if t == "integer":
                return int(raw)
            if t == "number":
                x = float(raw)
                if x != x or x in (float("inf"), float("-inf")):
                    continue
                return int(x) if x.is_integer() and "." not in raw else x
            if t == "boolean" and raw.strip().lower() in ("true", "1", "false", "0"):
                return raw.strip().lower() in ("true", "1")
            if t == "null" and raw.strip() in ("null", "None"):
                return None
            if t in ("object", "array"):
                v = json.loads(raw)
                if isinstance(v, dict if t == "object" else list):
                    return v
        except ValueError:
            continue
    return raw


def cast_member(value: Any, types: tuple[str, ...]) -> Any:
    if not types:
        return value
    if isinstance(value, str):
        return _cast(value, types)
    if isinstance(value, list) and "array" not in types:  # merged duplicate tags
        return [_cast(v, types) if isinstance(v, str) else v for v in value]
    return value


def keeps_strings(types: tuple[str, ...]) -> bool:
    """A string value of a parameter with these types is never cast."""
    return all(t not in ("integer", "number", "boolean", "null", "object", "array") for t in types)


def tool_properties(tools: Sequence[Any] | None) -> dict[str, dict]:
    """Tool name -> its parameters' ``properties`` (the request's OpenAI tool dicts)."""
    out: dict[str, dict] = {}
    for tool in tools or []:
        if hasattr(tool, "model_dump"):
            tool = tool.model_dump(exclude_none=True)
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            props = params.get("properties") if isinstance(params, dict) else None
            out[fn["name"]] = props if isinstance(props, dict) else {}
    return out


def cast_calls(value: Any, props: dict[str, dict]) -> Any:
    if isinstance(value, list):
        return [cast_calls(v, props) for v in value]
    fn = value.get("function") if isinstance(value, dict) else None
    if not isinstance(fn, dict):
        return value
    name, arguments = fn.get("name"), fn.get("arguments")
    if isinstance(name, str) and isinstance(arguments, dict) and props.get(name):
        schema = props[name]
        for key, arg in arguments.items():
            if key in schema:
                arguments[key] = cast_member(arg, schema_types(schema[key]))
    return value


def _is_object_text(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def calls_of(value: Any) -> list[tuple[str, str]]:
    """(name, arguments text) of each call of a tool region's value; nothing when one is
    incomplete, or its arguments are not a JSON object (vLLM passes a string on as the
    arguments text, JSON or not; here that region is given back as content)."""
    out = []
    for item in value if isinstance(value, list) else [value]:
        fn = item.get("function") if isinstance(item, dict) else None
        if not isinstance(fn, dict):
            return []
        name, arguments = fn.get("name"), fn.get("arguments")
        if not isinstance(name, str) or not name:
            return []
        if isinstance(arguments, dict):
            out.append((name, json.dumps(arguments, ensure_ascii=False)))
        elif isinstance(arguments, str) and _is_object_text(arguments):
            out.append((name, arguments))
        else:
            return []
    return out
