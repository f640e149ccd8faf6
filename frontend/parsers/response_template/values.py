"""A field's value from its text: the ``content`` parsers (``text``, ``int``, ``float``,
``bool``, ``json`` with its dialect knobs, ``xml-inline``, ``kv-lines``) and the
``transform`` that places the value (and the opener's captures) in a JSON shape.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import regex

if TYPE_CHECKING:
    from vllm_pyfrontend.parsers.response_template.template import Field


# ------------------------------------------------------------- content parsers
def _text(text: str, args: dict) -> str:
    return text.strip() if args.get("strip", True) else text


def _bool(text: str, args: dict) -> bool:
    return _text(text, args).lower() in ("true", "1")


_SENTINELS = ("\x01", "\x02")


def _json(text: str, args: dict) -> Any:
    delims = args.get("string_delims", [])
    if delims and any(s in text for s in _SENTINELS):
        raise ValueError("json: input contains reserved sentinel characters")
    work = text
    pulled: list[str] = []
    for open_d, close_d in delims:
        def pull(m: Any) -> str:
            pulled.append(m.group(1))
            return f"\x01{len(pulled) - 1}\x02"

        work = regex.sub(regex.escape(open_d) + r"(.*?)" + regex.escape(close_d), pull, work, flags=regex.DOTALL)
    if args.get("unquoted_keys", False):
        work = regex.sub(r"(?<=[{,])(\w+):", r'"\1":', work)
    for i, s in enumerate(pulled):
        work = work.replace(f"\x01{i}\x02", json.dumps(s))
    try:
        return json.loads(work)
    except json.JSONDecodeError as e:
        if args.get("allow_non_json"):
            return _text(text, args)
        raise ValueError(f"json: could not parse {text!r}: {e}") from e


def _sub(raw: str, value_parser: dict | None) -> Any:
    if value_parser is None:
        return raw
    return _parse(raw, value_parser.get("name", "text"), value_parser.get("args", {}))


def _xml_inline(text: str, args: dict) -> dict:
    pattern = args.get("tag_pattern")
    if pattern is None:
        raise ValueError("xml-inline: 'tag_pattern' content_arg is required")
    merge = args.get("merge_duplicates", False)
    out: dict[str, Any] = {}
    for m in regex.finditer(pattern, text, flags=regex.DOTALL):
        groups = m.groupdict()
        key = groups.get("key")
        if key is None:
            raise ValueError("xml-inline: tag_pattern must have a named group 'key'")
        value = _sub(groups.get("value", ""), args.get("value_parser"))
        if key in out and merge:
            if not isinstance(out[key], list):
                out[key] = [out[key]]
            out[key].append(value)
        else:
            out[key] = value
    return out


def _kv_lines(text: str, args: dict) -> dict:
    kv_sep = args.get("kv_sep", ":")
    out: dict[str, Any] = {}
    for line in text.split(args.get("line_sep", "\n")):
        line = _text(line, args)
        if not line or kv_sep not in line:
            continue
        k, v = line.split(kv_sep, 1)
        out[_text(k, args)] = _sub(_text(v, args), args.get("value_parser"))
    return out


CONTENT_PARSERS = {
    "text": _text,
    "int": lambda t, a: int(_text(t, a)),
    "float": lambda t, a: float(_text(t, a)),
    "bool": _bool,
    "json": _json,
    "xml-inline": _xml_inline,
    "kv-lines": _kv_lines,
}
#: parsers whose chunks are the value itself (the others are parsed when the region closes)
_TEXTUAL = frozenset(("text", "int", "float", "bool"))


def _parse(text: str, name: str, args: dict) -> Any:
    return CONTENT_PARSERS[name](text, args)


PLACEHOLDER = regex.compile(r"\{(\w+(?:\.\w+)*)\}")


def _apply(t: Any, scope: dict) -> Any:
    if isinstance(t, dict):
        return {k: _apply(v, scope) for k, v in t.items()}
    if isinstance(t, list):
        return [_apply(v, scope) for v in t]
    if not isinstance(t, str):
        return t
    m = PLACEHOLDER.fullmatch(t)
    if m is None:
        return t
    root, *keys = m.group(1).split(".")
    if root not in scope:
        raise KeyError(f"transform placeholder {t!r} is not defined")
    value = scope[root]
    for key in keys:
        if not isinstance(value, dict):
            raise ValueError(f"transform placeholder {t!r} cannot index into {type(value).__name__}")
        if key not in value:
            raise ValueError(f"transform placeholder {t!r} is missing key {key!r}")
        value = value[key]
    return value


def field_value(body: str, f: Field, captures: dict) -> Any:
    value = _parse(body, f.content, f.args)
    if f.transform is None:
        return value
    if f.transform_each:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise ValueError(f"Field '{f.name}': transform_each requires a list of objects")
        return [_apply(f.transform, {**captures, **item}) for item in value]
    return _apply(f.transform, {**captures, "content": value})
