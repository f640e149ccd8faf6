"""Streaming find-and-replace of fixed markers: a reasoning family's marker spellings
(reasoning/families.py) and a format's framing markers dropped from its text
(tool/channels.py)."""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from vllm_pyfrontend.parsers.combinators import find_first, partial_tail


class MarkerRewriter:
    """``feed(text, eof=False)``: the text so far with every marker replaced by its value in
    ``table`` (marker -> replacement). A tail that may still begin a marker is held until more
    text decides it (all of it goes out at ``eof``), so every split of the text gives the same
    result.

    ``strip_before``: whitespace just before a marker is framing, dropped with it (and held
    too while a marker may still follow). ``on_marker(marker)``: told of each marker met.
    """

    __slots__ = ("table", "markers", "strip_before", "on_marker", "buf")

    def __init__(
        self,
        table: Mapping[str, str] | Iterable[tuple[str, str]],
        strip_before: bool = False,
        on_marker: Callable[[str], object] | None = None,
    ) -> None:
        self.table = dict(table)
        self.markers = tuple(self.table)
        self.strip_before = strip_before
        self.on_marker = on_marker
        self.buf = ""

    def feed(self, text: str, eof: bool = False) -> str:
        buf = self.buf + text
        out: list[str] = []
        while True:
            j, m = find_first(buf, self.markers)
            if j == -1:
                break
            out.append(buf[:j].rstrip() if self.strip_before else buf[:j])
            out.append(self.table[m])
            if self.on_marker is not None:
                self.on_marker(m)
            buf = buf[j + len(m) :]
        cut = len(buf) if eof else partial_tail(buf, self.markers)
        if self.strip_before and not eof:
            cut = len(buf[:cut].rstrip())
        out.append(buf[:cut])
        self.buf = buf[cut:]
        return "".join(out)
