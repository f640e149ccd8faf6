"""The JSON call object shared by the JSON-bodied formats (json_calls.py,
deepseek.py, kimi.py, channels.py, forced.py).

Arguments are the model's own JSON text (the raw slice found by the JSON
scanner), never decoded and re-encoded: what the model wrote is what the
client gets, whitespace and escapes included.
"""

from __future__ import annotations

import json

from vllm_pyfrontend.parsers.combinators import (
    NEED,
    Fail,
    Ok,
    P,
    Probe,
    Result,
    fmap,
    json_value,
    lit,
    many,
    scan_json,
    seq,
    tag,
    ws,
)
from vllm_pyfrontend.parsers.tool.base import Call
from vllm_pyfrontend.parsers.tool.streaming import json_args_partial


def json_members() -> P:
    """A JSON object as ``{key: raw value text}`` (keys decoded, values raw)."""
    member = fmap(
        seq(json_value('"'), ws(), lit(":"), ws(), json_value(), ws()),
        lambda v: (json.loads(v[0]), v[4]),
    )
    return fmap(
        seq(lit("{"), ws(), many(member, sep=seq(lit(","), ws())), lit("}")),
        lambda v: dict(v[2]),
    )


def _args_from_raw(raw: str | None) -> str:
    """The arguments member: an object as written, a JSON string holding an
    object decoded once (some models double-encode), absent -> ``{}``."""
    if raw is None:
        return "{}"
    if raw.startswith("{"):
        return raw
    if raw.startswith('"'):
        inner = json.loads(raw)
        try:
            if isinstance(json.loads(inner), dict):
                return inner
        except ValueError:
            pass
    raise ValueError("arguments must be a JSON object")


_WS = " \t\r\n"


class _CallObject(P):
    """``{"name": "...", "<arg key>": {...}, ...}`` -> Call, scanning member by
    member so that a partial object reports its name and arguments so far
    (the first ``name`` member and the first member named by ``arg_keys``
    count; other members are ignored). ``strict``: the arguments member is
    required and must be an object as written (no double-encoded string);
    ``check(name)`` rejects a name (raises ValueError) before it is announced;
    ``name_keys``: the members that may hold the name; without ``encoded`` the
    arguments must be an object as written (optional unless ``strict``)."""

    __slots__ = ("arg_keys", "strict", "check", "name_keys", "encoded")

    def __init__(
        self,
        arg_keys: tuple[str, ...],
        strict: bool = False,
        check=None,
        name_keys: tuple[str, ...] = ("name",),
        encoded: bool = True,
    ) -> None:
        self.arg_keys = arg_keys
        self.strict = strict
        self.check = check
        self.name_keys = name_keys
        self.encoded = encoded and not strict

    def parse(self, s: str, pos: int, eof: bool, pr: Probe | None = None) -> Result:
        n = len(s)
        if pos >= n:
            return Fail(pos) if eof else NEED
        if s[pos] != "{":
            return Fail(pos)
        name: str | None = None
        args_raw: str | None = None
        i = pos + 1
        first = True
        while True:
            while i < n and s[i] in _WS:
                i += 1
            if i >= n:
                return self._need(s, name, args_raw, -1, eof, pr)
            if first and s[i] == "}":
                i += 1
                break
            first = False
            r = scan_json(s, i, eof)
            if r is NEED:
                return self._need(s, name, args_raw, -1, eof, pr)
            if isinstance(r, Fail) or s[i] != '"':
                return r if isinstance(r, Fail) else Fail(i)
            key = json.loads(r.value)
            i = r.end
            while i < n and s[i] in _WS:
                i += 1
            if i >= n:
                return self._need(s, name, args_raw, -1, eof, pr)
            if s[i] != ":":
                return Fail(i)
            i += 1
            while i < n and s[i] in _WS:
                i += 1
            r = scan_json(s, i, eof)
            is_args = key in self.arg_keys and args_raw is None
            if r is NEED:
                return self._need(s, name, args_raw, i if is_args else -1, eof, pr)
            if isinstance(r, Fail):
                return r
            if key in self.name_keys and name is None:
                if not r.value.startswith('"'):
                    return Fail(i)
                name = json.loads(r.value)
                if not name:
                    return Fail(i)
                if self.check is not None:
                    try:
                        self.check(name)
                    except ValueError:
                        return Fail(i)
            elif is_args:
                args_raw = r.value
                if not self.encoded and not args_raw.startswith("{"):
                    return Fail(i)
                try:
                    _args_from_raw(args_raw)
                except ValueError:
                    return Fail(i)
            i = r.end
            while i < n and s[i] in _WS:
                i += 1
            if i >= n:
                return self._need(s, name, args_raw, -1, eof, pr)
            if s[i] == "}":
                i += 1
                break
            if s[i] != ",":
                return Fail(i)
            i += 1
        if name is None or (self.strict and args_raw is None):
            return Fail(pos)
        return Ok(i, Call(name=name, arguments=_args_from_raw(args_raw)))

    def _need(self, s: str, name: str | None, args_raw: str | None, args_at: int, eof: bool,
              pr: Probe | None) -> Result:
        if eof:
            return Fail(len(s))
        if pr is not None:
            if name is not None:
                pr.events.append(("name", 0, 0, name))
            if args_raw is not None:
                pr.events.append(("args", 0, 0, _args_from_raw(args_raw)))
            elif args_at != -1:
                pr.events.append(("args", args_at, -1, json_args_partial(s, args_at, pr)))
        return NEED


def call_object(
    *arg_keys: str,
    strict: bool = False,
    check=None,
    name_keys: tuple[str, ...] = ("name",),
    encoded: bool = True,
) -> P:
    """``{"name": "...", "<arg_key>": {...}}`` -> Call (streamed: see `_CallObject`)."""
    return tag("call", _CallObject(tuple(arg_keys), strict, check, name_keys, encoded))


def json_args() -> P:
    """Arguments written as one JSON object (streamed as the model writes them)."""
    return tag("args", json_value("{"), json_args_partial)


def call(p: P, build) -> P:
    """A call item: ``build(value of p) -> Call``, reported to the engine."""
    return tag("call", fmap(p, build))


def name_ok(name: str) -> str:
    name = name.strip()
    if not name or any(c.isspace() or c in "<>{}" for c in name):
        raise ValueError("bad function name")
    return name
