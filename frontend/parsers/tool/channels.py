"""Formats that frame the answer itself in markers (helper 15a): kimi_k3 (XTML
channels), inkling (typed blocks), cohere_command3 / cohere_command4.

Besides their tool-call sections these formats wrap the visible answer in
markers (``<|open|>response<|sep|>``, ``<|content_text|>``,
``<|START_RESPONSE|>``) that are not content. `MarkerDropParser` removes them,
with the whitespace just before them (the template's framing), from the text
before the section parser sees it: scanning left to right, holding a tail
that may still become one, so the result does not depend on where the text
was split.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.parsers.combinators import (
    P,
    fmap,
    find_first,
    lit,
    many,
    partial_tail,
    seq,
    tag,
    take_until,
    ws,
)
from vllm_pyfrontend.parsers.tool.base import Section, SectionToolParser, ToolFormat
from vllm_pyfrontend.parsers.tool.json_calls import call_object


class MarkerDropParser:
    """A `SectionToolParser` fed with ``drop`` markers removed from its text."""

    def __init__(self, inner: SectionToolParser, drop: Sequence[str]) -> None:
        self.inner = inner
        self.drop = tuple(drop)
        self._held = ""

    def __getattr__(self, name: str) -> Any:  # fmt, gate, n_calls, tools
        return getattr(self.inner, name)

    def _filter(self, text: str, eof: bool) -> str:
        buf = self._held + text
        out: list[str] = []
        while True:
            j, m = find_first(buf, self.drop)
            if j == -1:
                break
            out.append(buf[:j].rstrip())  # whitespace before a marker is framing
            self.inner.gate.passed(m)
            buf = buf[j + len(m) :]
        if eof:
            cut = len(buf)
        else:
            # hold a possible marker, and the whitespace that may precede one
            cut = partial_tail(buf, self.drop)
            cut = len(buf[:cut].rstrip())
        out.append(buf[:cut])
        self._held = buf[cut:]
        return "".join(out)

    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        return self.inner.feed(self._filter(text, eof=False), token_ids)

    def finish(self) -> AssistantDelta | None:
        rest = self._filter("", eof=True)
        first = self.inner.feed(rest) if rest else None
        last = self.inner.finish()
        if first is None:
            return last
        if last is None:
            return first
        content = (first.content or "") + (last.content or "")
        return AssistantDelta(content=content or None, tool_calls=first.tool_calls + last.tool_calls)


class _Dropping(ToolFormat):
    """A format whose parser drops framing markers (see `MarkerDropParser`)."""

    drop: tuple[str, ...] = ()

    def wrap_parser(self, parser: SectionToolParser) -> MarkerDropParser:
        return MarkerDropParser(parser, self.drop)


def _calls_body(call: P) -> P:
    return fmap(seq(ws(), many(call, sep=ws(), minimum=1), ws()), lambda v: v[1])


# ------------------------------------------------------------------- kimi k3
O, C, S = "<|open|>", "<|close|>", "<|sep|>"


def _attrs(text: str) -> dict[str, str]:
    """``tool="x" index="1"`` -> dict (``&quot;`` and ``&amp;`` decoded)."""
    out: dict[str, str] = {}
    rest = text
    while True:
        rest = rest.lstrip()
        eq = rest.find('="')
        if eq <= 0:
            break
        key = rest[:eq]
        end = rest.find('"', eq + 2)
        if end == -1 or not key.replace("_", "").isalnum():
            raise ValueError("bad attribute")
        out[key] = rest[eq + 2 : end].replace("&quot;", '"').replace("&amp;", "&")
        rest = rest[end + 1 :]
    if rest.strip():
        raise ValueError("bad attribute")
    return out


class _K3Typing:
    """``type="string"`` values are the raw text; other types JSON (raw text when not)."""

    def is_string(self, name: str, key: str, meta: Any) -> bool:
        return meta == "string"

    def streams(self, name: str, key: str, meta: Any, raw: str) -> bool:
        return meta == "string"

    def convert(self, name: str, key: str, meta: Any, text: str) -> Any:
        if meta == "string":
            return text
        try:
            return json.loads(text)
        except ValueError:
            return text


class KimiK3(_Dropping):
    """Kimi K3 (XTML)::

        <|open|>response<|sep|>Let me check.<|close|>response<|sep|>
        <|open|>tools<|sep|>
        <|open|>call tool="get_weather" index="1"<|sep|>
        <|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
        <|close|>call<|sep|>
        <|close|>tools<|sep|>

    ``type="string"`` values are the raw text; other types are JSON (raw text
    when not). The response channel's markers are not content.
    """

    drop = (f"{O}response{S}", f"{C}response{S}", f"{C}message{S}")

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        # streamed as the arguments arrive (`xml_args`): string-typed values as text
        from vllm_pyfrontend.parsers.tool.xml_calls import XmlParam, xml_args, xml_call

        def head(v: list[Any]) -> tuple[str, str]:
            attrs = _attrs(v[2])
            return attrs.get("key", ""), attrs.get("type", "string")

        param = XmlParam(
            fmap(seq(lit(f"{O}argument"), ws(1), take_until(S), lit(S)), head),
            f"{C}argument{S}",
        )

        def tool_name(v: list[Any]) -> str:
            name = _attrs(v).get("tool", "")
            if not name:
                raise ValueError("no tool name")
            return name

        typing = _K3Typing()
        make = xml_call(typing)
        call = tag(
            "call",
            fmap(
                seq(
                    lit(f"{O}call"),
                    ws(1),
                    tag("name", fmap(take_until(S), tool_name)),
                    lit(S),
                    ws(),
                    xml_args(param, typing),
                    ws(),
                    lit(f"{C}call{S}"),
                ),
                lambda v: make(v[2], v[5]),
            ),
        )
        self.sections = {f"{O}tools{S}": Section(body=_calls_body(call), ends=(f"{C}tools{S}",))}


# -------------------------------------------------------------------- inkling
class Inkling(_Dropping):
    """Inkling typed blocks::

        <|message_model|><|content_text|>Let me check.<|end_message|>
        <|message_model|><|content_invoke_tool_json|>{"name": "get_weather", "args": {...}}<|end_message|>

    Block markers are not content; a tool block's JSON carries ``name`` and ``args``.
    (Thinking blocks are the reasoning parser's.)
    """

    drop = (
        "<|message_model|>",
        "<|content_text|>",
        "<|end_message|>",
        "<|content_model_end_sampling|>",
        "<|content_invoke_tool_text|>",
        "<|content_tool_error|>",
    )

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        # streamed as written (`call_object`): args optional, an object when given
        body = fmap(seq(ws(), call_object("args", encoded=False)), lambda v: [v[1]])
        self.sections = {"<|content_invoke_tool_json|>": Section(body=body)}


# -------------------------------------------------------------- cohere command
class CohereCommand(_Dropping):
    """Cohere Command A (cmd3) / cmd4::

        <|START_RESPONSE|>Let me check.<|END_RESPONSE|>
        <|START_ACTION|>[
            {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}
        ]<|END_ACTION|>
    """

    drop: tuple[str, ...] = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")

    def __init__(self, tools: Sequence[Any] = (), cmd4: bool = False) -> None:
        if cmd4:  # Command A Vision / MoE also frame the answer in <|START_TEXT|>
            self.drop = self.drop + ("<|START_TEXT|>", "<|END_TEXT|>")
        array = fmap(
            seq(
                ws(),
                lit("["),
                ws(),
                many(
                    call_object("parameters", "arguments", name_keys=("tool_name", "name"), encoded=False),
                    sep=seq(ws(), lit(","), ws()),
                    minimum=1,
                ),
                ws(),
                lit("]"),
                ws(),
            ),
            lambda v: v[3],
        )
        self.sections = {"<|START_ACTION|>": Section(body=array, ends=("<|END_ACTION|>",))}
