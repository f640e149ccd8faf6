"""gpt-oss (OpenAI harmony): tool parser ``openai`` and reasoning parser ``openai_gptoss``.

gpt-oss writes messages, not markers inside one text::

    <|channel|>analysis<|message|>reasoning…<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>
    <|start|>assistant<|channel|>final<|message|>The answer.<|return|>

The token format is the ``openai-harmony`` package's: its `StreamableParser`
runs over the output's tokens, and says for each token which channel and
recipient the message has and what content it added. A message to a function
(``to=functions.NAME``, or a bare recipient that is not a built-in tool) is a
tool call whose arguments stream as they are generated; ``analysis`` is
reasoning; ``final`` and ``commentary`` without recipient are content;
messages to built-in tools are dropped. Messages of the same kind are joined
by a newline (vLLM's non-streaming join), in streaming as well.

What is not harmony is taken as vLLM's HarmonyParser takes it: a token the
parser refuses (text after a message's end that is not ``<|start|>``, a stray
stop token, a header that does not parse) is skipped; output that ends inside a
message header (text with no harmony at all, a cut-off header) is given back as
content at the end: the text since the last complete message, decoded whole.

Tokens: the engine's ids when the caller gives them (``feed(text, token_ids)``,
the serving path); else the text is encoded here, each chunk on its own, with
the harmony encoding's special tokens as such (a chunk's tail that could begin
one is held until the next chunk decides it). Both give the same result, and
so does any split of the text: the parser's refusals happen only at special
tokens or where every token is refused, its header is parsed from the decoded
header text, and content deltas hold incomplete UTF-8 until it completes; how
ordinary text is cut into tokens does not change what comes out.
"""

from __future__ import annotations

import re
import secrets
from typing import Any, Iterable, Sequence

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.parsers.joint import JointPipeline, JointStream
from vllm_pyfrontend.parsers.reasoning.registry import register_custom_reasoning_parser
from vllm_pyfrontend.parsers.tool.registry import register_custom_tool_parser

_BUILTIN = frozenset(("python", "browser", "container"))

_ENCODING: Any = None
# set with the encoding (_load): the special tokens' ids by text, every proper prefix of one,
# the longest one's length; the ids the parser's states turn on
_SPECIAL_IDS: dict[str, int] = {}
_SPECIAL_PREFIXES: frozenset[str] = frozenset()
_SPECIAL_MAX = 0
_FIRST_SPECIAL_ID = 0
_MESSAGE_ID = -1
_STOP_IDS: frozenset[int] = frozenset()
_ENCODE_ORDINARY: Any = None
#: what could be a special token's text (each is checked against the encoding's)
_SPECIAL_RE = re.compile(r"<\|[^|<>]+\|>")

# the parser's states (mirrored) and the messages' kinds
_EXPECT_START, _HEADER, _CONTENT_STATE = 0, 1, 2
_IGNORE, _CONTENT, _REASONING, _TOOL = 0, 1, 2, 3


def harmony_encoding() -> Any:
    """The gpt-oss harmony encoding (loaded once per process)."""
    global _ENCODING
    if _ENCODING is None:
        from openai_harmony import HarmonyEncodingName, load_harmony_encoding

        enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
        _load_tables(enc)
        _ENCODING = enc
    return _ENCODING


def _load_tables(enc: Any) -> None:
    global _SPECIAL_IDS, _SPECIAL_PREFIXES, _SPECIAL_MAX, _FIRST_SPECIAL_ID, _MESSAGE_ID
    global _STOP_IDS, _ENCODE_ORDINARY
    names = sorted(enc.special_tokens_set)
    if not all(_SPECIAL_RE.fullmatch(s) for s in names):  # the text mode relies on it
        raise RuntimeError("harmony encoding: a special token not of the form <|...|>")
    tids = enc.encode("".join(names), allowed_special="all")  # one call: one token each
    if len(tids) != len(names):
        raise RuntimeError("harmony encoding: a special token that is not one token")
    ids = dict(zip(names, tids))
    _SPECIAL_IDS = ids
    _SPECIAL_PREFIXES = frozenset(s[:k] for s in ids for k in range(1, len(s)))
    _SPECIAL_MAX = max(map(len, ids))
    _FIRST_SPECIAL_ID = min(ids.values())
    _MESSAGE_ID = ids["<|message|>"]
    _STOP_IDS = frozenset(enc.stop_tokens())
    inner = getattr(enc, "_inner", None)
    if inner is not None and hasattr(inner, "encode"):  # the Rust encoder: no per-call set of
        _ENCODE_ORDINARY = lambda text: inner.encode(text, [])  # noqa: E731 (1,091 specials)
    else:  # pragma: no cover - another openai-harmony
        _ENCODE_ORDINARY = lambda text: enc.encode(text, disallowed_special=())  # noqa: E731


def _encode_ordinary(text: str) -> list[int]:
    try:
        return _ENCODE_ORDINARY(text)
    except UnicodeEncodeError:  # lone surrogates (as openai-harmony's encode does)
        return _ENCODE_ORDINARY(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))


def _encode(text: str) -> list[int]:
    """``encode(text, allowed_special="all")``: special tokens' texts as their ids, the rest
    as ordinary text."""
    out: list[int] = []
    pos = 0
    for m in _SPECIAL_RE.finditer(text):
        tid = _SPECIAL_IDS.get(m.group())
        if tid is None:
            continue
        if m.start() > pos:
            out += _encode_ordinary(text[pos : m.start()])
        out.append(tid)
        pos = m.end()
    if pos < len(text):
        out += _encode_ordinary(text[pos:])
    return out


def _special_tail(text: str) -> int:
    """Start of the longest suffix of ``text`` that could begin a special token."""
    n = len(text)
    i = text.find("<", max(0, n - _SPECIAL_MAX + 1))
    while i != -1:
        if text[i:] in _SPECIAL_PREFIXES:
            return i
        i = text.find("<", i + 1)
    return n


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
    parsers. With ``token_ids`` (the engine's ids, what the serving path
    always gives) the ids are parsed and the text is not looked at; without
    (``token_ids`` None: tests, text-only callers) the text is encoded, which
    gives the same result (see the module docstring). A stream is fed one way
    or the other throughout.
    """

    def __init__(self, *, reasoning: bool, tools: bool) -> None:
        from openai_harmony import HarmonyError, Role, StreamableParser

        parser = StreamableParser(harmony_encoding(), role=Role.ASSISTANT)
        # the Rust parser itself where the wrapper exposes it (a method call less per token)
        self._parser = getattr(parser, "_inner", parser)
        self._process_token = self._parser.process
        self._error = HarmonyError
        self.want_reasoning = reasoning
        self.want_tools = tools
        self._buf = ""  # text mode: a tail that could begin a special token
        self._state = _HEADER  # the parser's state, mirrored (see _step)
        self._msg_ids: list[int] = []  # ids parsed since the last message completed (vLLM's)
        self._msg_kind = _IGNORE  # the current message's kind, once its header is parsed
        self._msg_started = False  # the current message gave some text
        self._recipient: str | None = None  # the current message's (normalized)
        self._seen: dict[int, bool] = {_CONTENT: False, _REASONING: False}
        super().__init__()

    # ------------------------------------------------------------- interface
    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        if token_ids is not None:
            step = self._step
            for tid in token_ids:
                step(tid)
        elif text:
            buf = self._buf + text if self._buf else text
            cut = _special_tail(buf)
            if cut:
                self._steps(_encode(buf[:cut]))
            self._buf = buf[cut:]
        return self._take()

    def finish(self) -> AssistantDelta | None:
        if self._buf:
            self._steps(_encode(self._buf))
            self._buf = ""
        try:
            self._parser.process_eos()
        except self._error:
            # output ended inside a message header: the text since the last complete
            # message is content (vLLM's HarmonyParser.flush: decoded whole, channel final)
            text = harmony_encoding().decode(self._msg_ids)
            if text:
                self._msg_started = False
                self._text(_CONTENT, text)
        self._msg_ids = []
        self._state = _EXPECT_START
        return self._take()

    # ------------------------------------------------------------ internals
    def _steps(self, ids: list[int]) -> None:
        step = self._step
        for tid in ids:
            step(tid)

    def _step(self, tid: int) -> None:
        """One token through the parser, as vLLM's HarmonyParser.process_chunk takes it: a
        token the parser refuses is skipped (text outside messages, a stray stop token);
        the others are kept for the give-back at the end until a message completes.

        The parser's state is mirrored here from the tokens (openai-harmony's
        StreamableParser, strict): ExpectStart takes only <|start|> (the rest is an
        error) into Header; Header takes anything, <|message|> parses the header
        (an error: back to ExpectStart) into Content; Content ends at a stop token."""
        state = self._state
        try:
            self._process_token(tid)
        except self._error:
            if state == _HEADER:  # a header that does not parse (at <|message|>)
                self._state = _EXPECT_START
            return
        if state == _CONTENT_STATE:
            if tid in _STOP_IDS:  # the message is complete
                self._state = _EXPECT_START
                self._msg_ids = []
                return
            self._msg_ids.append(tid)
            kind = self._msg_kind
            if kind == _IGNORE:
                return
            if kind == _REASONING and tid < _FIRST_SPECIAL_ID:
                self.reasoning_tokens += 1
            delta = self._parser.last_content_delta
            if delta:
                if kind == _TOOL:
                    self._arguments(delta)
                elif kind == _CONTENT or self.want_reasoning:
                    self._text(kind, delta)
            return
        self._msg_ids.append(tid)
        if state == _EXPECT_START:  # it was <|start|>
            self._state = _HEADER
        elif tid == _MESSAGE_ID:  # the header parsed
            self._state = _CONTENT_STATE
            self._begin_message()

    def _begin_message(self) -> None:
        p = self._parser
        role = p.current_role
        role = getattr(role, "value", role)
        recipient = _normalize_recipient(p.current_recipient)
        channel = p.current_channel
        self._msg_started = False
        self._recipient = recipient
        if role != "assistant":  # vLLM keeps assistant messages only
            self._msg_kind = _IGNORE
        elif function_name(recipient) is not None:
            self._msg_kind = _TOOL if self.want_tools else _IGNORE
        elif channel == "analysis":
            self._msg_kind = _REASONING
        elif channel == "final" or (channel == "commentary" and recipient is None):
            self._msg_kind = _CONTENT
        else:
            self._msg_kind = _IGNORE  # built-in tools, no channel

    def _arguments(self, delta: str) -> None:
        if not self._msg_started:
            self._msg_started = True
            self._calls.append(
                {
                    "index": self._n_calls,
                    "id": "call_" + secrets.token_hex(12),
                    "type": "function",
                    "function": {"name": function_name(self._recipient), "arguments": ""},
                }
            )
            self._n_calls += 1
        self._calls.append({"index": self._n_calls - 1, "function": {"arguments": delta}})

    def _text(self, kind: int, delta: str) -> None:
        out = self._reasoning if kind == _REASONING else self._content
        if not self._msg_started:
            self._msg_started = True
            if self._seen[kind]:  # messages of one kind are joined by a newline (vLLM)
                out.append("\n")
            self._seen[kind] = True
        out.append(delta)


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
