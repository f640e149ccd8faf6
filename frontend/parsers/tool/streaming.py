"""Safe argument prefixes: what of an open call's arguments can be streamed now.

A tool call's arguments reach the client as deltas whose concatenation is the
final arguments text. While the call is still being generated, the engine
(base.py) may only send text that is certainly a prefix of that final text.
`ArgsPrefix` says how much that is for one open call, plus:

- ``closers``: what completes the prefix into valid JSON. Used once, if the
  section turns out malformed (or the output ends) after the call was
  announced: the call is closed with ``text + closers``.
- ``tail``: an object that extends the prefix cheaply while the model keeps
  writing one string value (the long-argument case: a file's contents, a
  command), so the section is not re-parsed per token. ``tail.extend(raw)``
  answers the arguments text that ``raw`` adds, or None when the raw text
  leaves the string (the engine then parses the section again).

For JSON arguments (the model's own text) the prefix stops at points where
the text can be closed: never inside a key, a number or a literal, after a
``,`` or ``:`` waiting for what follows, or inside an escape sequence. For
XML parameters converted to JSON (`XmlArgs`), completed parameters are
written as ``"key": value``; an open parameter streams only when its value is
a string (the schema or the format says so), escaped as it arrives. Arguments
written as members in a literal syntax (pythonic, Gemma 4: `MemberArgs`) stream
member by member, their nested values item by item (`items_prefix`,
`members_prefix`).
"""

from __future__ import annotations

import json
import re
from json.encoder import encode_basestring  # (the C escaper, as ensure_ascii=False uses)
from dataclasses import dataclass
from typing import Any, Callable

from vllm_pyfrontend.parsers.combinators import NEED, Ok, P, Probe, Result, find_first, partial_tail


@dataclass(slots=True)
class ArgsPrefix:
    text: str
    closers: str
    tail: Any = None


_NEEDS_ESCAPE = re.compile(r'[\\"\x00-\x1f\u2028\u2029\ud800-\udfff]')


def escape(text: str) -> str:
    """JSON string escaping of ``text`` without the quotes (per character, so
    the escape of a prefix is a prefix of the escape)."""
    if _NEEDS_ESCAPE.search(text) is None:
        return text
    return encode_basestring(text)[1:-1]


# ------------------------------------------------------------------- JSON
_STR_CONTENT = re.compile(r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
_PARTIAL_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?")
_SCALAR = frozenset("0123456789+-.eEtrufalsn")

#: An open string value is sent once this many characters of it are known
#: (before that it goes out when complete): short values (a city, a unit)
#: cost no extra chunks, long ones (a file's contents) stream.
MIN_OPEN = 32


def min_open(pr: Probe) -> int:
    """The length from which an open string value is sent under the probe ``pr``: 0 while the
    engine closes a call whose section failed or whose output ended (``pr.closing``), where
    every open value counts, however short; else `MIN_OPEN`."""
    return 0 if pr.closing else MIN_OPEN


class JsonStringTail:
    """Extends arguments while the raw JSON stays inside one string value."""

    __slots__ = ("pending",)

    def __init__(self, pending: str) -> None:
        self.pending = pending  # an incomplete escape sequence held back

    def extend(self, raw: str) -> str | None:
        text = self.pending + raw
        k = _STR_CONTENT.match(text).end()  # type: ignore[union-attr]
        rest = text[k:]
        if not rest:
            self.pending = ""
            return text
        if _PARTIAL_ESCAPE.fullmatch(rest):
            self.pending = rest
            return text[:k]
        return None  # the string ends (or the text is not JSON): re-parse


def json_prefix(s: str, pos: int, end: int, least: int) -> ArgsPrefix:
    """Safe prefix of the JSON value (an object or array) in ``s[pos:end]``; an open string
    value is part of it once ``least`` characters of it are known (`min_open`).

    ``s[pos:end]`` must be a prefix of valid JSON (the grammar said NEED).
    """
    stack: list[str] = []
    i = pos
    safe = pos
    safe_closers = ""
    safe_in_str = False
    expect_key = False
    while i < end:
        c = s[i]
        if c in " \t\r\n":
            i += 1
            continue
        if c == "{" or c == "[":
            stack.append("}" if c == "{" else "]")
            expect_key = c == "{"
            i += 1
            safe, safe_closers, safe_in_str = i, "".join(reversed(stack)), False
            continue
        if c == "}" or c == "]":
            stack.pop()
            i += 1
            expect_key = False
            safe, safe_closers, safe_in_str = i, "".join(reversed(stack)), False
            if not stack:
                break
            continue
        if c == ",":
            expect_key = stack[-1] == "}" if stack else False
            i += 1
            continue
        if c == ":":
            i += 1
            continue
        if c == '"':
            is_key = expect_key
            expect_key = False
            closers = "".join(reversed(stack))
            i += 1
            start = i
            open_safe = i
            closed = False
            while i < end:
                c = s[i]
                if c == '"':
                    i += 1
                    closed = True
                    break
                if c == "\\":
                    step = 6 if i + 1 < end and s[i + 1] == "u" else 2
                    if i + step > end:
                        break  # an incomplete escape: held
                    i += step
                else:
                    i += 1
                open_safe = i
            if not closed:
                # the string is still open: a value streams once it is long
                # enough to be worth a delta of its own
                if not is_key and open_safe - start >= least:
                    safe, safe_closers, safe_in_str = open_safe, '"' + closers, True
                break
            if not is_key:
                safe, safe_closers, safe_in_str = i, closers, False
            continue
        # a number or a literal: safe once something follows it
        j = i
        while j < end and s[j] in _SCALAR:
            j += 1
        if j == end:
            break
        i = j
        safe, safe_closers, safe_in_str = i, "".join(reversed(stack)), False
    tail = None
    if safe_in_str:
        tail = JsonStringTail(s[safe:end])
    return ArgsPrefix(s[pos:safe], safe_closers, tail)


def json_args_partial(s: str, pos: int, pr: Probe) -> ArgsPrefix | None:
    """`tag` partial for raw JSON-object arguments (whitespace before the
    object is not part of the arguments)."""
    n = len(s)
    while pos < n and s[pos] in " \t\r\n":
        pos += 1
    if pos >= n or s[pos] != "{":
        return None
    return json_prefix(s, pos, n, min_open(pr))


# -------------------------------------------------------------------- XML
class XmlStringTail:
    """Extends an open XML parameter whose value is a JSON string
    (``param``: an `XmlParam`; its ends and holding rule)."""

    __slots__ = ("param", "pending", "at_start")

    def __init__(self, param: Any, pending: str, at_start: bool) -> None:
        self.param = param
        self.pending = pending  # raw text held (a possible end, a final newline)
        self.at_start = at_start  # a leading newline would still be framing

    def extend(self, raw: str) -> str | None:
        param = self.param
        text = self.pending + raw
        if find_first(text, param.ends)[0] != -1:
            return None  # the value ends here: re-parse
        at_start = self.at_start
        if at_start and text:
            if param.trim and text[0] == "\n":
                text = text[1:]
            at_start = False
        cut = partial_tail(text, param.ends)
        keep = param.held(text[:cut])
        self.pending, self.at_start = text[keep:], at_start
        decode = getattr(param, "decode", None)
        return escape(decode(text[:keep]) if decode is not None else text[:keep])


class ParsedArgs(list):
    """A complete arguments parser's value (e.g. XML parameters) that also
    carries its arguments text, set while a probe runs: a call whose
    arguments are complete but whose own end is not yet (or never) written
    is then committed with those arguments, as when they were still open."""

    __slots__ = ("args_text",)

    def __init__(self, items: Any, args_text: str | None) -> None:
        super().__init__(items)
        self.args_text = args_text


def probe_name(pr: Probe | None) -> str | None:
    """The last complete call name reported to the probe ``pr`` (the active one), if any."""
    if pr is None:
        return None
    for kind, _, stop, value in reversed(pr.events):
        if kind == "name" and stop != -1:
            return value if isinstance(value, str) else None
    return None


def skip_ws(s: str, i: int) -> int:
    """The first index at or after i that is not whitespace (len(s) if none)."""
    n = len(s)
    while i < n and s[i].isspace():
        i += 1
    return i


def substantive(text: str) -> bool:
    """More than brackets: an item, a member or string text (a nested value's prefix worth sending)."""
    return any(c not in "[{" for c in text)


#: `json.dumps(value, ensure_ascii=False)` without a new encoder per call (`dumps` builds one
#: whenever an argument differs from its default).
_encode = json.JSONEncoder(ensure_ascii=False).encode


def dumps_value(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)``: a string straight through the C escaper (what
    the encoder does with one), anything else through one shared encoder."""
    if type(value) is str:
        return encode_basestring(value)
    return _encode(value)


def first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members: a repeated key keeps its first value (as the arguments text does),
    so that text streamed for it stays valid."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        out.setdefault(k, v)
    return out


def complete_members(s: str, i: int, sep: Any, member: Any,
                     typed: Callable[[str, Any], Any], pr: Probe | None) -> tuple[list[str], set[str], int]:
    """The complete `key=value` members of an argument list written from `i` (`member` parses
    one to (key, value), `sep` what stands between two; under the probe ``pr``), each as its
    arguments text ``"key": value`` with the value `typed(key, value)`; a repeated key keeps
    its first value. Returns the texts, the keys seen and where the next member would begin."""
    parts: list[str] = []
    seen: set[str] = set()
    while True:
        j = i
        if parts:
            r = sep.parse(s, i, False, pr)
            if not isinstance(r, Ok):
                break
            j = r.end
        r = member.parse(s, j, False, pr)
        if not isinstance(r, Ok):
            i = j
            break
        key, value = r.value
        if key not in seen:
            seen.add(key)
            parts.append(f"{dumps_value(key)}: {dumps_value(typed(key, value))}")
        i = r.end
    return parts, seen, i


def open_member_prefix(parts: list[str], seen: set[str], h: Any, least: int,
                       value_prefix: Callable[[str, int], tuple[str, str, Any] | None]) -> ArgsPrefix | None:
    """The arguments prefix with the member begun after the complete `parts`, `h` the parse of
    its ``key=`` head (Ok(value start, key) when there is one): its value's prefix
    (`value_prefix(key, start)`, (text, closers, tail)) when that is worth sending; None when no
    member is begun, it repeats a key or its value has nothing to send yet."""
    if isinstance(h, Ok) and h.value not in seen:
        sub = value_prefix(h.value, h.end)
        if sub is not None and (parts or not least or substantive(sub[0])):
            value, closers, tail = sub
            sep = ", " if parts else ""
            return ArgsPrefix(f"{{{', '.join(parts)}{sep}{dumps_value(h.value)}: {value}", closers + "}", tail)
    return None


#: what is certain of an open value's JSON: (text, closers, tail), as in `ArgsPrefix`
ValuePrefix = tuple[str, str, Any]


def items_prefix(s: str, i: int, value: P, sep: P, dumped: Callable[[Any], str],
                 open_prefix: Callable[[int], ValuePrefix | None]) -> ValuePrefix:
    """What is certain of the JSON of an open array whose items begin at ``s[i]``: each complete
    item (`value` parses one, `sep` what stands between two) as ``dumped(item)``, then the open
    item's prefix (``open_prefix(start)``) when it has one."""
    parts: list[str] = []
    while True:
        i = skip_ws(s, i)
        r = value.parse(s, i, False)
        if isinstance(r, Ok):
            parts.append(dumped(r.value))
            after = sep.parse(s, r.end, False)
            if isinstance(after, Ok):
                i = after.end
                continue
        elif r is NEED:
            sub = open_prefix(i)
            if sub is not None:
                text, closers, tail = sub
                return "[" + ", ".join([*parts, text]), closers + "]", tail
        return "[" + ", ".join(parts), "]", None


def members_prefix(s: str, i: int, head: Callable[[str, int], tuple[str, int] | None], value: P, sep: P,
                   dumped: Callable[[str, Any], str],
                   open_prefix: Callable[[str, int], ValuePrefix | None]) -> ValuePrefix:
    """What is certain of the JSON of an open object whose members begin at ``s[i]``: each
    complete member (``head(s, start)``: its key and where its value starts, None when there
    is none; `value` parses the value, `sep` what stands between two members) as
    ``"key": dumped(key, value)``, then the open member's value prefix
    (``open_prefix(key, start)``) when it has one. A repeated key keeps its first value."""
    parts: list[str] = []
    seen: set[str] = set()
    while True:
        h = head(s, skip_ws(s, i))
        if h is None:
            break
        key, at = h
        r = value.parse(s, at, False)
        if isinstance(r, Ok):
            if key not in seen:
                seen.add(key)
                parts.append(f"{dumps_value(key)}: {dumped(key, r.value)}")
            after = sep.parse(s, r.end, False)
            if isinstance(after, Ok):
                i = after.end
                continue
        elif r is NEED and key not in seen:
            sub = open_prefix(key, at)
            if sub is not None:
                text, closers, tail = sub
                return "{" + ", ".join([*parts, f"{dumps_value(key)}: {text}"]), closers + "}", tail
        break
    return "{" + ", ".join(parts), "}", None


class MemberArgs(P):
    """A call's arguments written as members, a key and then its value (pythonic keyword
    arguments, Gemma 4's ``key:value``) -> ``[(key, value)]``, tagged ``"args"`` with `partial`
    by the call's grammar: under a probe a complete list also carries its arguments text
    (`ParsedArgs`), and `partial` streams an open one member by member: the complete members as
    JSON, then what is certain of the open member's value.

    ``items``: the whole list; ``member``: one member -> ``(key, value)``; ``head``: a member
    up to its value -> the key; ``sep``: what stands between two members. A format says how a
    value becomes JSON (`typed`), what of an open value is certain (`value_prefix`) and whether
    a list without a complete member has begun (`begun`)."""

    __slots__ = ("items", "member", "head", "sep")

    def __init__(self, items: P, member: P, head: P, sep: P) -> None:
        self.items = items
        self.member = member
        self.head = head
        self.sep = sep

    def typed(self, name: str, key: str, value: Any) -> Any:
        """A complete member's JSON value in a call of ``name`` (by default the value as parsed)."""
        return value

    def value_prefix(self, s: str, at: int, name: str, key: str, least: int) -> ValuePrefix | None:
        """What is certain of the JSON of the open value at ``s[at:]`` (text, closers, tail);
        None: nothing yet. ``least``: see `min_open`."""
        raise NotImplementedError  # pragma: no cover

    def begun(self, s: str, h: Result) -> bool:
        """Whether the arguments have begun (the call is committed) while no member is complete,
        ``h`` the parse of the first member's head."""
        return True

    def parse(self, s: str, pos: int, eof: bool, pr: Probe | None = None) -> Result:
        r = self.items.parse(s, pos, eof, pr)
        if isinstance(r, Ok) and r.value:  # (no members: not begun)
            name = probe_name(pr)
            if name is not None:  # under a probe: the text too (`ParsedArgs`)
                text = xml_args_text([(k, self.typed(name, k, v)) for k, v in r.value])
                return Ok(r.end, ParsedArgs(r.value, text))
        return r

    def partial(self, s: str, pos: int, pr: Probe) -> ArgsPrefix | None:
        name = probe_name(pr)
        if name is None:
            return None
        least = min_open(pr)
        parts, seen, i = complete_members(s, pos, self.sep, self.member,
                                          lambda key, value: self.typed(name, key, value), pr)
        h = self.head.parse(s, i, False, pr)
        begun = open_member_prefix(parts, seen, h, least,
                                   lambda key, at: self.value_prefix(s, at, name, key, least))
        if begun is not None:
            return begun
        if not parts:
            if not self.begun(s, h):
                return None
            if least:
                return ArgsPrefix("", "")  # "{" goes out with the first member
        return ArgsPrefix("{" + ", ".join(parts), "}")


def xml_args_text(items: list[tuple[str, Any]]) -> str:
    """The arguments text for converted parameters (first occurrence of a
    repeated key wins, so that text streamed for it stays valid)."""
    seen: set[str] = set()
    parts = []
    for key, value in items:
        if key in seen:
            continue
        seen.add(key)
        parts.append(f"{dumps_value(key)}: {dumps_value(value)}")
    return "{" + ", ".join(parts) + "}"
