"""The streaming engine shared by all tool-call formats.

A format is a set of *sections*: a start marker, the end marker(s) that close
it (or none: the grammar's own end closes it, e.g. a JSON array), and a
combinator grammar for the text in between that yields the calls. The engine
is a two-state transformer:

- CONTENT: release text as content up to `safe_text` (held text may still be
  a start marker); on a start marker that is a real token (see special.py)
  switch to SECTION.
- SECTION: buffer until an end marker at which the grammar matches the body;
  emit the section's calls. A body the grammar rejects (failure is monotone,
  so this is decided by the text, not by where chunks split) gives the start
  marker back as content and rescans the body as content: malformed output is
  never lost. At the end of output an unclosed section is accepted if its
  body matches, else recovered the same way.

Arguments stream as they are generated. While a section is open, its body
grammar is run on the partial body under a `probe` (combinators.py): parsers
tagged ``"call"``, ``"name"`` and ``"args"`` report the completed calls, the
open call's name and a safe prefix of its arguments (streaming.py). A call is
announced (id, name, first argument text) as soon as its name is complete and
its arguments have begun, and its arguments flow from then on; the
concatenated deltas are the final arguments text. Formats
whose grammars carry no tags still work: their calls come out whole when the
section closes.

An announced call cannot be taken back (a client has seen it). So a call is
*committed* once its arguments have begun: if the section turns out malformed
later, or the output ends inside it, the committed calls are completed (the
open call's arguments closed into valid JSON by `ArgsPrefix.closers`) and the
text from where the body stopped being valid is content. This is decided on
the text alone (the longest prefix of the body that is still valid), never on
where chunks split: the result is the same streamed or not. Malformed output
whose first call never got a complete name is recovered whole, as before.

The partial body is parsed again only when it has grown by a fraction of its
length, so a long section costs O(n); while the model writes one string value
(a file's contents) the open call's ``tail`` extends the arguments without
re-parsing at all. Whitespace-only runs next to a section (the template's
newlines around calls) are dropped; all other text is kept.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.parsers.combinators import (
    NEED,
    Fail,
    Ok,
    P,
    end,
    find_first,
    partial_tail,
    probe,
    seq,
)
from vllm_pyfrontend.parsers.special import SpecialGate
from vllm_pyfrontend.parsers.tool.streaming import ArgsPrefix

def new_call_id() -> str:
    """``call_`` + 24 random alphanumerics (hex: cheap and in the OpenAI shape)."""
    return "call_" + secrets.token_hex(12)


@dataclass(slots=True)
class Call:
    """One parsed tool call: ``arguments`` is JSON object text."""

    name: str
    arguments: str
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Section:
    """What follows one start marker: the body grammar and its end markers.

    ``body`` is matched against the whole text between the start and end
    markers and yields ``list[Call]``. With ``ends`` empty the section closes
    where ``body`` stops matching (it must be self-delimiting at its end).
    """

    body: P
    ends: tuple[str, ...] = ()
    #: The start marker is also the body's first text (llama3_json's ``{``).
    keep_start: bool = False
    #: At the end of output, an unclosed section counts if its body matches.
    #: Only for bodies that end self-delimited (JSON, ``</invoke>``): a bare
    #: name cut by max_tokens must not become a call to a truncated name.
    eof_closes: bool = True


class ToolFormat:
    """A tool-call grammar: sections keyed by start marker."""

    sections: dict[str, Section] = {}
    #: Start markers count only at the beginning of the output (after
    #: whitespace), e.g. llama3_json's bare ``{``.
    only_at_start: bool = False


@dataclass(slots=True)
class _Streamed:
    """A call announced while its section is open."""

    index: int
    name: str
    sent: int = 0  # length of the arguments text sent so far


@dataclass(slots=True)
class _Info:
    """One call of a partial body, as the probe saw it."""

    name: str | None
    id: str | None
    args: ArgsPrefix | None
    complete: bool


def calls_of_events(events: list[tuple[str, int, int, Any]]) -> list[_Info]:
    """Completed calls and the open call of a probed partial body."""
    infos: list[_Info] = []
    name: str | None = None
    call_id: str | None = None
    args: ArgsPrefix | None = None
    for kind, _start, stop, value in events:
        if kind == "name":
            if stop != -1:
                if isinstance(value, tuple):
                    name, call_id = value
                else:
                    name = value
        elif kind == "args":
            if stop == -1:
                args = value
            elif isinstance(value, str):
                args = ArgsPrefix(value, "")
            elif getattr(value, "args_text", None) is not None:
                args = ArgsPrefix(value.args_text, "")  # streaming.ParsedArgs
            else:
                args = None  # complete, but its text comes with the call
        elif kind == "call":
            if stop != -1:
                for call in value if isinstance(value, list) else [value]:
                    if isinstance(call, Call):
                        infos.append(_Info(call.name, call.id, ArgsPrefix(call.arguments, ""), True))
            else:
                # announced once its arguments have begun validly (not at the
                # bare name: ``"arguments": [1]`` after a name is still text)
                infos.append(_Info(name if args is not None else None, call_id, args, False))
            name = call_id = None
            args = None
    return infos


class SectionToolParser:
    """Incremental tool-call parser over released text (see module docstring)."""

    def __init__(
        self,
        fmt: ToolFormat,
        tokenizer: Any = None,
        tools: Sequence[Any] | None = None,
        gate: SpecialGate | None = None,
    ) -> None:
        self.fmt = fmt
        self.tools = list(tools or [])
        self._starts: tuple[str, ...] = tuple(fmt.sections)
        # fast path: text without any marker's first character is plain content
        self._firsts = frozenset(m[0] for m in self._starts)
        all_markers = list(self._starts)
        for sec in fmt.sections.values():
            all_markers.extend(sec.ends)
        self.gate = gate if gate is not None else SpecialGate(tokenizer, all_markers)
        self._buf = ""
        self._in_section: str | None = None  # the start marker of the open section
        # The open section's end markers, when it has any (the per-token check in `feed`).
        self._ends: tuple[str, ...] | None = None
        self._search_from = 0  # end-marker search resumes here
        self._longest = 0  # the open section's longest end marker
        self._next_check = 0  # buffer length at which to parse the partial body again
        self._ws = ""  # held whitespace (dropped next to a section)
        self._after_section = False
        self._text_seen = False  # non-whitespace content released (only_at_start)
        self._n_calls = 0
        self._content: list[str] = []
        self._calls: list[dict[str, Any]] = []
        # streaming state of the open section
        self._streamed: list[_Streamed] = []
        self._tail: Any = None  # extends the open call's arguments without parsing
        self._tail_at = 0  # buffer position the tail has consumed up to
        self._more: list[str] = []  # texts after `_buf` that only the tail has read so far
        self._more_len = 0
        # The first characters of the section end markers (text without any leaves a section open).
        self._end_firsts = frozenset(m[0] for sec in fmt.sections.values() for m in sec.ends)

    # ------------------------------------------------------------- interface
    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        if token_ids is not None:
            self.gate.note_ids(token_ids)
        if text:
            ends = self._ends
            tail = self._tail
            if tail is not None and ends is not None and self._end_firsts.isdisjoint(text):
                # An open string value streaming (a long argument's tokens): when everything
                # before this text went to the tail, and no end marker of the section can begin
                # in it, `_section_step` would find no end and hand the tail this text. The
                # text joins the buffer later (`_more`), not by a copy of the buffer per token.
                n = len(self._buf) + self._more_len
                if self._tail_at == n:
                    out = tail.extend(text)
                    if out is not None:
                        self._more.append(text)
                        self._more_len += len(text)
                        n += len(text)
                        self._tail_at = n
                        at = n - self._longest + 1
                        if at > self._search_from:
                            self._search_from = at
                        if out:
                            self._args_delta(self._streamed[-1], out)
                        return self._take()
                    self._tail = tail = None  # the value ends in it (as `_stream_step` decides)
            if self._more:
                self._join_more()
            buf = self._buf = self._buf + text
            if ends is not None and tail is None and len(buf) < self._next_check:
                # Most tokens of a call: inside an open section, no partial parse due, no
                # string value streaming. Unless an end marker may have begun, nothing
                # changes but the buffer (what _section_step would find, without its work).
                # (`_take`'s own check, inline: most tokens have nothing to take.)
                at = self._search_from
                if len(ends) == 1:
                    found = buf.find(ends[0], at) != -1
                else:
                    found = find_first(buf, ends, at)[0] != -1
                if not found:
                    at2 = len(buf) - self._longest + 1
                    if at2 > at:
                        self._search_from = at2
                    return None if not self._content and not self._calls else self._take()
            elif ends is None and self._in_section is None and buf[0] in self._firsts and not self.fmt.only_at_start:
                # A start marker written over several tokens (DSML's ``<｜DSML｜tool_calls>`` is
                # six): while the whole buffer is still a proper prefix of one, the content step
                # would hold it all and release nothing (`partial_tail` cuts at 0).
                n = len(buf)
                for m in self._starts:
                    if len(m) > n and m.startswith(buf):
                        return None if not self._content and not self._calls else self._take()
            self._run(eof=False)
        return self._take()

    def finish(self) -> AssistantDelta | None:
        if self._more:
            self._join_more()
        self._run(eof=True)
        if self._ws and not self._after_section:
            self._content.append(self._ws)
        self._ws = ""
        return self._take()

    @property
    def n_calls(self) -> int:
        return self._n_calls

    # ------------------------------------------------------------ internals
    def _join_more(self) -> None:
        """The texts the tail took since the buffer was last read, onto the buffer."""
        self._buf += "".join(self._more)
        self._more.clear()
        self._more_len = 0

    def _take(self) -> AssistantDelta | None:
        if not self._content and not self._calls:
            return None  # most tokens (inside a section, or held text)
        content = "".join(self._content)
        calls = self._calls
        self._content = []
        self._calls = []
        if not content and not calls:
            return None
        return AssistantDelta(content=content or None, tool_calls=calls)

    def _release(self, text: str) -> None:
        """Plain content; trailing whitespace is held (it may touch a section)."""
        if not text:
            return
        self.gate.passed(text)
        text = self._ws + text
        stripped = text.rstrip()
        if not stripped:
            self._ws = text
            return
        if self._after_section:
            # whitespace between a section and text is kept (it is not only
            # framing); only whitespace-only runs next to sections are dropped
            self._after_section = False
        self._content.append(stripped)
        self._ws = text[len(stripped) :]
        self._text_seen = True

    def _announce(self, name: str, call_id: str | None) -> _Streamed:
        if not self._streamed:
            self._ws = ""  # framing whitespace before the section
            self._after_section = True
        i = self._n_calls
        self._n_calls += 1
        self._calls.append(
            {
                "index": i,
                "id": call_id or new_call_id(),
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
        )
        st = _Streamed(i, name)
        self._streamed.append(st)
        return st

    def _args_delta(self, st: _Streamed, text: str) -> None:
        if not text:
            return
        st.sent += len(text)
        last = self._calls[-1] if self._calls else None
        if last is not None and last["index"] == st.index and "id" not in last:
            last["function"]["arguments"] += text
        else:
            self._calls.append({"index": st.index, "function": {"arguments": text}})

    def _stream(self, infos: Sequence[_Info], closing: bool = False) -> None:
        """Send what ``infos`` add to what was sent. With ``closing`` the open
        call (if announced) is completed with its closers."""
        for k, info in enumerate(infos):
            if k < len(self._streamed):
                st = self._streamed[k]
            else:
                if not info.name:
                    return
                if not (info.complete or closing or (info.args is not None and info.args.text)):
                    return  # goes out with its first argument text (one chunk less)
                st = self._announce(info.name, info.id)
            # (each prefix extends the last one sent: streaming.py's contract,
            # checked under every split of the output by the tests)
            a = info.args
            if a is not None and len(a.text) > st.sent:
                self._args_delta(st, a.text[st.sent :])
            if not info.complete:
                if closing:
                    if not st.sent:
                        self._args_delta(st, "{}")
                    elif a is not None and len(a.text) == st.sent:
                        self._args_delta(st, a.closers)
                self._tail = a.tail if a is not None and not closing else None
                return

    def _emit_calls(self, calls: list[Call]) -> None:
        """A section closed with ``calls``: send what streaming has not."""
        self._stream([_Info(c.name, c.id, ArgsPrefix(c.arguments, ""), True) for c in calls])
        if not calls:
            return
        self._ws = ""
        self._after_section = True

    def _run(self, eof: bool) -> None:
        while True:
            if self._in_section is None:
                if not self._content_step(eof):
                    return
            elif not self._section_step(eof):
                return

    def _content_step(self, eof: bool) -> bool:
        """Release content / open a section. True when the state changed."""
        buf = self._buf
        if not buf:
            return False
        starts = self._starts
        if self.fmt.only_at_start:
            if self._text_seen:
                starts = ()
            else:
                k = len(buf) - len(buf.lstrip())
                if k == len(buf):
                    if eof:
                        self._release(buf)
                        self._buf = ""
                    else:
                        # hold leading whitespace, it may precede a start marker
                        pass
                    return False
                rest = buf[k:]
                for m in starts:
                    if rest.startswith(m) and self.gate.is_real(m):
                        self._release(buf[:k])
                        return self._open(m, k)
                if not eof and any(m.startswith(rest) for m in starts):
                    return False
                starts = ()
                self._text_seen = True
        if not starts or not any(c in buf for c in self._firsts):
            self._release(buf)
            self._buf = ""
            return False
        j, m = find_first(buf, starts)
        if j == -1:
            cut = len(buf) if eof else partial_tail(buf, starts)
            self._release(buf[:cut])
            self._buf = buf[cut:]
            return False
        self._release(buf[:j])
        if not self.gate.is_real(m):
            self._release(m)  # a lookalike written as ordinary tokens
            self._buf = buf[j + len(m) :]
            return True
        return self._open(m, j)

    def _open(self, marker: str, at: int) -> bool:
        self._in_section = marker
        self._ends = self.fmt.sections[marker].ends or None
        if self.fmt.sections[marker].keep_start:
            self._buf = self._buf[at:]
        else:
            self.gate.passed(marker)
            self._buf = self._buf[at + len(marker) :]
        self._search_from = 0
        self._next_check = 0
        ends = self.fmt.sections[marker].ends
        self._longest = max(len(e) for e in ends) if ends else 0
        self._streamed = []
        self._tail = None
        self._tail_at = 0
        return True

    def _section_step(self, eof: bool) -> bool:
        marker = self._in_section
        assert marker is not None
        sec = self.fmt.sections[marker]
        buf = self._buf
        if not sec.ends:
            if eof:
                r = sec.body.parse(buf, 0, True)
                if isinstance(r, Ok):
                    return self._close(r.value, r.end)
                return self._failed(marker, len(buf))
            return self._stream_step(sec, marker, len(buf))
        while True:
            p, e = find_first(buf, sec.ends, self._search_from)
            if p == -1:
                break
            body = buf[:p]
            r = sec.body(body, eof=True)
            if isinstance(r, Ok):
                return self._close(r.value[0], p + len(e))
            if sec.body(body, eof=False) is NEED:
                self._search_from = p + 1  # the end marker lies inside the body
                continue
            return self._failed(marker, p)
        self._search_from = max(self._search_from, len(buf) - self._longest + 1, 0)
        if eof:
            r = sec.body(buf, eof=True) if sec.eof_closes else None
            if isinstance(r, Ok):
                return self._close(r.value[0], len(buf))
            return self._failed(marker, len(buf))
        return self._stream_step(sec, marker, -1)

    def _stream_step(self, sec: Section, marker: str, region: int) -> bool:
        """The section is still open; ``buf[:region]`` is certainly body text
        (-1: up to a possible end marker at the end of the buffer). Stream
        what it adds; notice early that it cannot be valid."""
        buf = self._buf
        if self._tail is None and len(buf) < self._next_check:
            return False
        if region == -1:
            region = partial_tail(buf, sec.ends)
        if self._tail is not None and region > self._tail_at:
            out = self._tail.extend(buf[self._tail_at : region])
            if out is not None:
                self._tail_at = region
                if out:
                    self._args_delta(self._streamed[-1], out)
                return False
            self._tail = None
        # Parse the partial body (an optimisation for failures, whose outcome
        # is the same later; for streaming, what decides the chunks sent):
        # amortised, so that a long section costs O(n) overall.
        if len(buf) < self._next_check:
            return False
        self._next_check = len(buf) + max(32, len(buf) // 2)
        r, events = probe(sec.body, buf[:region], 0, False)
        if isinstance(r, Fail):
            return self._failed(marker, region)
        if not sec.ends and isinstance(r, Ok) and r.end < region:
            return self._close(r.value, r.end)
        self._stream(calls_of_events(events))
        if self._tail is not None:
            self._tail_at = region
        return False

    def _close(self, calls: list[Call], consumed: int) -> bool:
        if not calls:  # a section that calls nothing is not a tool call
            assert self._in_section is not None
            return self._failed(self._in_section, consumed)
        self.gate.passed(self._buf[:consumed])
        self._buf = self._buf[consumed:]
        self._in_section = None
        self._ends = None
        self._emit_calls(calls)
        self._streamed = []
        self._tail = None
        return True

    def _valid_prefix(self, sec: Section, limit: int) -> int:
        """Length of the longest prefix of ``buf[:limit]`` that the body grammar
        does not reject (failure is monotone: a binary search)."""
        buf = self._buf
        check = sec.body if not sec.ends else seq(sec.body, end())
        lo, hi = 0, limit  # prefix lo is valid (the empty body may not be: then 0)
        if not isinstance(check.parse(buf[:hi], 0, False), Fail):
            return hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if isinstance(check.parse(buf[:mid], 0, False), Fail):
                hi = mid
            else:
                lo = mid
        return lo

    def _failed(self, marker: str, limit: int) -> bool:
        """The body cannot be completed (or the output ended inside it)."""
        sec = self.fmt.sections[marker]
        valid = self._valid_prefix(sec, limit)
        # a valid prefix that reaches into the section's end marker (a call's
        # own end missing, e.g. ``</tool_call`` read in ``</tool_calls>``) ends
        # the section at that marker, which is consumed, not split into content
        consumed = valid
        for e in sec.ends:
            q = self._buf.find(e, max(0, valid - len(e) + 1), limit)
            if q != -1 and q < valid:
                valid, consumed = q, q + len(e)
                break
        # (closing: the open call's short values count too, see streaming.min_open)
        _, events = probe(sec.body, self._buf[:valid], 0, False, closing=True)
        infos = calls_of_events(events)
        if not self._streamed and not (infos and infos[0].name):
            return self._recover(marker)
        # committed: complete the calls, the rest is content
        self._stream(infos, closing=True)
        self.gate.passed(self._buf[:consumed])
        self._buf = self._buf[consumed:]
        self._in_section = None
        self._ends = None
        self._streamed = []
        self._tail = None
        self._ws = ""
        self._after_section = True
        return True

    def _recover(self, marker: str) -> bool:
        """Malformed section: its start marker is content; rescan the body."""
        self._in_section = None
        self._ends = None
        self._streamed = []
        self._tail = None
        if self.fmt.sections[marker].keep_start:
            self.gate.passed(marker)
            self._buf = self._buf[len(marker) :]
        # the marker's credits were spent on opening; release it as text
        text = self._ws + marker
        self._ws = ""
        self._content.append(text)
        self._text_seen = True
        self._after_section = False
        return True
