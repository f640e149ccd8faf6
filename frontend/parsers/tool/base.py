"""The streaming engine shared by all tool-call formats.

A format is a set of *sections*: a start marker, the end marker(s) that close
it (or none: the grammar's own end closes it, e.g. a JSON array), and a
combinator grammar for the text in between that yields the calls. The engine
is a two-state transformer:

- CONTENT: release text as content up to `safe_text` (held text may still be
  a start marker); on a start marker that is a real token (see special.py)
  switch to SECTION.
- SECTION: buffer until an end marker at which the grammar matches the body;
  emit the section's calls whole. A body the grammar rejects (failure is
  monotone, so this is decided by the text, not by where chunks split) gives
  the start marker back as content and rescans the body as content: malformed
  output is never lost. At the end of output an unclosed section is accepted
  if its body matches, else recovered the same way.

Calls are released when their section is complete, not argument by argument:
this is what makes malformed output recoverable as text and the result
independent of chunking. Whitespace-only runs next to a section (the
template's newlines around calls) are dropped; all other text is kept.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.parsers.combinators import (
    NEED,
    Fail,
    Ok,
    P,
    find_first,
    partial_tail,
)
from vllm_pyfrontend.parsers.special import SpecialGate

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
        self._search_from = 0  # end-marker search resumes here
        self._next_check = 0  # buffer length at which to re-check the body prefix
        self._ws = ""  # held whitespace (dropped next to a section)
        self._after_section = False
        self._text_seen = False  # non-whitespace content released (only_at_start)
        self._n_calls = 0
        self._content: list[str] = []
        self._calls: list[dict[str, Any]] = []

    # ------------------------------------------------------------- interface
    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        if token_ids is not None:
            self.gate.note_ids(token_ids)
        if text:
            self._buf += text
            self._run(eof=False)
        return self._take()

    def finish(self) -> AssistantDelta | None:
        self._run(eof=True)
        if self._ws and not self._after_section:
            self._content.append(self._ws)
        self._ws = ""
        return self._take()

    @property
    def n_calls(self) -> int:
        return self._n_calls

    # ------------------------------------------------------------ internals
    def _take(self) -> AssistantDelta | None:
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

    def _emit_calls(self, calls: list[Call]) -> None:
        self._ws = ""  # framing whitespace before the section
        self._after_section = True
        for call in calls:
            i = self._n_calls
            self._n_calls += 1
            self._calls.append(
                {
                    "index": i,
                    "id": call.id or new_call_id(),
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }
            )
            if call.arguments:
                self._calls.append({"index": i, "function": {"arguments": call.arguments}})

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
        if self.fmt.sections[marker].keep_start:
            self._buf = self._buf[at:]
        else:
            self.gate.passed(marker)
            self._buf = self._buf[at + len(marker) :]
        self._search_from = 0
        self._next_check = 0
        return True

    def _section_step(self, eof: bool) -> bool:
        marker = self._in_section
        assert marker is not None
        sec = self.fmt.sections[marker]
        buf = self._buf
        if not sec.ends:
            if not eof and len(buf) < self._next_check:
                return False
            self._next_check = len(buf) + max(32, len(buf) // 2)
            r = sec.body.parse(buf, 0, eof)
            if isinstance(r, Ok):
                return self._close(r.value, r.end)
            if r is NEED:
                return False
            return self._recover(marker)
        longest = max(len(e) for e in sec.ends)
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
            return self._recover(marker)
        self._search_from = max(self._search_from, len(buf) - longest + 1, 0)
        if eof:
            r = sec.body(buf, eof=True) if sec.eof_closes else None
            if isinstance(r, Ok):
                return self._close(r.value[0], len(buf))
            return self._recover(marker)
        # Early failure check (an optimisation: the outcome is the same
        # later), amortised so that a long section costs O(n) overall.
        if len(buf) >= self._next_check:
            self._next_check = len(buf) + max(32, len(buf) // 2)
            if isinstance(sec.body(buf[: partial_tail(buf, sec.ends)], eof=False), Fail):
                return self._recover(marker)
        return False

    def _close(self, calls: list[Call], consumed: int) -> bool:
        if not calls:  # a section that calls nothing is not a tool call
            assert self._in_section is not None
            return self._recover(self._in_section)
        self.gate.passed(self._buf[:consumed])
        self._buf = self._buf[consumed:]
        self._in_section = None
        self._emit_calls(calls)
        return True

    def _recover(self, marker: str) -> bool:
        """Malformed section: its start marker is content; rescan the body."""
        self._in_section = None
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


# ------------------------------------------------------------ value helpers
def tool_properties(tools: Sequence[Any], name: str) -> dict[str, Any]:
    """The JSON-schema properties of tool ``name`` (OpenAI tool dicts)."""
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else getattr(tool, "function", None)
        if fn is None:
            continue
        fn_name = fn.get("name") if isinstance(fn, dict) else getattr(fn, "name", None)
        if fn_name != name:
            continue
        params = fn.get("parameters") if isinstance(fn, dict) else getattr(fn, "parameters", None)
        if isinstance(params, dict) and isinstance(params.get("properties"), dict):
            return params["properties"]
    return {}


_NON_STRING = {"integer", "number", "boolean", "null", "object", "array"}


def coerce_params(params: dict[str, str], props: dict[str, Any]) -> dict[str, Any]:
    """XML-style string values -> JSON values where the tool schema says so.

    A parameter whose schema type is not string and whose text is valid JSON
    is decoded; everything else stays the model's text.
    """
    out: dict[str, Any] = {}
    for key, value in params.items():
        schema = props.get(key)
        types: set[str] = set()
        if isinstance(schema, dict):
            t = schema.get("type")
            if isinstance(t, str):
                types = {t}
            elif isinstance(t, list):
                types = {x for x in t if isinstance(x, str)}
        if types and "string" not in types and types & _NON_STRING:
            try:
                out[key] = json.loads(value)
                continue
            except ValueError:
                pass
        out[key] = value
    return out


def dumps_args(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False)
