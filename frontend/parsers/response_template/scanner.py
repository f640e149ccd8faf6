"""The region scanner: splits output into the template's fields as it streams (the earliest
delimiter wins; one that the next text could still complete or extend is held).
"""

from __future__ import annotations

from typing import Any, Sequence

from vllm_pyfrontend.parsers.response_template.casting import cast_calls, tool_properties
from vllm_pyfrontend.parsers.response_template.template import Anchor, Field, Template
from vllm_pyfrontend.parsers.response_template.values import field_value


# --------------------------------------------------------------- the scanner
class RegionScanner:
    """The regions of the assistant message, incrementally.

    ``feed(text)`` / ``finish()`` return events (tuples):

    - ``("open", field, start, end, captures)``: an explicit opener at ``input[start:end]``
      (the implicit field opens with ``start == end`` on its first text);
    - ``("chunk", field, text)``: text of the open field;
    - ``("close", field, start, end, value)``: the field's value (closer at ``start:end``);
    - ``("bad", field, start, end, error)``: its text did not parse.

    Positions index ``self.input`` (the prompt's part after the start anchor, then the
    output). Events of the prompt part are in ``initial``.
    """

    def __init__(self, template: Template, prefix: str = "", tools: Sequence[Any] | None = None) -> None:
        self.t = template
        self.props = tool_properties(tools)
        self._watches: dict[str | None, list[tuple[bool, Field, Anchor]]] = {}
        self.input = ""
        self._pos = 0
        self.current: str | None = template.implicit
        self.captures: dict[str, str] = {}
        self.body = ""
        self._opened = False
        self._prefix_len = 0
        self.initial: list[tuple] = []
        if prefix:
            last = None
            for m in template.start.re.finditer(prefix):
                last = m.end()
            cut = prefix[last:] if last is not None else prefix
            if cut:
                self.input = cut
                self._run(self.initial, eos=False)
                self._prefix_len = len(cut)

    @property
    def prefix_len(self) -> int:
        return self._prefix_len

    def feed(self, text: str) -> list[tuple]:
        self.input += text
        out: list[tuple] = []
        self._run(out, eos=False)
        return out

    def finish(self) -> list[tuple]:
        out: list[tuple] = []
        self._run(out, eos=True)
        return out

    # -- internals
    def _watch(self) -> list[tuple[bool, Field, Anchor]]:
        """(is_open, field, delimiter) that count now (per current field, built once)."""
        out = self._watches.get(self.current)
        if out is not None:
            return out
        t = self.t
        if self.current is not None and self.current != t.implicit:
            f = t.fields[self.current]
            out = [(False, f, f.close)] if f.close is not None else []
        else:
            out = [(True, f, f.open) for f in t.fields.values() if f.open is not None]
            if t.implicit is not None and t.fields[t.implicit].close is not None:
                f = t.fields[t.implicit]
                out.append((False, f, f.close))
        self._watches[self.current] = out
        return out

    def _grows(self, anchor: Anchor, m: Any) -> bool:
        if m.end() != len(self.input):
            return False
        if m.start() == m.end():
            return True
        return anchor.literals is None or anchor.can_extend

    def _scan(self, eos: bool) -> tuple[tuple | None, int]:
        best = None
        best_key = None
        hold = len(self.input)
        for is_open, f, anchor in self._watch():
            if eos:
                m = anchor.re.search(self.input, self._pos)
            else:
                m = anchor.re.search(self.input, self._pos, partial=True)
            if m is None:
                continue
            if not eos and (m.partial or self._grows(anchor, m)):
                hold = min(hold, m.start())
                continue
            key = (m.start(), m.start() - m.end(), 0 if is_open else 1, f.name)
            if best_key is None or key < best_key:
                best_key, best = key, (is_open, f, m)
        if best is not None and best[2].start() >= hold:
            best = None
        return best, hold

    def _run(self, out: list[tuple], eos: bool) -> None:
        while True:
            best, hold = self._scan(eos)
            if best is not None:
                is_open, f, m = best
                if m.start() > self._pos:
                    self._take(out, self.input[self._pos : m.start()])
                self._pos = m.end()
                if is_open:
                    self._close(out, m.start(), m.start())
                    self.current = f.name
                    self.captures = {k: v for k, v in m.groupdict().items() if v is not None}
                    self.body = ""
                    self._opened = True
                    out.append(("open", f.name, m.start(), m.end(), self.captures))
                else:
                    had = self._opened
                    self._close(out, m.start(), m.end())
                    if not had and m.start() == m.end():
                        break
                continue
            if eos:
                if self._pos < len(self.input):
                    self._take(out, self.input[self._pos :])
                    self._pos = len(self.input)
                self._close(out, self._pos, self._pos)
                break
            if hold > self._pos:
                self._take(out, self.input[self._pos : hold])
                self._pos = hold
            break

    def _take(self, out: list[tuple], text: str) -> None:
        if not text or self.current is None:
            return
        if not self._opened:
            out.append(("open", self.current, self._pos, self._pos, {}))
            self._opened = True
        self.body += text
        text = text[max(0, self._prefix_len - self._pos) :]  # held prompt text is not output
        if text:
            out.append(("chunk", self.current, text))

    def _close(self, out: list[tuple], start: int, end: int) -> None:
        name = self.current
        if name is not None and self._opened:
            f = self.t.fields[name]
            try:
                value = field_value(self.body, f, self.captures)
                if self.props:
                    value = cast_calls(value, self.props)
                if f.join is not None and not isinstance(value, str):
                    raise ValueError(f"Field '{name}': 'join' requires each match to parse to a string")
                out.append(("close", name, start, end, value))
            except (KeyError, TypeError, ValueError) as e:
                out.append(("bad", name, start, end, e))
        self.current = self.t.implicit
        self.captures = {}
        self.body = ""
        self._opened = False
