"""Reasoning split for ``<think>…</think>`` models: reasoning vs content, streaming.

The starting state is a fact about the prompt, not a guess about the output:
a template that already opened ``<think>`` (DeepSeek V4, R1, GLM, MiniMax M2)
leaves the model inside reasoning, one that closed it (``</think>`` at the end,
thinking switched off) leaves it in content. Only a prompt that says neither
falls back to the chat-template kwargs (``thinking`` / ``enable_thinking`` /
``reasoning_effort``) and then to the model family's default.

In REASONING, text up to ``</think>`` is reasoning; a duplicate ``<think>`` is
absorbed; a tool-call start marker (passed in as ``implicit_ends``) ends
reasoning and stays in the text, for the tool parser. In CONTENT, a stray
``</think>`` token is absorbed (as vLLM does), and ``<think>`` opens reasoning
only before the answer has begun: once reasoning has ended or answer text has
been released, a ``<think>`` (in a tool call's arguments, a code sample) is
text, not a new reasoning block. Markers must be real tokens when token ids
are supplied (special.py): the ``</think>`` written inside code is ordinary
tokens and stays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.parsers.combinators import find_first, partial_tail
from vllm_pyfrontend.parsers.special import SpecialGate

THINK_START = "<think>"
THINK_END = "</think>"

# After the last marker, at most this much whitespace-only prompt text still
# counts as "the prompt ends here" (the template's trailing newlines).
_TAIL_TOKENS = 8


@dataclass(frozen=True, slots=True)
class ThinkStyle:
    """How one model family marks and toggles reasoning."""

    start: str = THINK_START
    end: str = THINK_END
    #: default when neither the prompt nor the kwargs decide
    default_thinking: bool = True
    #: kwargs that switch thinking (any False-y one switches it off)
    kwarg_names: tuple[str, ...] = ("thinking", "enable_thinking")
    #: ``reasoning_effort: "none"`` switches thinking off
    effort_none_disables: bool = False
    #: thinking off -> no reasoning parsing at all (everything is content)
    identity_when_off: bool = False
    #: whitespace right before the end marker is framing, not reasoning
    strip_reasoning_tail: bool = False
    #: an end marker met in content once the answer has begun is text (kept), not
    #: absorbed as a stray token (one before any answer text is still dropped)
    keep_stray_end: bool = False
    #: a start marker opens reasoning even after answer text (Gemma 4's channel may follow
    #: a preamble); by default a start marker once the answer has begun is text
    reopen: bool = False
    #: without prompt evidence the output starts as the answer, and reasoning
    #: only if it opens ``<think>`` itself (GLM-4.5: its template leaves the
    #: opening to the model)
    opens_in_output: bool = False


def thinking_from_kwargs(style: ThinkStyle, kwargs: Mapping[str, Any] | None) -> bool:
    kwargs = kwargs or {}
    values = [kwargs[k] for k in style.kwarg_names if k in kwargs and kwargs[k] is not None]
    thinking = any(bool(v) for v in values) if values else style.default_thinking
    if style.effort_none_disables and kwargs.get("reasoning_effort") == "none":
        thinking = False
    return thinking


def prompt_state(
    style: ThinkStyle,
    tokenizer: Any = None,
    prompt_text: str | None = None,
    prompt_token_ids: Sequence[int] | None = None,
) -> bool | None:
    """True: the prompt ends inside reasoning; False: it closed it; None: no evidence."""
    if prompt_token_ids is not None and tokenizer is not None:
        start_id = tokenizer.token_to_id(style.start)
        end_id = tokenizer.token_to_id(style.end)
        if start_id is not None and end_id is not None:
            ids = list(prompt_token_ids)
            added = getattr(tokenizer, "added_token_ids", None) or {}
            for i in range(len(ids) - 1, -1, -1):
                tid = ids[i]
                if tid == start_id:
                    # the generation prompt opened reasoning, unless another
                    # special token follows (a turn boundary: the <think> was
                    # in an earlier message, not the prompt's end)
                    if any(t in added for t in ids[i + 1 :]):
                        return None
                    return True
                if tid == end_id:
                    tail = ids[i + 1 :]
                    if len(tail) <= _TAIL_TOKENS and not tokenizer.decode(
                        tail, skip_special_tokens=False
                    ).strip():
                        return False
                    return None
            return None
    if prompt_text is not None:
        s = prompt_text.rfind(style.start)
        e = prompt_text.rfind(style.end)
        if s > e:
            return True
        if e != -1 and not prompt_text[e + len(style.end) :].strip():
            return False
    return None


class ThinkReasoningParser:
    """Incremental ``feed(text, token_ids=None)`` / ``finish()`` reasoning split."""

    def __init__(
        self,
        style: ThinkStyle,
        tokenizer: Any = None,
        prompt_text: str | None = None,
        prompt_token_ids: Sequence[int] | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        implicit_ends: Sequence[str] = (),
    ) -> None:
        self.style = style
        kw_thinking = thinking_from_kwargs(style, template_kwargs)
        from_prompt = prompt_state(style, tokenizer, prompt_text, prompt_token_ids)
        self.identity = style.identity_when_off and not kw_thinking and from_prompt is not True
        if from_prompt is not None:
            self.in_reasoning = from_prompt
        else:
            self.in_reasoning = kw_thinking and not style.opens_in_output
        if self.identity:
            self.in_reasoning = False
        self.implicit_ends = tuple(implicit_ends)
        self.gate = SpecialGate(tokenizer, (style.start, style.end) + self.implicit_ends)
        self._start_id = tokenizer.token_to_id(style.start) if tokenizer is not None else None
        self._end_id = tokenizer.token_to_id(style.end) if tokenizer is not None else None
        self._count_state = self.in_reasoning
        # a tool call opening inside reasoning ends it (implicit_ends): their
        # added tokens stop the count too
        self._tool_ids: frozenset[int] = (
            SpecialGate(tokenizer, self.implicit_ends).token_ids
            if tokenizer is not None and self.implicit_ends
            else frozenset()
        )
        self.reasoning_tokens = 0
        self._buf = ""
        self._held_ws = ""  # reasoning whitespace that may precede the end marker
        self._settled = False  # the answer has begun: no more reasoning markers
        self._reasoning: list[str] = []
        self._content: list[str] = []

    # ------------------------------------------------------------- interface
    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        if token_ids is not None:
            ids = list(token_ids)
            self.gate.note_ids(ids)
            self._count(ids)
        if text:
            if self.identity:
                self._content.append(text)
            else:
                self._buf += text
                self._run(eof=False)
        return self._take()

    def finish(self) -> AssistantDelta | None:
        if not self.identity:
            self._run(eof=True)
            if self.in_reasoning:
                self._leave_reasoning(drop_ws=False)
        return self._take()

    # ------------------------------------------------------------ internals
    def _count(self, ids: list[int]) -> None:
        """Reasoning token count from ids (usage): tokens while inside reasoning."""
        if self.identity:
            return
        for tid in ids:
            if tid == self._start_id:
                self._count_state = True
            elif tid == self._end_id or tid in self._tool_ids:
                self._count_state = False
            elif self._count_state:
                self.reasoning_tokens += 1

    def _take(self) -> AssistantDelta | None:
        reasoning = "".join(self._reasoning)
        content = "".join(self._content)
        self._reasoning = []
        self._content = []
        if not reasoning and not content:
            return None
        return AssistantDelta(content=content or None, reasoning=reasoning or None)

    def _emit(self, text: str) -> None:
        if not text:
            return
        self.gate.passed(text)
        self._out(text)

    def _out(self, text: str) -> None:
        if not self.in_reasoning:
            self._content.append(text)
            if not self._settled and not text.isspace():
                self._settled = True
            return
        if not self.style.strip_reasoning_tail:
            self._reasoning.append(text)
            return
        text = self._held_ws + text
        body = text.rstrip()
        self._held_ws = text[len(body) :]
        if body:
            self._reasoning.append(body)

    def _leave_reasoning(self, drop_ws: bool) -> None:
        if self._held_ws and not drop_ws:
            self._reasoning.append(self._held_ws)
        self._held_ws = ""
        self.in_reasoning = False
        self._settled = True

    def _run(self, eof: bool) -> None:
        st = self.style
        while self._buf:
            buf = self._buf
            if self.in_reasoning:
                markers = (st.start, st.end) + self.implicit_ends
            elif self._settled and not st.reopen:
                markers = (st.end,)
            else:
                markers = (st.start, st.end)
            if not any(m[0] in buf for m in markers):
                self._emit(buf)  # fast path: no marker can start in this text
                self._buf = ""
                return
            j, m = find_first(buf, markers)
            if j == -1:
                cut = len(buf) if eof else partial_tail(buf, markers)
                self._emit(buf[:cut])
                self._buf = buf[cut:]
                return
            self._emit(buf[:j])
            self._buf = buf[j:]
            if self._settled and not self.in_reasoning and m != st.end and not st.reopen:
                continue  # the answer began before this marker: it is text
            if m in self.implicit_ends and m not in (st.start, st.end):
                if not self.gate.is_real(m):
                    # the syntax quoted in ordinary tokens: still reasoning
                    self.gate.passed(m)
                    self._out(m)
                    self._buf = self._buf[len(m) :]
                    continue
                # a tool call begins inside reasoning: reasoning is over, the
                # marker belongs to the content (and the tool parser)
                self._leave_reasoning(drop_ws=True)
                continue
            real = self.gate.is_real(m)
            self.gate.passed(m)
            self._buf = self._buf[len(m) :]
            if not real or (m == st.end and not self.in_reasoning and st.keep_stray_end and self._settled):
                self._out(m)
            elif m == st.end and self.in_reasoning:
                self._leave_reasoning(drop_ws=True)
            elif m == st.start:
                self.in_reasoning = True
