"""Reasoning formats beyond plain ``<think>``: other markers, framing to drop, toggles.

Each family is the ``<think>`` split of think.py (a `ThinkStyle` with the
family's own start/end markers) plus, where the format needs it:

- ``rewrite``: marker spellings rewritten in the output before the split. An
  alias becomes the canonical marker (Granite's "Here is my response:" for
  "Here's my response:"); framing that carries no text becomes "" (Cohere's
  ``<|START_RESPONSE|>``, Inkling's ``<|message_model|>``). Held back while
  a chunk ends with the beginning of one, so every split of the output gives
  the same result;
- ``discard_reasoning``: the reasoning span is dropped, not returned (MiniCPM-V
  and Kimi K3 with thinking switched off: a stray thought block is not shown);
- ``reasoning_label``: a role label the model writes first inside reasoning
  (Gemma 4's ``thought\\n``), removed from the start of the reasoning (its blocks joined);
- ``content_lstrip``: newlines right after the end of reasoning are framing
  (Granite 4.2 thinking writes ``\\n</think>\\n``);
- ``reasoning_lstrip`` / ``content_rstrip``: whitespace at the start of
  reasoning and at the very end of the content is framing (Cohere's melody);
- ``implicit_ends``: markers that end reasoning even without a tool parser
  (K2 Horizon's ``<ifm|tool_calls>``); they stay in the content;
- ``content_prefix``: text put before the content (MiniMax M2's
  ``append_think`` variant gives the whole output back as content with the
  ``<think>`` its template opened);
- ``answer_wrapper``: a (start, end) pair that may wrap the answer (ERNIE 4.5's
  ``<response>…</response>``). Only a start marker that opens the answer (after
  the newline run following the end of reasoning) is a wrapper: that newline
  run and the marker are dropped, the text inside is kept as written, the end
  marker and the newline run after it are dropped, and text after them is kept.
  A wrapper cut off by the end of output loses its start marker all the same
  (it is structure, seen as it streams). Elsewhere the markers are text.

A family may depend on the request's chat-template kwargs (Kimi K3's
``thinking``, K2 Horizon's ``reasoning_effort`` picks its markers): register
a function from the kwargs to a `Family`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.parsers.combinators import partial_tail
from vllm_pyfrontend.parsers.reasoning.registry import register_reasoning_parser
from vllm_pyfrontend.parsers.reasoning.think import ThinkReasoningParser, ThinkStyle
from vllm_pyfrontend.parsers.rewrite import MarkerRewriter


@dataclass(frozen=True, slots=True)
class Family:
    style: ThinkStyle
    rewrite: tuple[tuple[str, str], ...] = ()
    discard_reasoning: bool = False
    reasoning_label: str = ""
    content_lstrip: bool = False
    content_prefix: str = ""
    reasoning_lstrip: bool = False
    content_rstrip: bool = False
    implicit_ends: tuple[str, ...] = ()
    answer_wrapper: tuple[str, str] | None = None


FamilyFor = Callable[[Mapping[str, Any]], Family]


class _AnswerWrapper:
    """Streaming removal of an answer wrapper (``Family.answer_wrapper``) from the content."""

    def __init__(self, start: str, end: str) -> None:
        self.start, self.end = start, end
        self.state = "lead"  # lead -> inside -> after -> plain (or lead -> plain)
        self.buf = ""

    def feed(self, text: str, eof: bool = False) -> str:
        buf = self.buf + text
        self.buf = ""
        out: list[str] = []
        while buf:
            if self.state == "lead":
                body = buf.lstrip("\n")
                if body.startswith(self.start):
                    buf = body[len(self.start) :]
                    self.state = "inside"
                    continue
                if not eof and self.start.startswith(body):
                    self.buf = buf  # newlines and maybe the start of the marker
                    break
                self.state = "plain"
            elif self.state == "inside":
                j = buf.find(self.end)
                if j == -1:
                    cut = len(buf) if eof else partial_tail(buf, (self.end,))
                    out.append(buf[:cut])
                    self.buf = buf[cut:]
                    break
                out.append(buf[:j])
                buf = buf[j + len(self.end) :]
                self.state = "after"
            elif self.state == "after":
                buf = buf.lstrip("\n")
                if buf:
                    self.state = "plain"
            else:
                out.append(buf)
                break
        return "".join(out)


class FamilyReasoningParser:
    """``feed(text, token_ids=None)`` / ``finish()``, like `ThinkReasoningParser`: ``inner``
    (the split with the family's style) plus the family's rewriting and framing."""

    def __init__(self, family: Family, inner: ThinkReasoningParser) -> None:
        self.family = family
        self.inner = inner
        self._rw = MarkerRewriter(family.rewrite) if family.rewrite else None
        self._prefix = family.content_prefix
        self._label_buf: str | None = "" if family.reasoning_label else None
        self._lstrip = family.content_lstrip and not self.inner.identity
        self._r_lstrip = family.reasoning_lstrip
        self._held_ws = ""  # content whitespace that may be the end of the output
        self._wrapper = _AnswerWrapper(*family.answer_wrapper) if family.answer_wrapper else None

    @property
    def reasoning_tokens(self) -> int:
        return 0 if self.family.discard_reasoning else self.inner.reasoning_tokens

    @property
    def gate(self) -> Any:
        return self.inner.gate

    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        if self._rw is not None:
            text = self._rw.feed(text)
        return self._post(self.inner.feed(text, token_ids), final=False)

    def finish(self) -> AssistantDelta | None:
        first = None
        if self._rw is not None:
            tail = self._rw.feed("", eof=True)
            if tail:
                first = self.inner.feed(tail)
        last = self.inner.finish()
        reasoning = _cat(first, last, "reasoning")
        content = _cat(first, last, "content")
        return self._post(AssistantDelta(content=content or None, reasoning=reasoning or None), final=True)

    def _post(self, d: AssistantDelta | None, final: bool) -> AssistantDelta | None:
        reasoning = (d.reasoning or "") if d is not None else ""
        content = (d.content or "") if d is not None else ""
        if self._wrapper is not None:
            content = self._wrapper.feed(content, eof=final)
        if self.family.discard_reasoning:
            reasoning = ""
        elif self._label_buf is not None:
            reasoning = self._strip_label(reasoning, final)
        if self._r_lstrip and reasoning:
            reasoning = reasoning.lstrip()
            if reasoning:
                self._r_lstrip = False
        if self._lstrip and content:
            content = content.lstrip("\n")
            if content:
                self._lstrip = False
        if self.family.content_rstrip:
            content = self._held_ws + content
            body = content.rstrip()
            self._held_ws = "" if final else content[len(body) :]
            content = body
        if self._prefix:
            content = self._prefix + content
            self._prefix = ""
        if not reasoning and not content:
            return None
        return AssistantDelta(content=content or None, reasoning=reasoning or None)

    def _strip_label(self, reasoning: str, final: bool) -> str:
        """The label off the start of the reasoning, all blocks joined (vLLM's Gemma4Parser:
        ``extract_reasoning`` strips it from the joined reasoning): what could still be the
        label is held, whatever comes between (content before a reopened block, the end of a
        block), until the reasoning outgrows it or the output ends."""
        label = self.family.reasoning_label
        buf = self._label_buf + reasoning  # type: ignore[operator]
        if len(buf) < len(label) and label.startswith(buf) and not final:
            self._label_buf = buf
            return ""
        self._label_buf = None
        if buf.startswith(label):
            return buf[len(label) :]
        # the whole reasoning was the label (its newline went with the end marker)
        return "" if buf and buf.rstrip() == label.rstrip() else buf


def _cat(a: AssistantDelta | None, b: AssistantDelta | None, field: str) -> str:
    return "".join((getattr(x, field) or "") for x in (a, b) if x is not None)


def family_parser_maker(family: Family | FamilyFor) -> Callable[..., FamilyReasoningParser]:
    """A registry entry (`register_reasoning_parser`) for a family, fixed or chosen by kwargs."""

    def make(
        tokenizer: Any = None,
        *,
        template_kwargs: Mapping[str, Any] | None = None,
        implicit_ends: Sequence[str] = (),
        **prompt: Any,
    ) -> FamilyReasoningParser:
        """``prompt``: ``prompt_text`` / ``prompt_token_ids``, as `ThinkReasoningParser` takes them."""
        fam = family if isinstance(family, Family) else family(template_kwargs or {})
        inner = ThinkReasoningParser(
            fam.style,
            tokenizer,
            template_kwargs=template_kwargs,
            implicit_ends=tuple(implicit_ends) + fam.implicit_ends,
            **prompt,
        )
        return FamilyReasoningParser(fam, inner)

    return make


# ---------------------------------------------------------------- families
_NO_KW: tuple[str, ...] = ()


def _starts_in(start: str, end: str, thinking: bool, **kw: Any) -> ThinkStyle:
    return ThinkStyle(start=start, end=end, default_thinking=thinking, kwarg_names=_NO_KW, **kw)


def _kw_thinking(kwargs: Mapping[str, Any], names: Sequence[str], default: bool) -> bool:
    values = [kwargs[k] for k in names if kwargs.get(k) is not None]
    return any(bool(v) for v in values) if values else default


COHERE_THINK = ("<|START_THINKING|>", "<|END_THINKING|>")
_COHERE_DROP = (("<|START_RESPONSE|>", ""), ("<|END_RESPONSE|>", ""))
# Command A Reasoning (cmd3) opens thinking itself; Command 4's template opens it.
_COHERE = dict(rewrite=_COHERE_DROP, reasoning_lstrip=True, content_rstrip=True)
COHERE_COMMAND3 = Family(_starts_in(*COHERE_THINK, False, strip_reasoning_tail=True), **_COHERE)
COHERE_COMMAND4 = Family(_starts_in(*COHERE_THINK, True, strip_reasoning_tail=True), **_COHERE)

GEMMA4 = Family(
    _starts_in("<|channel>", "<channel|>", False, strip_reasoning_tail=True, reopen=True),
    reasoning_label="thought\n",
)
# Mistral: a [THINK] block may follow some answer text (reopen), as in vLLM's parsers.
MISTRAL = Family(_starts_in("[THINK]", "[/THINK]", False, strip_reasoning_tail=True, reopen=True))

# ERNIE 4.5: "abc\n</think>\n\n<response>\ndef\n</response>\n" or "abc\n</think>\ndef";
# R1-like (reasoning from the start, no switch).
ERNIE45 = Family(
    ThinkStyle(default_thinking=True, kwarg_names=_NO_KW), answer_wrapper=("<response>", "</response>")
)


def minimax_m3(kwargs: Mapping[str, Any]) -> Family:
    """Content first unless the template opened ``<mm:think>`` (``thinking_mode: "enabled"``)."""
    on = kwargs.get("thinking_mode") == "enabled"
    return Family(_starts_in("<mm:think>", "</mm:think>", on, keep_stray_end=True))

INKLING_THINK = ("<|content_thinking|>", "<|end_message|>")
INKLING = Family(
    _starts_in(*INKLING_THINK, False, strip_reasoning_tail=True),
    rewrite=(
        ("<|message_model|>", ""),
        ("<|content_text|>", ""),
        ("<|content_model_end_sampling|>", "<|end_message|>"),
    ),
)

# Hunyuan A13B: "<think>\n…\n</think>\n<answer>\n…\n</answer>"
HUNYUAN_A13B = Family(
    _starts_in("<think>\n", "\n</think>\n<answer>\n", False, keep_stray_end=True),
    rewrite=(("\n</answer>", ""),)
)

# Granite 3.x: plain-text section headers, two spellings each.
_GRANITE_THINK = "Here's my thought process:"
_GRANITE_RESPONSE = "Here's my response:"
GRANITE = Family(
    _starts_in(_GRANITE_THINK, _GRANITE_RESPONSE, False, keep_stray_end=True),
    rewrite=(
        ("Here is my thought process:", _GRANITE_THINK),
        ("Here is my response:", _GRANITE_RESPONSE),
    ),
)

GRANITE_THINKING = Family(
    ThinkStyle(
        kwarg_names=("enable_thinking",), identity_when_off=True, strip_reasoning_tail=True
    ),
    content_lstrip=True,
)

# MuseGlimmer: reasoning in "to=self<|message|>…<|eom|>" channels, the answer in
# "to=user<|message|>…<|eot|>". Consecutive reasoning channels are one reasoning
# text, joined by a newline.
MUSE_GLIMMER = Family(
    _starts_in("to=self<|message|>", "<|eom|>", False),
    rewrite=(
        ("<|eom|>to=self<|message|>", "\n"),("to=user<|message|>", ""), ("<|eot|>", ""), ("<|start|>assistant", "")),
)

MINIMAX_M2_APPEND_THINK = Family(
    ThinkStyle(default_thinking=False, kwarg_names=_NO_KW, identity_when_off=True),
    content_prefix="<think>",
)


def minicpmv(kwargs: Mapping[str, Any]) -> Family:
    """Thinking unless ``enable_thinking`` is false; off, a stray thought block is dropped."""
    on = _kw_thinking(kwargs, ("enable_thinking",), True)
    return Family(
        ThinkStyle(default_thinking=on, kwarg_names=_NO_KW), discard_reasoning=not on
    )


KIMI_K3_THINK = ("<|open|>think<|sep|>", "<|close|>think<|sep|>")
_KIMI_K3_DROP = (
    ("<|open|>response<|sep|>", ""),
    ("<|close|>response<|sep|>", ""),
    ("<|close|>message<|sep|>", ""),
)


def kimi_k3(kwargs: Mapping[str, Any]) -> Family:
    on = _kw_thinking(kwargs, ("thinking", "enable_thinking"), True)
    return Family(_starts_in(*KIMI_K3_THINK, on), rewrite=_KIMI_K3_DROP, discard_reasoning=not on)


K2_HORIZON_EFFORT = {
    "high": ("<ifm|think>", "</ifm|think>"),
    "medium": ("<ifm|think_fast>", "</ifm|think_fast>"),
    "low": ("<ifm|think_faster>", "</ifm|think_faster>"),
}


def k2_horizon(kwargs: Mapping[str, Any]) -> Family:
    effort = kwargs.get("reasoning_effort") or "high"
    start, end = K2_HORIZON_EFFORT.get(effort, K2_HORIZON_EFFORT["high"])
    return Family(_starts_in(start, end, True), implicit_ends=("<ifm|tool_calls>",))


def hy_v3(kwargs: Mapping[str, Any]) -> Family:
    """Reasoning only when ``reasoning_effort`` asks for it (default "no_think")."""
    effort = kwargs.get("reasoning_effort") or "no_think"
    if effort == "no_think":
        return Family(ThinkStyle(default_thinking=False, kwarg_names=_NO_KW, identity_when_off=True))
    return Family(ThinkStyle(kwarg_names=_NO_KW))


for _name, _family, _note in (
    ("cohere_command3", COHERE_COMMAND3, "Cohere Command A: response markers dropped"),
    ("cohere_command4", COHERE_COMMAND4, "Cohere Command 4: response markers dropped"),
    ("ernie45", ERNIE45, "ERNIE 4.5: <response> answer wrapper"),
    ("gemma4", GEMMA4, "Gemma 4: <|channel> thought, label removed"),
    ("granite", GRANITE, "Granite 3.x: \"Here's my thought process:\""),
    ("granite_thinking_parser", GRANITE_THINKING, "Granite 4.2 thinking: enable_thinking"),
    ("hunyuan_a13b", HUNYUAN_A13B, "Hunyuan-A13B: <answer> wrapper"),
    ("hy_v3", hy_v3, "Hunyuan (HY) V3: thinks when reasoning_effort asks"),
    ("inkling", INKLING, "Inkling typed blocks"),
    ("k2_horizon", k2_horizon, "K2 Horizon: markers by reasoning_effort"),
    ("kimi_k3", kimi_k3, "Kimi K3: XTML channels"),
    ("minicpmv", minicpmv, "MiniCPM-V: thoughts dropped when thinking is off"),
    ("minimax_m2_append_think", MINIMAX_M2_APPEND_THINK, "MiniMax M2, whole output as content"),
    ("minimax_m3", minimax_m3, "MiniMax M3: namespaced markers"),
    ("mistral", MISTRAL, "Mistral: [THINK] … [/THINK]"),
    ("muse_glimmer", MUSE_GLIMMER, "MuseGlimmer (ATEM)"),
):
    register_reasoning_parser(_name, family_parser_maker(_family), note=_note)
