"""Parser combinators for incremental text, and the `safe_text` primitive.

Why combinators with a three-way result: a streaming parser sees the model's
output a few characters at a time, and every decision it takes ("this is a
tool call", "this is plain text") must be the one it would take on the whole
output, or results depend on where the chunks happened to split. So every
parser here answers, for a buffer that may still grow:

- ``Ok(end, value)``: matched ``s[pos:end]``; no later input can change that;
- ``NEED``: ``s[pos:]`` is a proper prefix of something that could match (only
  when ``eof`` is False): wait for more text;
- ``Fail(pos)``: no continuation of the text can match. Failure is monotone:
  if a prefix fails, every extension fails too.

With ``eof=True`` the buffer is final and ``NEED`` never comes back. A grammar
is built from `lit`, `seq`, `choice`, `many`, `opt`, `take_until`,
`json_value` (a JSON scanner that returns the raw slice, never
re-serialised), `ws` and `end`; `fmap` turns matches into values.

Every ``parse`` also takes the active `Probe` (``pr``, None: the normal,
zero-cost case) and passes it on to the parsers it calls: `probe` runs a
parse with one, and `tag`ged parsers report to it (see `probe`).

`safe_text(buffer, markers)` is the other half: in free text, the longest
prefix that can be released because it contains no marker and does not end
with the start of one. Text that might be a marker is held and released as
soon as it cannot be.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from vllm_pyfrontend.parsers.json_scan import BadJson, NeedMore, scan_value


class _Need:
    """More input could still make the parser match (only when not at eof)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED"


NEED = _Need()


# Results are built for every step of every parse: plain slotted classes (a frozen
# dataclass's __init__ goes through object.__setattr__ and cost a quarter of a parse).
# Never mutated; hashable by value as before.
@dataclass(slots=True, unsafe_hash=True)
class Ok:
    end: int
    value: Any = None


@dataclass(slots=True, unsafe_hash=True)
class Fail:
    pos: int


Result = Ok | _Need | Fail


class P:
    """A parser: ``parse(s, pos, eof, pr=None) -> Ok | NEED | Fail`` (``pr``: the active
    `Probe`, which a parser passes on to the parsers it calls)."""

    __slots__ = ()

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:  # pragma: no cover
        raise NotImplementedError

    def __call__(self, s: str, eof: bool = True) -> Result:
        """Parse all of ``s``: a match must end exactly at its end."""
        return seq(self, end()).parse(s, 0, eof)


# ----------------------------------------------------------------- terminals
class _Lit(P):
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        t = self.text
        if s.startswith(t, pos):
            return Ok(pos + len(t), t)
        return lit_mismatch(s, pos, t, eof)


def lit_mismatch(s: str, pos: int, text: str, eof: bool) -> Result:
    """What `lit(text)` answers at ``pos`` where ``s`` does not continue with ``text``: NEED
    while ``s`` ends inside it (not at eof), else failure at the first differing position."""
    rest = s[pos : pos + len(text)]
    if not eof and len(s) - pos < len(text) and text.startswith(rest):
        return NEED
    i = 0
    while i < len(rest) and rest[i] == text[i]:
        i += 1
    return Fail(pos + i)


def lit(text: str) -> P:
    """Exactly ``text`` (a marker, a keyword)."""
    return _Lit(text)


class _Ws(P):
    __slots__ = ("min",)

    def __init__(self, minimum: int) -> None:
        self.min = minimum

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        i = pos
        n = len(s)
        while i < n and s[i].isspace():
            i += 1
        if i == n and not eof:
            return NEED  # more whitespace may follow
        if i - pos < self.min:
            return Fail(i)
        return Ok(i, s[pos:i])


def ws(minimum: int = 0) -> P:
    """Greedy whitespace (at least ``minimum`` characters)."""
    return _Ws(minimum)


class _End(P):
    __slots__ = ()

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        if pos == len(s):
            return Ok(pos) if eof else NEED
        return Fail(pos)


def end() -> P:
    """The end of the (final) input."""
    return _End()


class _TakeUntil(P):
    __slots__ = ("stops", "at_eof", "min")

    def __init__(self, stops: Sequence[str], at_eof: bool, minimum: int) -> None:
        self.stops = tuple(stops)
        self.at_eof = at_eof
        self.min = minimum

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        best = -1
        for stop in self.stops:
            j = s.find(stop, pos)
            if j != -1 and (best == -1 or j < best):
                best = j
        if best == -1:
            if not eof:
                return NEED
            if not self.at_eof:
                return Fail(len(s))
            best = len(s)
        if best - pos < self.min:
            return Fail(best)
        return Ok(best, s[pos:best])


def take_until(*stops: str, at_eof: bool = False, minimum: int = 0) -> P:
    """Text up to (not including) the first of ``stops``.

    With ``at_eof`` the end of the final input also stops it.
    """
    return _TakeUntil(stops, at_eof, minimum)


class _CharsWhile(P):
    __slots__ = ("pred", "min")

    def __init__(self, pred: Callable[[str], bool], minimum: int) -> None:
        self.pred = pred
        self.min = minimum

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        i = pos
        n = len(s)
        pred = self.pred
        while i < n and pred(s[i]):
            i += 1
        if i == n and not eof:
            return NEED
        if i - pos < self.min:
            return Fail(i)
        return Ok(i, s[pos:i])


def chars_while(pred: Callable[[str], bool], minimum: int = 1) -> P:
    """Greedy run of characters satisfying ``pred``."""
    return _CharsWhile(pred, minimum)


# ------------------------------------------------------------------ JSON scan
def scan_json(s: str, pos: int, eof: bool) -> Result:
    """Scan one JSON value at ``pos``; ``Ok(end, raw_slice)`` without decoding.

    Leading whitespace is not skipped (use `ws`). Strict JSON (RFC 8259): a
    validating scanner, so a prefix that cannot become JSON fails at once.
    """
    try:
        end_pos = scan_value(s, pos, len(s))
    except NeedMore:
        return Fail(len(s)) if eof else NEED
    except BadJson as bad:
        return Fail(bad.pos)
    if end_pos == len(s) and not eof and s[pos] in "-0123456789":
        return NEED  # a number may continue
    return Ok(end_pos, s[pos:end_pos])


class _JsonValue(P):
    __slots__ = ("kinds",)

    def __init__(self, kinds: str | None) -> None:
        self.kinds = kinds

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        if self.kinds is not None:
            if pos >= len(s):
                return Fail(pos) if eof else NEED
            if s[pos] not in self.kinds:
                return Fail(pos)
        return scan_json(s, pos, eof)


def json_value(kinds: str | None = None) -> P:
    """One JSON value, as its raw text (``kinds``: allowed first characters,
    e.g. ``"{"`` for objects only)."""
    return _JsonValue(kinds)


def json_object() -> P:
    return _JsonValue("{")


# --------------------------------------------------------------- combinators
class _Seq(P):
    __slots__ = ("parts",)

    def __init__(self, parts: Sequence[P]) -> None:
        self.parts = tuple(parts)

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        values = []
        for p in self.parts:
            r = p.parse(s, pos, eof, pr)
            if not isinstance(r, Ok):
                return r
            values.append(r.value)
            pos = r.end
        return Ok(pos, values)


def seq(*parts: P) -> P:
    """Each part in turn; value: the list of their values."""
    return _Seq(parts)


class _Choice(P):
    __slots__ = ("alts",)

    def __init__(self, alts: Sequence[P]) -> None:
        self.alts = tuple(alts)

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        furthest = pos
        mark = len(pr.events) if pr is not None else 0
        for p in self.alts:
            r = p.parse(s, pos, eof, pr)
            if isinstance(r, Fail):
                furthest = max(furthest, r.pos)
                if pr is not None:
                    del pr.events[mark:]
                continue
            return r  # Ok, or NEED: an earlier alternative is still undecided
        return Fail(furthest)


def choice(*alts: P) -> P:
    """Ordered choice (PEG): the first alternative that matches."""
    return _Choice(alts)


class _Many(P):
    """`many`; built by `ws_list` (``ws_sep``) its separator is whitespace skipped in the loop,
    and with ``outer`` whitespace before and after too: what `ws_list_grammar` spells with
    `ws` parts, without a call per part."""

    __slots__ = ("item", "sep", "min", "ws_sep", "outer")

    def __init__(self, item: P, sep: P | None, minimum: int, ws_sep: bool = False, outer: bool = False) -> None:
        self.item = item
        self.sep = sep
        self.min = minimum
        self.ws_sep = ws_sep
        self.outer = outer

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        n = len(s)
        if self.outer:
            while pos < n and s[pos].isspace():
                pos += 1
            if pos == n and not eof:
                return NEED  # more whitespace may follow
        values: list[Any] = []
        while True:
            at = pos
            mark = len(pr.events) if pr is not None else 0
            if values and self.ws_sep:
                while at < n and s[at].isspace():
                    at += 1
                if at == n and not eof:
                    return NEED
            elif values and self.sep is not None:
                r = self.sep.parse(s, at, eof, pr)
                if r is NEED:
                    return NEED
                if isinstance(r, Fail):
                    if pr is not None:
                        del pr.events[mark:]
                    break
                assert isinstance(r, Ok)
                at = r.end
            r = self.item.parse(s, at, eof, pr)
            if r is NEED:
                return NEED
            if isinstance(r, Fail):
                if pr is not None:
                    del pr.events[mark:]
                break  # backtrack to before the separator
            assert isinstance(r, Ok)
            if r.end == pos:
                break  # no progress: stop rather than loop
            values.append(r.value)
            pos = r.end
        if len(values) < self.min:
            return Fail(pos)
        if self.outer:
            while pos < n and s[pos].isspace():
                pos += 1
            if pos == n and not eof:
                return NEED
        return Ok(pos, values)


def many(item: P, sep: P | None = None, minimum: int = 0) -> P:
    """Repetition (greedy), optionally separated; value: list of item values."""
    return _Many(item, sep, minimum)


def ws_list(item: P, minimum: int = 1, outer: bool = True) -> P:
    """``item`` repeated, separated by whitespace (at least ``minimum``); with ``outer`` also
    whitespace before and after (a tool section's calls); value: the items' values. Parses
    as `ws_list_grammar` (its specification) does, in one loop (every partial parse of an open
    tool-call section runs it)."""
    return _Many(item, None, minimum, ws_sep=True, outer=outer)


def ws_list_grammar(item: P, minimum: int = 1, outer: bool = True) -> P:
    """`ws_list` as combinators (what it must answer, checked by the tests)."""
    items = many(item, sep=ws(), minimum=minimum)
    return fmap(seq(ws(), items, ws()), lambda v: v[1]) if outer else items


class _Opt(P):
    __slots__ = ("p", "default")

    def __init__(self, p: P, default: Any) -> None:
        self.p = p
        self.default = default

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        mark = len(pr.events) if pr is not None else 0
        r = self.p.parse(s, pos, eof, pr)
        if isinstance(r, Fail):
            if pr is not None:
                del pr.events[mark:]
            return Ok(pos, self.default)
        return r


def opt(p: P, default: Any = None) -> P:
    return _Opt(p, default)


class _Map(P):
    __slots__ = ("p", "f")

    def __init__(self, p: P, f: Callable[[Any], Any]) -> None:
        self.p = p
        self.f = f

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        mark = len(pr.events) if pr is not None else 0
        r = self.p.parse(s, pos, eof, pr)
        if isinstance(r, Ok):
            try:
                return Ok(r.end, self.f(r.value))
            except ValueError:
                # a semantic check in ``f`` rejected the match
                if pr is not None:
                    del pr.events[mark:]
                return Fail(pos)
        return r


def fmap(p: P, f: Callable[[Any], Any]) -> P:
    """Transform a match's value; ``f`` raising ValueError turns it into a failure."""
    return _Map(p, f)


class _Lazy(P):
    __slots__ = ("make", "_p")

    def __init__(self, make: Callable[[], P]) -> None:
        self.make = make
        self._p: P | None = None

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        if self._p is None:
            self._p = self.make()
        return self._p.parse(s, pos, eof, pr)


def lazy(make: Callable[[], P]) -> P:
    """A parser built on first use (recursive grammars)."""
    return _Lazy(make)


# ------------------------------------------------------------------- probing
class Probe:
    """What tagged parsers saw during one parse of a partial input (`probe`), passed down the
    parse as every ``parse``'s ``pr``.

    ``events``: ``(kind, start, end, value)`` in the order the tagged parsers
    returned (inner before outer). ``end`` is -1 for a parser that answered
    NEED; its ``value`` is then what its ``partial`` function made of the
    text so far. Alternatives that failed leave no events (the combinators
    roll them back), so with a NEED result the events describe the one path
    the parse is still on.

    ``closing``: the caller completes what the text holds (a tool-call section that failed or
    an output that ended, tool/base.py): the ``partial`` functions then report every open
    value, however short.
    """

    __slots__ = ("events", "memo", "closing")

    def __init__(self, closing: bool = False) -> None:
        self.events: list[tuple[str, int, int, Any]] = []
        # Results of parsers that memoize within one probe (they report no events), keyed
        # by (parser, input, position, eof).
        self.memo: dict[tuple[Any, str, int, bool], Any] = {}
        self.closing = closing


def probe(p: P, s: str, pos: int = 0, eof: bool = False,
          closing: bool = False) -> tuple[Result, list[tuple[str, int, int, Any]]]:
    """Parse with tagged parsers reporting (see `tag`); returns the result and events.
    ``closing``: see `Probe`."""
    pr = Probe(closing)
    r = p.parse(s, pos, eof, pr)
    return r, pr.events


class _Tag(P):
    __slots__ = ("kind", "p", "partial")

    def __init__(self, kind: str, p: P, partial: "Callable[[str, int, Probe], Any] | None") -> None:
        self.kind = kind
        self.p = p
        self.partial = partial

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        r = self.p.parse(s, pos, eof, pr)
        if pr is not None:
            if isinstance(r, Ok):
                pr.events.append((self.kind, pos, r.end, r.value))
            elif r is NEED:
                value = self.partial(s, pos, pr) if self.partial is not None else None
                pr.events.append((self.kind, pos, -1, value))
        return r


def tag(kind: str, p: P, partial: "Callable[[str, int, Probe], Any] | None" = None) -> P:
    """``p``, reporting its matches to an active `probe` as ``kind`` events.

    ``partial(s, pos, pr)`` runs when ``p`` answers NEED under a probe (``pr``,
    whose ``events`` so far it may read): its result is the event's value (what
    can be said of the text so far). Without a probe a tag costs one test.
    The tool engine uses the kinds ``"call"``, ``"name"`` and ``"args"`` (see
    tool/base.py).
    """
    return _Tag(kind, p, partial)


class _Const(P):
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def parse(self, s: str, pos: int, eof: bool, pr: "Probe | None" = None) -> Result:
        return Ok(pos, self.value)


def const(value: Any) -> P:
    """Matches the empty string with ``value``."""
    return _Const(value)


# ------------------------------------------------------------------ safe_text
def partial_tail(buffer: str, markers: Iterable[str]) -> int:
    """Start of the longest suffix of ``buffer`` that is a proper prefix of a marker.

    ``len(buffer)`` when no suffix could begin a marker.
    """
    n = len(buffer)
    best = n
    for m in markers:
        if not m:
            continue
        # candidate starts: the marker's first character in the last len(m) - 1 positions,
        # leftmost first (the longest suffix); called per token, so no slice per position
        first = m[0]
        i = buffer.find(first, max(n - len(m) + 1, 0))
        while i != -1 and i < best:
            if m.startswith(buffer[i:]):
                best = i
                break
            i = buffer.find(first, i + 1)
    return best


def find_first(buffer: str, markers: Iterable[str], start: int = 0) -> tuple[int, str]:
    """Earliest full occurrence of any marker at or after ``start``.

    Returns ``(index, marker)``; ``(-1, "")`` when none. On a tie the longest
    marker wins (``<tool_calls>`` over ``<tool``).
    """
    best = -1
    found = ""
    for m in markers:
        j = buffer.find(m, start)
        if j != -1 and (best == -1 or j < best or (j == best and len(m) > len(found))):
            best = j
            found = m
    return best, found


def safe_text(buffer: str, markers: Iterable[str]) -> int:
    """Length of the longest prefix of ``buffer`` that cannot be part of a marker.

    It contains no full marker and does not end with the beginning of one, so
    it can be released as plain text now; the rest is held until more text
    decides it.
    """
    markers = tuple(markers)
    j, _ = find_first(buffer, markers)
    if j != -1:
        return j
    return partial_tail(buffer, markers)


def loads_or_none(raw: str) -> Any:
    """``json.loads`` that answers None on invalid JSON (callers check kind)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None
