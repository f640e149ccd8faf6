"""A validating scanner for strict JSON (RFC 8259) over a buffer that may still grow.

Why a scanner and not ``json.loads``: a streaming parser must know where one
JSON value ends, and whether a prefix can still become one, without decoding
it (the raw slice is passed on unchanged, never re-serialised). `scan_value`
answers the end index, raises `NeedMore` when the buffer ends inside a value
that could still complete, and `BadJson` at the first character no
continuation can fix. `combinators.scan_json` turns that into a parse result.
"""

from __future__ import annotations

_WS = " \t\n\r"


class NeedMore(Exception):
    pass


class BadJson(Exception):
    def __init__(self, pos: int) -> None:
        self.pos = pos


def _skip_ws(s: str, i: int, n: int) -> int:
    while i < n and s[i] in _WS:
        i += 1
    if i == n:
        raise NeedMore
    return i


def scan_value(s: str, i: int, n: int) -> int:
    if i >= n:
        raise NeedMore
    c = s[i]
    if c == "{" or c == "[":
        # an object's members are ``"key": value``, an array's items a value
        is_object = c == "{"
        close = "}" if is_object else "]"
        i = _skip_ws(s, i + 1, n)
        if s[i] == close:
            return i + 1
        while True:
            if is_object:
                if s[i] != '"':
                    raise BadJson(i)
                i = _scan_string(s, i, n)
                i = _skip_ws(s, i, n)
                if s[i] != ":":
                    raise BadJson(i)
                i = _skip_ws(s, i + 1, n)
            i = scan_value(s, i, n)
            i = _skip_ws(s, i, n)
            if s[i] == close:
                return i + 1
            if s[i] != ",":
                raise BadJson(i)
            i = _skip_ws(s, i + 1, n)
    if c == '"':
        return _scan_string(s, i, n)
    if c == "-" or c.isdigit():
        return _scan_number(s, i, n)
    for word in ("true", "false", "null"):
        if c == word[0]:
            k = 0
            while k < len(word):
                if i + k >= n:
                    raise NeedMore
                if s[i + k] != word[k]:
                    raise BadJson(i + k)
                k += 1
            return i + len(word)
    raise BadJson(i)


_HEX = frozenset("0123456789abcdefABCDEF")


def _scan_string(s: str, i: int, n: int) -> int:
    i += 1  # opening quote
    while True:
        if i >= n:
            raise NeedMore
        c = s[i]
        if c == '"':
            return i + 1
        if c == "\\":
            if i + 1 >= n:
                raise NeedMore
            e = s[i + 1]
            if e in '"\\/bfnrt':
                i += 2
                continue
            if e == "u":
                for k in range(4):
                    if i + 2 + k >= n:
                        raise NeedMore
                    if s[i + 2 + k] not in _HEX:
                        raise BadJson(i + 2 + k)
                i += 6
                continue
            raise BadJson(i + 1)
        if c < " ":
            raise BadJson(i)  # raw control characters are not JSON
        i += 1


def _digits(s: str, i: int, n: int) -> int:
    """One or more digits from ``i``: where they end."""
    if i >= n:
        raise NeedMore
    if not s[i].isdigit():
        raise BadJson(i)
    while i < n and s[i].isdigit():
        i += 1
    return i


def _scan_number(s: str, i: int, n: int) -> int:
    start = i
    if s[i] == "-":
        i += 1
        if i >= n:
            raise NeedMore
    if s[i] == "0":
        i += 1
    else:
        i = _digits(s, i, n)
    if i < n and s[i] == ".":
        i = _digits(s, i + 1, n)
    if i < n and s[i] in "eE":
        i += 1
        if i < n and s[i] in "+-":
            i += 1
        i = _digits(s, i, n)
    if i == start:
        raise BadJson(i)
    return i
