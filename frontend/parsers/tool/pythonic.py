"""Grammars for pythonic calls: pythonic, llama4_pythonic, olmo3, lfm2.

The model writes Python call syntax with keyword arguments of literal values::

    [get_weather(city="Paris", days=3), search(query='x')]

Values are Python literals (strings in either quote, numbers, ``True`` /
``False`` / ``None``, lists, dicts, tuples) or their JSON spellings
(``true`` / ``false`` / ``null``), converted to JSON. The grammar is a
validating scanner like the JSON one: a prefix that cannot become a call
fails at once, so malformed output goes back as content under every split.
"""

from __future__ import annotations

import ast
from typing import Any

from vllm_pyfrontend.parsers.combinators import (
    NEED,
    Fail,
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
    seq,
    tag,
    ws,
)
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.streaming import (
    MemberArgs,
    ValuePrefix,
    dumps_value,
    escape,
    first_wins,
    items_prefix,
    members_prefix,
    skip_ws,
    xml_args_text,
)


class _PyString(P):
    """A Python string literal (optional r/u/b-less prefix not accepted), decoded.

    Raw control characters inside are accepted (models write real newlines in
    code arguments) and kept as they are.
    """

    __slots__ = ()

    def parse(self, s: str, pos: int, eof: bool, pr: Probe | None = None) -> Result:
        n = len(s)
        if pos >= n:
            return Fail(pos) if eof else NEED
        q = s[pos]
        if q not in "'\"":
            return Fail(pos)
        triple = s.startswith(q * 3, pos)
        if not triple and pos + 2 >= n and not eof and s[pos:] == q * (n - pos):
            return NEED  # '' or ''' still undecided
        delim = q * 3 if triple else q
        i = pos + len(delim)
        while True:
            if i >= n:
                return Fail(n) if eof else NEED
            c = s[i]
            if c == "\\":
                i += 2
                continue
            if s.startswith(delim, i):
                raw = s[pos : i + len(delim)]
                break
            i += 1
        end = i + len(delim)
        body = raw[len(delim) : -len(delim)]
        try:
            # escape raw control characters so that literal_eval accepts them
            fixed = body.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") if not triple else body
            fixed = fixed.replace("\x00", "\\x00")  # a NUL is not allowed in source text
            value = ast.literal_eval(delim + fixed + delim)
        except (ValueError, SyntaxError):
            return Fail(pos)
        if not isinstance(value, str):
            return Fail(pos)
        return Ok(end, value)


def _number(text: str) -> Any:
    t = text.replace("_", "")
    try:
        if any(c in t for c in ".eE") and not t.lower().startswith(("0x", "-0x")):
            return float(t)
        return int(t, 0) if not t.lstrip("-+").startswith("0") or t.lstrip("-+") == "0" else int(t)
    except ValueError:
        raise ValueError("not a number") from None


_CONSTANTS = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}


def _ident_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def _constant(word: str) -> Any:
    if word not in _CONSTANTS:
        raise ValueError("not a literal")
    return _CONSTANTS[word]


def py_value() -> P:
    """One Python literal (JSON spellings too), decoded."""
    sep = seq(ws(), lit(","), ws())
    value = lazy(py_value)
    items = fmap(seq(many(value, sep=sep), opt(seq(ws(), lit(",")))), lambda v: v[0])
    list_ = fmap(seq(lit("["), ws(), items, ws(), lit("]")), lambda v: v[2])
    tuple_ = fmap(seq(lit("("), ws(), items, ws(), lit(")")), lambda v: v[2])
    pair = fmap(seq(value, ws(), lit(":"), ws(), value), lambda v: (_key(v[0]), v[4]))
    pairs = fmap(seq(many(pair, sep=sep), opt(seq(ws(), lit(",")))), lambda v: v[0])
    dict_ = fmap(seq(lit("{"), ws(), pairs, ws(), lit("}")), lambda v: first_wins(v[2]))
    # a set literal becomes a list (JSON has no sets), in the order written
    set_ = fmap(seq(lit("{"), ws(), items, ws(), lit("}")), lambda v: v[2])
    number = fmap(
        chars_while(lambda c: c.isdigit() or c in "+-._eExXabcdefABCDEF"),
        _number,
    )
    negative = fmap(seq(lit("-"), ws(), number), lambda v: -v[2])
    word = fmap(chars_while(_ident_char), _constant)
    return choice(_PyString(), list_, tuple_, dict_, set_, negative, number, word)


def _key(k: Any) -> str:
    if isinstance(k, str):
        return k
    if isinstance(k, (int, float, bool)) or k is None:
        import json

        return json.dumps(k)
    raise ValueError("unhashable key")


def _name(text: str) -> str:
    parts = text.split(".")
    if not all(p and (p[0].isalpha() or p[0] == "_") for p in parts):
        raise ValueError("bad function name")
    return text


_HEX = {"x": 2, "u": 4, "U": 8}


def _py_safe(t: str, q: str, triple: bool) -> int | None:
    """How much of ``t`` (string body text starting outside an escape) can be
    decoded now: not an incomplete escape, not quotes that may begin the
    closing delimiter. None: the string ends in ``t``."""
    n = len(t)
    i = 0
    while i < n:
        c = t[i]
        if c == "\\":
            if i + 1 >= n:
                return i
            d = t[i + 1]
            if d in "01234567":
                k = i + 2
                while k < n and k < i + 4 and t[k] in "01234567":
                    k += 1
                if k < i + 4 and k == n:
                    return i  # more octal digits may follow
                i = k
            elif d in _HEX:
                if i + 2 + _HEX[d] > n:
                    return i
                i += 2 + _HEX[d]
            elif d == "N":
                close = t.find("}", i)
                if close == -1:
                    return i
                i = close + 1
            else:
                i += 2
            continue
        if c == q:
            if not triple or t.startswith(q * 3, i):
                return None
            if t[i:] == q * (n - i):
                return i  # may be the closing delimiter
        i += 1
    return n


def _py_decode(t: str, q: str, triple: bool) -> str:
    """Decode a safe segment of a string body as `_PyString` decodes the whole."""
    delim = q * 3 if triple else q
    fixed = t.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") if not triple else t
    fixed = fixed.replace("\x00", "\\x00")
    value = ast.literal_eval(delim + fixed + delim)
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value


class _PyStringTail:
    """Extends an open string keyword argument (see streaming.py's tails)."""

    __slots__ = ("q", "triple", "pending")

    def __init__(self, q: str, triple: bool, pending: str) -> None:
        self.q, self.triple, self.pending = q, triple, pending

    def extend(self, raw: str) -> str | None:
        t = self.pending + raw
        cut = _py_safe(t, self.q, self.triple)
        if cut is None:
            return None
        try:
            out = escape(_py_decode(t[:cut], self.q, self.triple))
        except (ValueError, SyntaxError):
            return None
        self.pending = t[cut:]
        return out


# ------------------------------------------------------- nested values, streamed
_VALUE = py_value()
_SEP = seq(ws(), lit(","), ws())
_MAX_DEPTH = 32


def _open_string(s: str, i: int, least: int) -> tuple[str, str, Any] | None:
    """The open string literal at ``s[i]`` as JSON text so far (text, closers, tail)."""
    q = s[i]
    rest = s[i:]
    if len(rest) < 3 and rest == q * len(rest):
        return None  # an empty string or a triple quote: undecided
    triple = rest.startswith(q * 3)
    body = rest[3 if triple else 1 :]
    cut = _py_safe(body, q, triple)
    if cut is None:
        return None
    try:
        decoded = _py_decode(body[:cut], q, triple)
    except (ValueError, SyntaxError):
        return None
    if len(decoded) < least:
        return None
    return '"' + escape(decoded), '"', _PyStringTail(q, triple, body[cut:])


def _py_prefix(s: str, i: int, least: int, depth: int = 0) -> tuple[str, str, Any] | None:
    """What is certain of the JSON of the open literal at ``s[i:]``: (text,
    closers, tail); None when nothing is yet. Lists and tuples stream item by
    item, dicts member by member (once the first ``:`` says it is not a set),
    strings as they arrive; numbers and words go out complete."""
    n = len(s)
    if i >= n or depth > _MAX_DEPTH:
        return None
    c = s[i]
    if c in "'\"":
        return _open_string(s, i, least)
    if c in "[(":
        return _py_items(s, i + 1, least, depth)
    if c == "{":
        j = skip_ws(s, i + 1)
        r = _VALUE.parse(s, j, False)
        if not isinstance(r, Ok):
            return None
        k = skip_ws(s, r.end)
        if k >= n:
            return None
        if s[k] == ":":
            return _py_pairs(s, i + 1, least, depth)
        if s[k] in ",}":
            return _py_items(s, i + 1, least, depth)  # a set: a list in JSON
    return None


def _py_items(s: str, i: int, least: int, depth: int) -> tuple[str, str, Any]:
    return items_prefix(s, i, _VALUE, _SEP, dumps_value, lambda at: _py_prefix(s, at, least, depth + 1))


def _py_key_at(s: str, i: int) -> tuple[str, int] | None:
    """A dict member's key and ``:`` at ``s[i]``: the key and where its value starts."""
    kr = _VALUE.parse(s, i, False)
    if not isinstance(kr, Ok):
        return None
    try:
        key = _key(kr.value)
    except ValueError:
        return None
    k = skip_ws(s, kr.end)
    if k >= len(s) or s[k] != ":":
        return None
    return key, skip_ws(s, k + 1)


def _member_json(key: str, value: Any) -> str:
    """A complete dict member's value as JSON."""
    return dumps_value(value)


def _py_pairs(s: str, i: int, least: int, depth: int) -> tuple[str, str, Any]:
    return members_prefix(
        s, i, _py_key_at, _VALUE, _SEP, _member_json, lambda key, at: _py_prefix(s, at, least, depth + 1)
    )


class _PyArgs(MemberArgs):
    """Keyword arguments ``key=value, ...`` (a trailing comma allowed) -> ``[(key, value)]``,
    streamed argument by argument: completed ones as JSON, an open string literal decoded as
    it arrives."""

    __slots__ = ()

    def __init__(self) -> None:
        kwarg = fmap(seq(chars_while(_ident_char), ws(), lit("="), ws(), py_value()), lambda v: (v[0], v[4]))
        head = fmap(seq(chars_while(_ident_char), ws(), lit("="), ws()), lambda v: v[0])
        sep = seq(ws(), lit(","), ws())
        items = fmap(seq(many(kwarg, sep=sep), opt(seq(ws(), lit(",")))), lambda v: v[0])
        super().__init__(items, kwarg, head, sep)

    def value_prefix(self, s: str, at: int, name: str, key: str, least: int) -> ValuePrefix | None:
        return _py_prefix(s, at, least)

    def begun(self, s: str, h: Result) -> bool:
        # by an open string; ``bad(x=b'z')`` is not a call yet
        return isinstance(h, Ok) and h.end < len(s) and s[h.end] in "'\""


def py_call() -> P:
    """``name(key=value, ...)`` -> Call (dotted names kept, as vLLM does),
    streamed: the name, then the arguments as they are written (`_PyArgs`)."""
    args = _PyArgs()
    return tag(
        "call",
        fmap(
            seq(
                tag("name", fmap(chars_while(lambda c: _ident_char(c) or c == "."), _name)),
                lit("("),
                ws(),
                tag("args", args, args.partial),
                ws(),
                lit(")"),
            ),
            lambda v: Call(name=v[0], arguments=xml_args_text(v[3])),
        ),
    )


def call_list() -> P:
    """``[call, call, ...]`` (at least one call)."""
    return fmap(
        seq(
            lit("["),
            ws(),
            many(py_call(), sep=seq(ws(), lit(","), ws()), minimum=1),
            opt(seq(ws(), lit(","))),
            ws(),
            lit("]"),
        ),
        lambda v: v[2],
    )


class Pythonic(ToolFormat):
    """Llama 3.2 / ToolACE: the output *is* ``[f(a=1), g(b="x")]``."""

    only_at_start = True
    sections = {"[": Section(body=fmap(seq(call_list(), ws()), lambda v: v[0]), keep_start=True)}


class Llama4Pythonic(ToolFormat):
    """Llama 4: the pythonic list, optionally wrapped in
    ``<|python_start|>`` … ``<|python_end|>``."""

    only_at_start = True
    sections = {
        "[": Pythonic.sections["["],
        "<|python_start|>": Section(
            body=fmap(seq(ws(), call_list(), ws()), lambda v: v[1]), ends=("<|python_end|>",)
        ),
    }


class Olmo3(ToolFormat):
    """Olmo 3: ``<function_calls>`` one call per line ``</function_calls>``."""

    sections = {
        "<function_calls>": Section(
            body=fmap(
                seq(ws(), many(py_call(), sep=ws(1), minimum=1), ws()),
                lambda v: v[1],
            ),
            ends=("</function_calls>",),
        )
    }


class Lfm2(ToolFormat):
    """LiquidAI LFM2 / LFM2.5: ``<|tool_call_start|>[f(a=1)]<|tool_call_end|>``."""

    sections = {
        "<|tool_call_start|>": Section(
            body=fmap(seq(ws(), call_list(), ws()), lambda v: v[1]), ends=("<|tool_call_end|>",)
        )
    }


register_tool_parser("pythonic", lambda tools: Pythonic())
register_tool_parser("llama4_pythonic", lambda tools: Llama4Pythonic())
register_tool_parser("olmo3", lambda tools: Olmo3())
register_tool_parser("lfm2", lambda tools: Lfm2())
