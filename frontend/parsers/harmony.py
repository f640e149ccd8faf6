"""gpt-oss (OpenAI harmony): tool parser ``openai`` and reasoning parser ``openai_gptoss``.

gpt-oss writes messages, not markers inside one text::

    <|channel|>analysis<|message|>reasoning…<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>
    <|start|>assistant<|channel|>final<|message|>The answer.<|return|>

The token format is the ``openai-harmony`` package's: its `StreamableParser`
runs over the harmony encoding's tokens of the released text, and says for
each token which channel and recipient the message has and what content it
added. A message to a function (``to=functions.NAME``, or a bare recipient
that is not a built-in tool) is a tool call whose arguments stream as they
are generated; ``analysis`` is reasoning; ``final`` and ``commentary``
without recipient are content; messages to built-in tools are dropped, as
vLLM does. Text that is not harmony is given back as content.

Text is encoded per chunk, so a chunk must not end inside a special token:
a tail that could begin one is held until the next chunk decides it.
Messages of the same kind are joined by a newline (vLLM's non-streaming
join), in streaming as well.
"""

from __future__ import annotations

import secrets
from typing import Any, Iterable, Sequence

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.parsers.combinators import partial_tail
from vllm_pyfrontend.parsers.joint import JointPipeline, JointStream
from vllm_pyfrontend.parsers.reasoning.registry import register_custom_reasoning_parser
from vllm_pyfrontend.parsers.tool.registry import register_custom_tool_parser

_SPECIALS = (
    "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>",
    "<|call|>", "<|endoftext|>", "<|startoftext|>",
)  # fmt: skip
_BUILTIN = frozenset(("python", "browser", "container"))

_ENCODING: Any = None


def harmony_encoding() -> Any:
    """The gpt-oss harmony encoding (loaded once per process)."""
    global _ENCODING
    if _ENCODING is None:
        from openai_harmony import HarmonyEncodingName, load_harmony_encoding

        _ENCODING = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    return _ENCODING


def _normalize_recipient(recipient: str | None) -> str | None:
    if not recipient:
        return None
    k = recipient.find("<|constrain|>")
    if k != -1:
        recipient = recipient[:k].rstrip()
    return recipient or None


def function_name(recipient: str | None) -> str | None:
    """The function a recipient calls, or None (no recipient, a built-in tool)."""
    if not recipient or recipient.startswith("<|") or recipient == "assistant":
        return None
    if recipient.startswith("functions."):
        return recipient[len("functions.") :] or None
    if recipient.split(".", 1)[0] in _BUILTIN:
        return None
    return recipient


class HarmonyStream(JointStream):
    """One choice's harmony output -> reasoning / content / tool-call deltas.

    ``reasoning``: give the ``analysis`` channel as reasoning (else it is
    dropped); ``tools``: give function messages as tool calls (else dropped).
    Same ``feed(text, token_ids=None)`` / ``finish()`` contract as the other
    parsers; ids are not needed (the text is re-encoded).
    """

    def __init__(self, *, reasoning: bool, tools: bool) -> None:
        from openai_harmony import Role, StreamableParser

        self._make = lambda: StreamableParser(harmony_encoding(), role=Role.ASSISTANT)
        self._parser = self._make()
        self.want_reasoning = reasoning
        self.want_tools = tools
        self._buf = ""
        self._n_messages = 0
        self._msg_raw: list[str] = []  # text of the current message so far
        self._msg_kind: str | None = None  # kind once its content began
        self._msg_emitted = False
        self._seen: dict[str, bool] = {"content": False, "reasoning": False}
        self._broken = False  # not harmony: the rest is content
        super().__init__()

    # ------------------------------------------------------------- interface
    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        if text:
            self._buf += text
            cut = partial_tail(self._buf, _SPECIALS)
            self._process(self._buf[:cut])
            self._buf = self._buf[cut:]
        return self._take()

    def finish(self) -> AssistantDelta | None:
        self._process(self._buf)
        self._buf = ""
        if not self._broken:
            from openai_harmony import HarmonyError

            try:
                self._parser.process_eos()
                self._poll()
            except HarmonyError:
                self._give_back()
        return self._take()

    # ------------------------------------------------------------ internals
    def _process(self, text: str) -> None:
        if not text:
            return
        if self._broken:
            self._content.append(text)
            return
        from openai_harmony import HarmonyError

        enc = harmony_encoding()
        p = self._parser
        for tid in enc.encode(text, allowed_special="all"):
            piece = enc.decode([tid])
            self._msg_raw.append(piece)
            try:
                p.process(tid)
            except HarmonyError:
                self._give_back()
                self._broken = True
                return
            delta = p.last_content_delta
            if delta:
                self._on_content(delta, p.current_channel, _normalize_recipient(p.current_recipient))
            self._poll()

    def _poll(self) -> None:
        messages = self._parser.messages
        if len(messages) > self._n_messages:
            self._n_messages = len(messages)
            self._msg_raw = []
            self._msg_kind = None
            self._msg_emitted = False

    def _kind(self, channel: str | None, recipient: str | None) -> str:
        if function_name(recipient) is not None:
            return "tool"
        if channel == "analysis":
            return "reasoning"
        if channel == "final" or (channel == "commentary" and recipient is None):
            return "content"
        return "ignore"

    def _on_content(self, delta: str, channel: str | None, recipient: str | None) -> None:
        first = self._msg_kind is None
        if first:
            self._msg_kind = self._kind(channel, recipient)
        kind = self._msg_kind
        if kind == "reasoning":
            self.reasoning_tokens += 1
            if self.want_reasoning:
                self._text("reasoning", delta, first)
        elif kind == "content":
            self._text("content", delta, first)
        elif kind == "tool" and self.want_tools:
            if first:
                i = self._n_calls
                self._n_calls += 1
                self._calls.append(
                    {
                        "index": i,
                        "id": "call_" + secrets.token_hex(12),
                        "type": "function",
                        "function": {"name": function_name(recipient), "arguments": ""},
                    }
                )
            self._calls.append({"index": self._n_calls - 1, "function": {"arguments": delta}})
            self._msg_emitted = True

    def _text(self, kind: str, delta: str, first: bool) -> None:
        out = self._reasoning if kind == "reasoning" else self._content
        if first and self._seen[kind]:
            out.append("\n")
        self._seen[kind] = True
        out.append(delta)
        self._msg_emitted = True

    def _give_back(self) -> None:
        """Not harmony (or cut off in a header): the current message's text is content."""
        if not self._msg_emitted:
            raw = "".join(self._msg_raw)
            if raw:
                self._content.append(raw)
        self._msg_raw = []


class HarmonyPipeline(JointPipeline):
    """`AssistantPipeline`'s interface over one `HarmonyStream` (both parsers at once).

    ``tool``: set by the caller to a forced-call parser (tool_choice required /
    named): the harmony content is then fed to it.
    """

    def __init__(self, reasoning: bool, tools: bool) -> None:
        super().__init__(HarmonyStream(reasoning=reasoning, tools=tools))

    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        return self._forced(self.stream.feed(text, token_ids), final=False)

    def finish(self) -> AssistantDelta | None:
        return self._forced(self.stream.finish(), final=True)

    def _forced(self, d: AssistantDelta | None, final: bool) -> AssistantDelta | None:
        if self.tool is None:
            return d
        t = self.tool.feed(d.content or "") if d is not None and d.content else None
        if final:
            t2 = self.tool.finish()
            if t2 is not None:
                t = t2 if t is None else AssistantDelta(
                    content=((t.content or "") + (t2.content or "")) or None,
                    tool_calls=t.tool_calls + t2.tool_calls,
                )
        reasoning = d.reasoning if d is not None else None
        out = AssistantDelta(
            content=t.content if t is not None else None,
            reasoning=reasoning,
            tool_calls=t.tool_calls if t is not None else [],
        )
        return None if out.is_empty() else out


HARMONY_TOOL = "openai"
HARMONY_REASONING = "openai_gptoss"


def is_harmony(reasoning: str | None, tool: str | None) -> bool:
    return reasoning == HARMONY_REASONING or tool == HARMONY_TOOL


def make_harmony_pipeline(
    reasoning: str | None, tool: str | None, *_: Any, **__: Any
) -> HarmonyPipeline:
    return HarmonyPipeline(reasoning == HARMONY_REASONING, tool == HARMONY_TOOL)


def tool_stream(tokenizer: Any = None, tools: Sequence[Any] | None = None) -> HarmonyStream:
    """``get_tool_parser("openai")``: calls and content; analysis dropped."""
    return HarmonyStream(reasoning=False, tools=True)


def reasoning_stream(tokenizer: Any = None, **_: Any) -> HarmonyStream:
    """``get_reasoning_parser("openai_gptoss")``: reasoning and content; calls dropped."""
    return HarmonyStream(reasoning=True, tools=False)


register_custom_tool_parser(HARMONY_TOOL, tool_stream, note="gpt-oss harmony messages")
register_custom_reasoning_parser(HARMONY_REASONING, reasoning_stream, note="gpt-oss harmony channels")
