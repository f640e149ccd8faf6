"""The chat pipeline's assistant events (reasoning, content, tool calls) as Anthropic Messages:
content blocks in one body, or the stream of events

    message_start
    content_block_start / content_block_delta* / content_block_stop     (per block)
    message_delta (stop_reason, stop_sequence, usage)
    message_stop

with `thinking_delta`, `text_delta` and `input_json_delta` deltas; a thinking block ends with a
`signature_delta`. Block order follows the model's output: thinking, then text and tool_use
blocks as they come. `ping` events are the stream's keep-alive (--sse-keep-alive-interval).
Event and field shapes are those of vLLM's `AnthropicServingMessages`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import msgspec

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.formatters import prompt_details
from vllm_pyfrontend.serving.request_pipeline import Choice, RequestRun, fold_tool_calls
from vllm_pyfrontend.serving.sse import SSEWriter
from vllm_pyfrontend.api.anthropic.protocol import error_body

_enc = msgspec.json.encode


def event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + _enc(data) + b"\n\n"


class AnthropicSSE(SSEWriter):
    """SSE writer for Anthropic events: no `[DONE]` at the end, `ping` events as keep-alive."""

    __slots__ = ()
    done_frame = b""
    keep_alive_frame = event("ping", {"type": "ping"})

    def __init__(self) -> None:
        super().__init__("", "", 0)


class AnthropicRun(RequestRun):
    """A RequestRun whose mid-stream error is an Anthropic `error` event."""

    def error_frame(self, error: APIError) -> bytes:
        return event("error", error_body(error.status, error.message))


def _json_complete(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def stop_reason_of(finish: str | None, stop_reason: int | str | None, tools_used: bool,
                   tools_complete: bool) -> tuple[str | None, str | None]:
    """(stop_reason, stop_sequence), as vLLM maps them: max_tokens wins; complete tool calls are
    `tool_use`; a matched stop string is `stop_sequence` (a call it cut short must not run);
    otherwise `end_turn`."""
    if finish == "length":
        return "max_tokens", None
    if finish not in ("stop", "tool_calls"):
        return None, None
    if tools_used and tools_complete:
        return "tool_use", None
    if isinstance(stop_reason, str):
        return "stop_sequence", stop_reason
    if finish == "tool_calls" or tools_used:
        return "tool_use", None
    return "end_turn", None


def _parsed_input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def usage_of(run: RequestRun, prompt_tokens_details: bool) -> dict[str, Any]:
    """Anthropic's usage, as vLLM builds it from the chat usage: with --enable-prompt-tokens-details
    the prompt tokens read from the prefix cache (`cache_read_input_tokens`) and written to it
    (`cache_creation_input_tokens`) are counted apart, `input_tokens` being the rest (Anthropic's
    total input is the three together)."""
    usage: dict[str, Any] = {"input_tokens": run.num_prompt_tokens, "output_tokens": run.completion_tokens}
    details = prompt_details(run, prompt_tokens_details, created=True)
    if details is not None:
        rest = run.num_prompt_tokens
        created, cached = details["created_cache_tokens"], details["cached_tokens"]
        if created is not None:
            usage["cache_creation_input_tokens"] = created
            rest -= created
        if cached is not None:
            usage["cache_read_input_tokens"] = cached
            rest -= cached
        usage["input_tokens"] = max(0, rest)
    return usage


class AnthropicFormatter:
    """Formatter (request_pipeline.Formatter) of one Messages request (always one choice)."""

    plain_content_chunks = False
    quiet_empty_deltas = True  # an empty running delta writes nothing (ChoiceStep.on_delta)

    def __init__(self, message_id: str, model: str, prompt_tokens_details: bool = False):
        self.message_id = message_id
        self.model = model
        self.prompt_tokens_details = prompt_tokens_details  # vLLM's --enable-prompt-tokens-details
        # streaming state: the open block and where the next one goes
        self._index = 0
        self._open: str | None = None  # "thinking" | "text" | "tool_use"
        self._tool_index: int | None = None  # the chat layer's index of the open tool call
        self._tools_used = False
        self._last_args: list[str] = []
        self._held_text: list[str] = []  # text that came while a tool_use block was open

    # -- streaming ---------------------------------------------------------------------------
    def message_start(self, input_tokens: int) -> bytes:
        return event("message_start", {"type": "message_start", "message": {
            "id": self.message_id, "type": "message", "role": "assistant", "content": [], "model": self.model,
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0},
        }})

    def _start(self, block: dict[str, Any]) -> bytes:
        self._open = block["type"]
        return event("content_block_start", {"type": "content_block_start", "index": self._index,
                                             "content_block": block})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return event("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta})

    def _stop(self) -> bytes:
        """Close the open block; text held back during a tool_use block follows as its own."""
        out = self._close()
        if self._held_text:
            text = "".join(self._held_text)
            self._held_text = []
            out += self._start({"type": "text", "text": ""}) + self._delta({"type": "text_delta", "text": text})
            out += self._close()
        return out

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        out = b""
        if self._open == "thinking":
            out += self._delta({"type": "signature_delta", "signature": uuid.uuid4().hex})
        out += event("content_block_stop", {"type": "content_block_stop", "index": self._index})
        self._open = None
        self._tool_index = None
        self._index += 1
        return out

    def _events(self, delta: AssistantDelta) -> bytes:
        out = b""
        if delta.reasoning:
            if self._open != "thinking":
                out += self._stop() + self._start({"type": "thinking", "thinking": ""})
            out += self._delta({"type": "thinking_delta", "thinking": delta.reasoning})
        if delta.content and self._open == "tool_use":
            # (as vLLM: the call's arguments may still come; the text waits for the block's end)
            self._held_text.append(delta.content)
        elif delta.content:
            if self._open != "text":
                out += self._stop() + self._start({"type": "text", "text": ""})
            out += self._delta({"type": "text_delta", "text": delta.content})
        for call in delta.tool_calls:
            idx = call.get("index", 0)
            fn = call.get("function") or {}
            if idx != self._tool_index:
                if not fn.get("name"):
                    continue  # arguments of a call whose block is closed: nothing to attach them to
                out += self._stop() + self._start({"type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
                                                   "name": fn["name"], "input": {}})
                self._tool_index = idx
                self._tools_used = True
                self._last_args = []
            args = fn.get("arguments")
            if args:
                self._last_args.append(args)
                out += self._delta({"type": "input_json_delta", "partial_json": args})
        return out

    def stream_delta(self, run: RequestRun, choice: Choice, delta: AssistantDelta | None, logprobs,
                     token_ids, finish, stop_reason) -> None:
        sse = run.sse
        assert sse is not None
        out = self._events(delta) if delta is not None else b""
        if finish is not None:
            out += self._stop()
            reason, sequence = stop_reason_of(
                run.finish_reason_of(choice), stop_reason, self._tools_used,
                self._tools_used and _json_complete("".join(self._last_args)),
            )
            out += event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                           "usage": usage_of(run, self.prompt_tokens_details)})
            out += event("message_stop", {"type": "message_stop"})
        if out:
            sse.write(out)

    def format_logprobs(self, choice: Choice, token_ids: list[int], lp) -> Any:
        return None  # the Messages API has no logprobs

    def stream_usage(self, run: RequestRun) -> None:
        pass  # usage goes out with message_delta

    # -- one body ---------------------------------------------------------------------------------
    def body(self, run: RequestRun, system_fingerprint: str | None = None) -> dict[str, Any]:
        choice = run.choices[0]
        gen = choice.gen
        content: list[dict[str, Any]] = []
        if choice.reasoning:
            content.append({"type": "thinking", "thinking": "".join(choice.reasoning), "signature": uuid.uuid4().hex})
        text = "".join(choice.content)
        if text:
            content.append({"type": "text", "text": text})
        calls = fold_tool_calls(choice.tool_calls) if choice.tool_calls else []
        complete = True
        for call in calls:
            fn = call.get("function") or {}
            args = fn.get("arguments") or ""
            complete = complete and (not args or _json_complete(args))
            content.append({"type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
                            "name": fn.get("name") or "", "input": _parsed_input(args)})
        if not content:
            # Anthropic's shape of an empty answer: one empty text block (clients read content[0]).
            content.append({"type": "text", "text": ""})
        reason, sequence = stop_reason_of(run.finish_reason_of(choice), gen.stop_reason if gen else None,
                                          bool(calls), bool(calls) and complete)
        return {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": self.model,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": usage_of(run, self.prompt_tokens_details),
        }
