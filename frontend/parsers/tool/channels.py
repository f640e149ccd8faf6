"""Formats that frame the answer itself in markers: inkling (typed blocks),
cohere_command3 / cohere_command4 (and kimi_k3's XTML channels, in kimi.py).

Besides their tool-call sections these formats wrap the visible answer in
markers (``<|open|>response<|sep|>``, ``<|content_text|>``,
``<|START_RESPONSE|>``) that are not content. `MarkerDropParser` removes them,
with the whitespace just before them (the template's framing), from the text
before the section parser sees it: scanning left to right, holding a tail
that may still become one, so the result does not depend on where the text
was split.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.parsers.combinators import fmap, lit, many, seq, ws
from vllm_pyfrontend.parsers.rewrite import MarkerRewriter
from vllm_pyfrontend.parsers.tool.base import Section, SectionToolParser, ToolFormat
from vllm_pyfrontend.parsers.tool.json_grammar import call_object
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser


class MarkerDropParser:
    """A `SectionToolParser` fed with ``drop`` markers removed from its text."""

    def __init__(self, inner: SectionToolParser, drop: Sequence[str]) -> None:
        self.inner = inner
        self.drop = tuple(drop)
        # whitespace before a marker is framing
        self._rw = MarkerRewriter(dict.fromkeys(self.drop, ""), strip_before=True, on_marker=inner.gate.passed)

    def __getattr__(self, name: str) -> Any:  # fmt, gate, n_calls, tools
        return getattr(self.inner, name)

    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        return self.inner.feed(self._rw.feed(text), token_ids)

    def finish(self) -> AssistantDelta | None:
        rest = self._rw.feed("", eof=True)
        first = self.inner.feed(rest) if rest else None
        last = self.inner.finish()
        if first is None:
            return last
        if last is None:
            return first
        content = (first.content or "") + (last.content or "")
        return AssistantDelta(content=content or None, tool_calls=first.tool_calls + last.tool_calls)


class MarkerDropFormat(ToolFormat):
    """A format whose parser drops framing markers (see `MarkerDropParser`)."""

    drop: tuple[str, ...] = ()

    def wrap_parser(self, parser: SectionToolParser) -> MarkerDropParser:
        return MarkerDropParser(parser, self.drop)


# -------------------------------------------------------------------- inkling
class Inkling(MarkerDropFormat):
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
class CohereCommand(MarkerDropFormat):
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


register_tool_parser("inkling", lambda tools: Inkling(tools))
register_tool_parser("cohere_command3", lambda tools: CohereCommand(tools))
register_tool_parser("cohere_command4", lambda tools: CohereCommand(tools, cmd4=True))
