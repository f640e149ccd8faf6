"""Streamed JSON call arguments: a tool region whose calls are JSON with the name and the
arguments object placed by the transform is walked as it arrives, so the call is announced
once its name is known and each argument is written as it completes (cast by the schema).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import regex

from vllm_pyfrontend.parsers.combinators import NEED, Fail, Ok, scan_json
from vllm_pyfrontend.parsers.response_template.casting import cast_member, keeps_strings, schema_types
from vllm_pyfrontend.parsers.response_template.template import Field
from vllm_pyfrontend.parsers.response_template.values import PLACEHOLDER


# ------------------------------------------------- streamed JSON call arguments
@dataclass(frozen=True, slots=True)
class _JsonCallShape:
    """Where a JSON tool region's name and arguments are: ``name_capture`` (a capture of
    the opener) or ``name_key`` (a member of the body's object); ``args_key`` (a member) or
    None (the body is the arguments object)."""

    name_capture: str | None
    name_key: str | None
    args_key: str | None


def json_call_shape(f: Field) -> _JsonCallShape | None:
    """The shape of a tool field whose calls can stream their arguments, or None."""
    if f.content != "json" or f.transform_each or f.join is not None:
        return None
    if any(f.args.get(k) for k in ("string_delims", "unquoted_keys", "allow_non_json")):
        return None
    t = f.transform
    fn = t.get("function") if isinstance(t, dict) else None
    if fn == "{content}":  # the body is the call object itself: {"name": ..., "arguments": {...}}
        fn = {"name": "{content.name}", "arguments": "{content.arguments}"}
        t = {**t, "function": fn}
    if not isinstance(fn, dict):
        return None
    name_p = PLACEHOLDER.fullmatch(fn.get("name", "")) if isinstance(fn.get("name"), str) else None
    args_p = PLACEHOLDER.fullmatch(fn.get("arguments", "")) if isinstance(fn.get("arguments"), str) else None
    if name_p is None or args_p is None:
        return None
    name_path, args_path = name_p.group(1).split("."), args_p.group(1).split(".")
    if args_path == ["content"]:
        args_key = None
    elif len(args_path) == 2 and args_path[0] == "content":
        args_key = args_path[1]
    else:
        return None
    if len(name_path) == 1 and name_path[0] != "content":
        name_capture, name_key = name_path[0], None
    elif len(name_path) == 2 and name_path[0] == "content" and args_key is not None:
        name_capture, name_key = None, name_path[1]
    else:
        return None
    # every other placeholder must be a capture or the same members (else the value may fail)
    allowed = {p.group(1) for p in (name_p, args_p)}

    def others(x: Any) -> bool:
        if isinstance(x, dict):
            return all(others(v) for v in x.values())
        if isinstance(x, list):
            return all(others(v) for v in x)
        m = PLACEHOLDER.fullmatch(x) if isinstance(x, str) else None
        return m is None or m.group(1) in allowed
    if not others(t):
        return None
    return _JsonCallShape(name_capture, name_key, args_key)


_WS = " \t\r\n"
_PLAIN = regex.compile(r'[^"\\\x00-\x1f]*')


def _skip_ws(s: str, k: int) -> int:
    """The first index at or after ``k`` that is not JSON whitespace (``len(s)`` if none)."""
    while k < len(s) and s[k] in _WS:
        k += 1
    return k


def _scan(s: str, k: int) -> Ok | None:
    """The JSON value at ``s[k]``; None while it may still complete; `_Dead` when it cannot."""
    r = scan_json(s, k, False)
    if isinstance(r, Fail):
        raise _Dead
    return None if r is NEED else r


def escape(text: str) -> str:
    """JSON string escaping without the quotes, as ``json.dumps(..., ensure_ascii=False)``
    writes it (per character: the escape of a prefix is a prefix of the escape). Not
    tool.streaming's: this module is imported by the tool package's registry."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


class JsonCallWalker:
    """Reads a partial JSON tool body: the call's name once known, and the arguments as
    vLLM's final text will write them (``{"k": v, ...}``, each member cast by the schema)
    as far as it is certain."""

    def __init__(self, shape: _JsonCallShape, captured_name: str | None, props: dict[str, dict]) -> None:
        self.shape = shape
        self.name: str | None = captured_name
        self.props = props
        self.args_text = ""  # the certain prefix of the final arguments text
        self.args_begun = False
        self.open_string = False  # args_text ends inside a string value
        self.dead = False  # the body cannot be a call of this shape
        self._i = 0
        # "start"; the outer object: "top_first", "top_next", "top_key"; the arguments object:
        # "args_first", "args_next", "args_key", "args_str" (a string value streaming); "done"
        self._state = "start"
        self._pending: list[tuple[str, Any]] = []  # members read before the name was known
        self._n_members = 0
        self._closed_args = False
        self._str_key: str | None = None  # the open string value streaming (state "args_str")
        self._str_pos = 0  # where its unread text starts

    def _schema_types(self, key: str) -> tuple[str, ...]:
        schema = self.props.get(self.name or "", {})
        return schema_types(schema[key]) if key in schema else ()

    def closers(self) -> str:
        """What completes ``args_text`` into valid JSON."""
        if self._closed_args and self.name is not None:
            return ""
        return ('"' if self.open_string else "") + ("}" if self.args_text else "{}")

    def advance(self, s: str) -> None:
        try:
            self._advance(s)
        except (_Dead, ValueError):
            self.dead = True

    def _ws(self, s: str) -> int:
        i = self._i
        while i < len(s) and s[i] in _WS:
            i += 1
        self._i = i
        return i

    def _advance(self, s: str) -> None:
        n = len(s)
        while not self.dead:
            st = self._state
            i = self._ws(s)
            if i >= n:
                return
            c = s[i]
            if st == "start":
                if c != "{":
                    raise _Dead
                self._i = i + 1
                if self.shape.args_key is None:
                    self.args_begun = True
                    self._state = "args_first"
                else:
                    self._state = "top_first"
            elif st in ("top_first", "top_next"):
                if c == "}":
                    self._i = i + 1
                    self._state = "done"
                    continue
                self._to_key(st == "top_next", c, i, "top_key")
            elif st in ("top_key", "args_key"):
                key, j = self._key(s, i)
                if key is None:
                    return
                member = self._top_member if st == "top_key" else self._args_member
                if not member(s, key, j):
                    return
            elif st in ("args_first", "args_next"):
                if c == "}":
                    self._i = i + 1
                    self._closed_args = True
                    if self.name is not None:
                        self._write_close()
                    self._state = "top_next" if self.shape.args_key is not None else "done"
                    continue
                self._to_key(st == "args_next", c, i, "args_key")
            elif st == "args_str":
                self._string(s)
                if self._state == "args_str":
                    return
            elif st == "done":
                raise _Dead  # text after the object
            else:  # pragma: no cover
                raise _Dead

    def _to_key(self, after_member: bool, c: str, i: int, key_state: str) -> None:
        """On to a member's key (state ``key_state``); after a member, past the ``,`` that
        must come first (the loop skips the whitespace after it)."""
        if after_member:
            if c != ",":
                raise _Dead
            self._i = i + 1
        self._state = key_state

    def _top_member(self, s: str, key: str, j: int) -> bool:
        """A member of the outer object, its value at ``s[j]``: the arguments object is
        entered, the name read, any other member passed over. False: not complete yet."""
        if key == self.shape.args_key and not self.args_begun:
            if s[j] != "{":
                raise _Dead  # arguments that are not an object: whole at close
            self._i = j + 1
            self.args_begun = True
            self._state = "args_first"
            return True
        r = _scan(s, j)
        if r is None:
            return False
        if key == self.shape.name_key and self.name is None:
            value = json.loads(r.value)
            if not isinstance(value, str) or not value:
                raise _Dead
            self.name = value
            self._flush_pending()
        self._i = r.end
        self._state = "top_next"
        return True

    def _args_member(self, s: str, key: str, j: int) -> bool:
        """A member of the arguments object, its value at ``s[j]``: a string that is never cast
        streams as it comes, any other value is written once complete. False: not complete yet."""
        if s[j] == '"' and self.name is not None and keeps_strings(self._schema_types(key)):
            self._open_string(key, j)
            return True
        r = _scan(s, j)
        if r is None:
            return False
        self._member(key, json.loads(r.value))
        self._i = r.end
        self._state = "args_next"
        return True

    def _key(self, s: str, i: int) -> tuple[str | None, int]:
        """A member's key and where its value starts (past the whitespace: a character of
        ``s``); None: not complete yet."""
        if s[i] != '"':
            raise _Dead
        r = _scan(s, i)
        if r is None:
            return None, i
        j = _skip_ws(s, r.end)
        if j >= len(s):
            return None, i
        if s[j] != ":":
            raise _Dead
        j = _skip_ws(s, j + 1)
        if j >= len(s):
            return None, i
        return json.loads(r.value), j

    def _head(self, key: str) -> str:
        sep = "{" if self._n_members == 0 else ", "
        self._n_members += 1
        return sep + json.dumps(key, ensure_ascii=False) + ": "

    def _member(self, key: str, value: Any) -> None:
        if self.name is None:
            self._pending.append((key, value))
            return
        value = cast_member(value, self._schema_types(key))
        self.args_text += self._head(key) + json.dumps(value, ensure_ascii=False)

    def _flush_pending(self) -> None:
        pending, self._pending = self._pending, []
        for key, value in pending:
            value = cast_member(value, self._schema_types(key))
            self.args_text += self._head(key) + json.dumps(value, ensure_ascii=False)
        if self._closed_args:
            self._write_close()

    def _write_close(self) -> None:
        self.args_text += ("{}" if self._n_members == 0 else "}")

    def _open_string(self, key: str, k: int) -> None:
        """A string value that streams (never cast) begins at ``s[k]`` (its quote)."""
        self._str_key = key
        self._str_pos = k + 1
        self._str_parts: list[str] = []
        self.args_text += self._head(key) + '"'
        self.open_string = True
        self._state = "args_str"

    def _string(self, s: str) -> None:
        """Extend the open string value as far as its text is certain (whole characters,
        whole escapes; a \\u high surrogate with its pair); close it at its quote."""
        n = len(s)
        start = i = self._str_pos
        while i < n:
            i = _PLAIN.match(s, i).end()
            if i >= n:
                break
            c = s[i]
            if c == '"':
                self._str_piece(s[start:i])
                self.args_text += '"'
                self._str_key = None
                self.open_string = False
                self._i = i + 1
                self._state = "args_next"
                return
            if c != "\\":
                raise _Dead  # a control character: not JSON
            if i + 1 >= n:
                break
            if s[i + 1] != "u":
                if s[i + 1] not in '"\\/bfnrt':
                    raise _Dead
                i += 2
                continue
            if i + 6 > n:
                break
            code = int(s[i + 2 : i + 6], 16)  # ValueError: not JSON (advance() marks it dead)
            if 0xD800 <= code <= 0xDBFF and i + 12 > n:
                break  # wait for the low surrogate
            i += 6
        self._str_piece(s[start:i])
        self._str_pos = i

    def _str_piece(self, raw: str) -> None:
        if "\\" not in raw:  # plain characters (no quote or control character): written as they are
            self.args_text += raw
        else:
            self.args_text += escape(json.loads('"' + raw + '"'))


class _Dead(Exception):
    pass
