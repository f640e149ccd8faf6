"""`ResponseTemplateStream`: one choice's output through the template's regions (reasoning,
content and tool calls), the ``hf`` parsers built from it and their pipeline.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any, Iterable, Sequence

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.parsers.joint import JointPipeline, JointStream
from vllm_pyfrontend.parsers.reasoning.registry import register_custom_reasoning_parser
from vllm_pyfrontend.parsers.response_template.casting import calls_of
from vllm_pyfrontend.parsers.response_template.json_walker import JsonCallWalker, json_call_shape
from vllm_pyfrontend.parsers.response_template.scanner import RegionScanner
from vllm_pyfrontend.parsers.response_template.template import (
    HF,
    TOOLS,
    THINKING,
    CONTENT,
    Template,
    serving_template,
    template_of,
)
from vllm_pyfrontend.parsers.tool.registry import register_custom_tool_parser

log = logging.getLogger(__name__)


# --------------------------------------------------------------- the stream
class ResponseTemplateStream(JointStream):
    """One choice's output -> reasoning / content / tool-call deltas, by the template.

    ``reasoning``: the thinking field is reasoning (else its text is content, its
    delimiters dropped, as vLLM does); ``tools``: tool regions are calls (else their text,
    delimiters included, is content). Same ``feed``/``finish`` contract as the other parsers.
    """

    def __init__(
        self,
        template: Template,
        *,
        reasoning: bool,
        tools: bool,
        request_tools: Sequence[Any] | None = None,
        prefix: str = "",
    ) -> None:
        self.template = template
        self.want_reasoning = reasoning
        self.want_tools = tools
        self.scanner = RegionScanner(template, prefix, request_tools)
        self._props = self.scanner.props
        tf = template.fields.get(TOOLS)
        self._shape = json_call_shape(tf) if tf is not None else None
        self._walker: JsonCallWalker | None = None
        self._announced: JsonCallWalker | None = None  # the walker whose call was announced
        self._sent = 0  # arguments text sent for the walker's call
        self._region_start = 0
        self._body = ""  # the open tool region's text, as its chunks are routed
        self._finished = False
        super().__init__()

    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        if self._finished:
            return None
        thinking_before = self.scanner.current == THINKING
        self._route(self.scanner.feed(text) if text else [])
        if token_ids is not None and (thinking_before or self.scanner.current == THINKING):
            self.reasoning_tokens += len(list(token_ids))
        return self._take()

    def finish(self) -> AssistantDelta | None:
        if self._finished:
            return None
        self._finished = True
        if len(self.scanner.input) > self.scanner.prefix_len:  # nothing generated: nothing to close
            self._route(self.scanner.finish())
        return self._take()

    # -- internals
    def _route(self, events: list[tuple]) -> None:
        for ev in events:
            kind, name = ev[0], ev[1]
            if name == TOOLS:
                self._tool_event(ev)
            elif kind == "chunk":
                if name == THINKING and self.want_reasoning:
                    self._reasoning.append(ev[2])
                elif name in (THINKING, CONTENT):
                    self._content.append(ev[2])

    def _raw(self, start: int, end: int) -> str:
        return self.scanner.input[max(start, self.scanner.prefix_len) : end]

    def _tool_event(self, ev: tuple) -> None:
        kind = ev[0]
        if not self.want_tools:
            self._content.append(ev[2] if kind == "chunk" else self._raw(ev[2], ev[3]))
            return
        if kind == "open":
            self._region_start = max(ev[2], self.scanner.prefix_len)
            self._body = ""
            self._sent = 0
            self._walker = None
            if self._shape is not None:
                captured = ev[4].get(self._shape.name_capture) if self._shape.name_capture else None
                if self._shape.name_capture is None or captured:
                    self._walker = JsonCallWalker(self._shape, captured or None, self._props)
            return
        if kind == "chunk":
            self._body += ev[2]  # (the scanner may be past this region when its events are routed)
            if self._walker is not None and not self._walker.dead:
                self._walker.advance(self._body)
                self._stream_args()
            return
        walker, self._walker = self._walker, None
        announced = walker is not None and self._announced is walker
        self._announced = None
        if kind == "close":
            calls = calls_of(ev[4])
            if announced:
                self._finish_streamed(walker, calls)
                return
            if not calls:
                log.warning("response_template: a tool region without a complete call is given back as content")
                self._content.append(self._raw(self._region_start, ev[3]))
                return
            for name, arguments in calls:
                self._announce(name)
                self._args(arguments)
            return
        # "bad": the region did not parse
        if announced:
            # committed: the announced call is completed with valid JSON
            self._args(walker.args_text[self._sent :] + walker.closers())
        else:
            self._content.append(self._raw(self._region_start, ev[3]))

    def _stream_args(self) -> None:
        w = self._walker
        # announced once the name is known and the arguments have begun validly, even if the
        # text turns invalid later in the same chunk: decided on the text, not on the chunking
        if w is None or w.name is None or not w.args_begun or not w.args_text:
            return
        if self._announced is not w:
            self._announce(w.name)
            self._announced = w
        if len(w.args_text) > self._sent:
            self._args(w.args_text[self._sent :])
            self._sent = len(w.args_text)

    def _finish_streamed(self, w: JsonCallWalker, calls: list[tuple[str, str]]) -> None:
        final = calls[0][1] if len(calls) == 1 and calls[0][0] == w.name else None
        sent = w.args_text[: self._sent]
        if final is not None and final.startswith(sent):
            if len(final) > len(sent):
                self._args(final[len(sent) :])
        else:
            log.warning("response_template: a streamed call's final arguments differ from what was sent")
            self._args(w.args_text[len(sent) :] + w.closers())
        self._sent = 0

    def _announce(self, name: str) -> None:
        self._calls.append({
            "index": self._n_calls,
            "id": "call_" + secrets.token_hex(12),
            "type": "function",
            "function": {"name": name, "arguments": ""},
        })
        self._n_calls += 1

    def _args(self, text: str) -> None:
        if text:
            self._calls.append({"index": self._n_calls - 1, "function": {"arguments": text}})


# ------------------------------------------------------------ parsers & pipeline
_SERVED_CACHE: dict[int, tuple[dict, Template]] = {}


def _template_for(tokenizer: Any) -> Template:
    """The tokenizer's template as served (compiled once per template object)."""
    spec = template_of(tokenizer)
    if spec is None:
        raise ValueError("The hf parser requires `response_template` metadata in the tokenizer configuration")
    hit = _SERVED_CACHE.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    served = serving_template(spec)
    if len(_SERVED_CACHE) > 64:
        _SERVED_CACHE.clear()
    _SERVED_CACHE[id(spec)] = (spec, served)
    return served


#: prompt tokens decoded first when looking for the start anchor (the whole prompt only when the
#: anchor is not in them): a long prompt is not decoded per choice
_PROMPT_TAIL = 512


def _prefix(tokenizer: Any, prompt_text: str | None, prompt_ids: Sequence[int] | None,
            template: Template | None = None) -> str:
    """The prompt's text as the parser's prefix (vLLM decodes the prompt's ids, special tokens
    kept); from its last start anchor on is all that counts."""
    if prompt_text is not None:
        return prompt_text
    if not prompt_ids or tokenizer is None or not hasattr(tokenizer, "decode"):
        return ""

    def decode(ids: list[int]) -> str:
        try:
            return tokenizer.decode(ids, skip_special_tokens=False)
        except TypeError:
            return tokenizer.decode(ids)

    ids = list(prompt_ids)
    if template is not None and len(ids) > _PROMPT_TAIL:
        tail = decode(ids[-_PROMPT_TAIL:])
        last = None
        for m in template.start.re.finditer(tail):
            last = m
        if last is not None and last.start() > 0:  # the tail's first characters may be cut
            return tail[last.start() :]
    return decode(ids)


def tool_stream(tokenizer: Any = None, tools: Sequence[Any] | None = None) -> ResponseTemplateStream:
    """``get_tool_parser("hf")``: calls and content (thinking text is content)."""
    return ResponseTemplateStream(_template_for(tokenizer), reasoning=False, tools=True, request_tools=tools)


def reasoning_stream(
    tokenizer: Any = None,
    *,
    prompt_text: str | None = None,
    prompt_token_ids: Sequence[int] | None = None,
    **_: Any,
) -> ResponseTemplateStream:
    """``get_reasoning_parser("hf")``: reasoning and content (tool regions are content)."""
    template = _template_for(tokenizer)
    return ResponseTemplateStream(
        template, reasoning=True, tools=False, prefix=_prefix(tokenizer, prompt_text, prompt_token_ids, template),
    )


class ResponseTemplatePipeline(JointPipeline):
    """`AssistantPipeline`'s interface over one `ResponseTemplateStream` (both parsers).

    ``tool``: set by the caller to a forced-call parser (tool_choice required / named). The
    engine's structured outputs then force the call's JSON from the first token, so the output
    goes to it directly: the template's regions do not apply (a ``<think>`` the prompt opened
    would otherwise take the forced call as reasoning). vLLM refuses these tool choices with hf.
    """

    def __init__(self, stream: ResponseTemplateStream) -> None:
        super().__init__(stream)

    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        if self.tool is not None:  # a forced call: the output is its JSON
            return self.tool.feed(text)
        return self.stream.feed(text, token_ids)

    def finish(self) -> AssistantDelta | None:
        if self.tool is not None:
            return self.tool.finish()
        return self.stream.finish()


def is_response_template(reasoning: str | None, tool: str | None) -> bool:
    return HF in (reasoning, tool)


def make_response_template_pipeline(
    reasoning: str | None,
    tool: str | None,
    tokenizer: Any,
    prompt_ids: Sequence[int] | None = None,
    tools: Sequence[Any] | None = None,
    prompt_text: str | None = None,
) -> ResponseTemplatePipeline:
    template = _template_for(tokenizer)
    stream = ResponseTemplateStream(
        template, reasoning=reasoning == HF, tools=tool == HF, request_tools=tools,
        prefix=_prefix(tokenizer, prompt_text, prompt_ids, template),
    )
    return ResponseTemplatePipeline(stream)


register_custom_tool_parser(HF, tool_stream, note="the checkpoint's own response_template")
register_custom_reasoning_parser(HF, reasoning_stream, note="the checkpoint's own response_template")
