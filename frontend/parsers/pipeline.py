"""Reasoning, then tool calls: one incremental transformer for a choice.

Contract for the caller (frontend/api/openai/chat_routes.py):

- Build one stream per choice with `make_assistant_stream`; feed it the
  detokenized text of each engine step, and that step's new token ids
  (``feed(text, token_ids)``), then call ``finish()`` once at the end. Each call
  returns an `AssistantDelta` or None; a non-streaming response concatenates
  them (same code path, same result).
- Detokenize with ``skip_special_tokens=False`` when a reasoning or tool parser
  is configured: markers such as ``<tool_call>`` are special tokens for some
  models and must reach the parser as text. Token ids let the parsers tell a
  real marker token from the same characters written as ordinary tokens
  (special.py). Feeding text alone also works (every occurrence then counts).
- ``reasoning_tokens`` (usage) counts output tokens inside reasoning, from ids.
- ``n_tool_calls`` > 0 at the end means ``finish_reason: "tool_calls"``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.parsers.harmony import is_harmony, make_harmony_pipeline
from vllm_pyfrontend.parsers.reasoning import get_reasoning_parser
from vllm_pyfrontend.parsers.response_template import is_response_template, make_response_template_pipeline
from vllm_pyfrontend.parsers.reasoning.think import ThinkReasoningParser
from vllm_pyfrontend.parsers.tool import get_tool_parser
from vllm_pyfrontend.parsers.tool.base import SectionToolParser


class AssistantPipeline:
    """``feed``/``finish`` over an optional reasoning parser and tool parser."""

    def __init__(
        self,
        reasoning: ThinkReasoningParser | None,
        tool: SectionToolParser | None,
    ) -> None:
        self.reasoning = reasoning
        self.tool = tool

    @property
    def reasoning_tokens(self) -> int:
        return self.reasoning.reasoning_tokens if self.reasoning is not None else 0

    @property
    def n_tool_calls(self) -> int:
        return self.tool.n_calls if self.tool is not None else 0

    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        if self.reasoning is None and self.tool is not None:
            # Tool parser only (the common tool-call setup), once per token: what _tool_step
            # does for that case, without the intermediate deltas.
            t = self.tool.feed(text, token_ids)
            if t is None:
                return None
            out = AssistantDelta(content=t.content, tool_calls=t.tool_calls)
            return None if out.is_empty() else out
        ids = list(token_ids) if token_ids is not None else None
        if self.reasoning is not None:
            r = self.reasoning.feed(text, ids)
        else:
            r = AssistantDelta(content=text) if text else None
        return self._tool_step(r, ids, final=False)

    def finish(self) -> AssistantDelta | None:
        r = self.reasoning.finish() if self.reasoning is not None else None
        return self._tool_step(r, None, final=True)

    def _tool_step(
        self, r: AssistantDelta | None, ids: list[int] | None, final: bool
    ) -> AssistantDelta | None:
        reasoning = r.reasoning if r is not None else None
        content = r.content if r is not None else None
        if self.tool is None:
            if not reasoning and not content:
                return None
            return AssistantDelta(content=content, reasoning=reasoning)
        if ids is not None:
            self.tool.gate.note_ids(ids)  # before spending: ids precede their text
        if reasoning:
            self.tool.gate.passed(reasoning)  # spend credits of tokens in reasoning
        t = self.tool.feed(content or "")
        if final:
            t2 = self.tool.finish()
            t = _merge(t, t2)
        out = AssistantDelta(
            content=t.content if t is not None else None,
            reasoning=reasoning or None,
            tool_calls=t.tool_calls if t is not None else [],
        )
        return None if out.is_empty() else out


def _merge(a: AssistantDelta | None, b: AssistantDelta | None) -> AssistantDelta | None:
    if a is None:
        return b
    if b is None:
        return a
    content = (a.content or "") + (b.content or "")
    return AssistantDelta(
        content=content or None,
        reasoning=((a.reasoning or "") + (b.reasoning or "")) or None,
        tool_calls=a.tool_calls + b.tool_calls,
    )


def make_assistant_stream(
    reasoning: str | None,
    tool: str | None,
    tokenizer: Any,
    prompt_ids: Sequence[int] | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    tools: Sequence[Any] | None = None,
    prompt_text: str | None = None,
) -> AssistantPipeline:
    """The parsers for one choice, by vLLM names (None: not configured).

    ``tools``: the request's tools as OpenAI dicts (None or empty with a tool
    parser still parses calls the model makes, as vLLM does).
    """
    if is_harmony(reasoning, tool):  # gpt-oss: one harmony stream does both (parsers/harmony.py)
        return make_harmony_pipeline(reasoning, tool)  # type: ignore[return-value]
    if is_response_template(reasoning, tool):  # `hf`: the checkpoint's response_template does both
        return make_response_template_pipeline(  # type: ignore[return-value]
            reasoning, tool, tokenizer, prompt_ids, tools, prompt_text
        )
    tool_parser = get_tool_parser(tool, tokenizer, tools) if tool else None
    reasoning_parser = None
    if reasoning:
        implicit = tuple(tool_parser.fmt.sections) if tool_parser is not None else ()
        # llama3_json's bare "{" is not a marker that can end reasoning
        implicit = tuple(m for m in implicit if len(m) > 1)
        reasoning_parser = get_reasoning_parser(
            reasoning,
            tokenizer,
            prompt_text=prompt_text,
            prompt_token_ids=prompt_ids,
            template_kwargs=template_kwargs,
            implicit_ends=implicit,
        )
    return AssistantPipeline(reasoning_parser, tool_parser)
