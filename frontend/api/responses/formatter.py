"""Assistant events -> Responses output items and streaming events.

`ResponsesFormatter` is the `RequestRun` formatter of a Responses request. The run always
streams into it: each assistant delta (reasoning, content, tool calls, from the chat layer's
parsers) opens, extends or closes an output item, emitting vLLM's event sequence
(`response.output_item.added`, `response.content_part.added`, `response.output_text.delta`,
..., `response.output_item.done`) with consecutive `sequence_number`s. With a client stream the
events go out as SSE (`event: <type>` + `data: <json>`); without one they are dropped and only
the finished items are kept, so both modes build the same output.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

import msgspec

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.engine.types import Logprobs
from vllm_pyfrontend.serving.request_pipeline import Choice, RequestRun
from vllm_pyfrontend.api.responses.schemas import ResponsesRequest

_enc = msgspec.json.encode


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def sse_event(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + _enc(event) + b"\n\n"


class ResponsesFormatter:
    plain_content_chunks = False  # every delta goes through stream_delta
    quiet_empty_deltas = True  # an empty running delta writes nothing (ChoiceStep.on_delta)

    def __init__(self, token_text: Callable[[int], str], top_logprobs: int,
                 emit: Callable[[bytes], None] | None):
        self.token_text = token_text
        self.top = top_logprobs
        self.emit = emit
        self.sequence_number = 0
        self.items: list[dict[str, Any]] = []  # finished output items
        self._kind: str | None = None  # the open item: "message", "reasoning" or "function_call"
        self._item: dict[str, Any] | None = None
        self._text = ""
        self._logprobs: list[dict[str, Any]] = []
        self._call_index: int | None = None

    # -- events ----------------------------------------------------------------------------
    def event(self, type_: str, **fields: Any) -> dict[str, Any]:
        ev = {"type": type_, **fields, "sequence_number": self.sequence_number}
        self.sequence_number += 1
        if self.emit is not None:  # None: no client stream, only the items are kept
            self.emit(sse_event(ev))
        return ev

    @property
    def output_index(self) -> int:
        return len(self.items)

    def _open(self, kind: str, call: dict[str, Any] | None = None) -> None:
        self._kind, self._text, self._logprobs = kind, "", []
        idx = self.output_index
        if kind == "message":
            self._item = {"id": new_id("msg"), "type": "message", "role": "assistant", "status": "in_progress",
                          "content": []}
            self.event("response.output_item.added", output_index=idx, item=self._item)
            self.event("response.content_part.added", output_index=idx, item_id=self._item["id"], content_index=0,
                       part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})
        elif kind == "reasoning":
            self._item = {"id": new_id("rs"), "type": "reasoning", "summary": [], "status": "in_progress"}
            self.event("response.output_item.added", output_index=idx, item=self._item)
            self.event("response.content_part.added", output_index=idx, item_id=self._item["id"], content_index=0,
                       part={"type": "reasoning_text", "text": ""})
        else:
            assert call is not None
            fn = call.get("function") or {}
            self._call_index = call.get("index", 0)
            self._item = {"id": new_id("fc"), "type": "function_call", "call_id": call.get("id") or new_id("call"),
                          "name": fn.get("name") or "", "arguments": "", "status": "in_progress"}
            self.event("response.output_item.added", output_index=idx, item=self._item)

    def _delta(self, text: str, logprobs: list[dict[str, Any]] | None) -> None:
        item, idx = self._item, self.output_index
        assert item is not None
        self._text += text
        if self._kind == "message":
            if logprobs:
                self._logprobs.extend(logprobs)
            self.event("response.output_text.delta", output_index=idx, item_id=item["id"], content_index=0,
                       delta=text, logprobs=[_stream_logprob(lp) for lp in logprobs or ()])
        elif self._kind == "reasoning":
            self.event("response.reasoning_text.delta", output_index=idx, item_id=item["id"], content_index=0,
                       delta=text)
        else:
            self.event("response.function_call_arguments.delta", output_index=idx, item_id=item["id"], delta=text)

    def close(self) -> None:
        """Close the open item (its `.done` events) and keep it."""
        kind, item = self._kind, self._item
        if kind is None or item is None:
            return
        idx = self.output_index
        if kind == "message":
            part = {"type": "output_text", "text": self._text, "annotations": [], "logprobs": self._logprobs or None}
            self.event("response.output_text.done", output_index=idx, item_id=item["id"], content_index=0,
                       text=self._text, logprobs=[])
            self.event("response.content_part.done", output_index=idx, item_id=item["id"], content_index=0, part=part)
            done = {**item, "status": "completed", "content": [part]}
        elif kind == "reasoning":
            part = {"type": "reasoning_text", "text": self._text}
            self.event("response.reasoning_text.done", output_index=idx, item_id=item["id"], content_index=0,
                       text=self._text)
            self.event("response.content_part.done", output_index=idx, item_id=item["id"], content_index=0, part=part)
            done = {**item, "status": "completed", "content": [part], "encrypted_content": None}
        else:
            self.event("response.function_call_arguments.done", output_index=idx, item_id=item["id"],
                       name=item["name"], arguments=self._text)
            done = {**item, "status": "completed", "arguments": self._text}
        self.event("response.output_item.done", output_index=idx, item=done)
        self.items.append(done)
        self._kind = self._item = None
        self._call_index = None

    def _into(self, kind: str, call: dict[str, Any] | None = None) -> None:
        if self._kind != kind or (kind == "function_call" and call is not None
                                  and call.get("index", 0) != self._call_index):
            self.close()
            self._open(kind, call)

    # -- RequestRun's Formatter ----------------------------------------------------------------
    def stream_delta(self, run: RequestRun, choice: Choice, delta: AssistantDelta | None, logprobs: Any,
                     token_ids: list[int] | None, finish: str | None, stop_reason: int | str | None) -> None:
        if delta is not None:
            if delta.reasoning:
                self._into("reasoning")
                self._delta(delta.reasoning, None)
            if delta.content:
                self._into("message")
                self._delta(delta.content, logprobs)
            for call in delta.tool_calls:
                self._into("function_call", call)
                args = (call.get("function") or {}).get("arguments")
                if args:
                    self._delta(args, None)
        if finish is not None:
            self.close()

    def format_logprobs(self, choice: Choice, token_ids: list[int], lp: Logprobs) -> list[dict[str, Any]]:
        text = self.token_text
        out = []
        for i, tid in enumerate(token_ids):
            if i >= len(lp.token_ids):
                break
            row: dict[int, float] = {}
            for t, v in zip(lp.token_ids[i], lp.logprobs[i]):
                row.setdefault(t, v)
            tok = text(tid)
            tops = []
            for t, v in list(row.items())[: self.top]:
                s = text(t)
                tops.append({"token": s, "logprob": max(v, -9999.0), "bytes": list(s.encode("utf-8"))})
            out.append({"token": tok, "logprob": max(row.get(tid, lp.logprobs[i][0]), -9999.0),
                        "bytes": list(tok.encode("utf-8")), "top_logprobs": tops})
        return out

    def stream_usage(self, run: RequestRun) -> None:  # usage goes in the final response object
        return None

    def body(self, run: RequestRun, system_fingerprint: str | None = None) -> dict[str, Any]:
        raise NotImplementedError  # the route builds the response object (response_object)


def _stream_logprob(lp: dict[str, Any]) -> dict[str, Any]:
    return {"token": lp["token"], "logprob": lp["logprob"],
            "top_logprobs": [{"token": t["token"], "logprob": t["logprob"]} for t in lp["top_logprobs"]]}


def usage_of(run: RequestRun) -> dict[str, Any]:
    choice = run.choices[0]
    gen = choice.gen
    completion = run.completion_tokens
    return {
        "input_tokens": run.num_prompt_tokens,
        "input_tokens_details": {"cached_tokens": (gen.num_cached_tokens or 0) if gen is not None else 0,
                                 "cache_write_tokens": 0, "input_tokens_per_turn": [],
                                 "cached_tokens_per_turn": []},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": getattr(choice.assistant, "reasoning_tokens", 0) or 0,
                                  "tool_output_tokens": 0, "output_tokens_per_turn": [],
                                  "tool_output_tokens_per_turn": []},
        "total_tokens": run.num_prompt_tokens + completion,
    }


def response_object(req: ResponsesRequest, *, response_id: str, created_at: int, model: str,
                    sampling: dict[str, Any], status: str, output: list[dict[str, Any]],
                    usage: dict[str, Any] | None, error: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Response object, with vLLM's fields (and OpenAI's `error`)."""
    return {
        "id": response_id,
        "created_at": created_at,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": req.instructions,
        "metadata": req.metadata,
        "model": model,
        "object": "response",
        "output": output,
        "parallel_tool_calls": req.parallel_tool_calls if req.parallel_tool_calls is not None else True,
        "temperature": sampling["temperature"],
        "tool_choice": req.tool_choice if req.tools else "none",
        "tools": req.tools or [],
        "top_p": sampling["top_p"],
        "background": bool(req.background),
        "max_output_tokens": sampling["max_tokens"],
        "max_tool_calls": req.max_tool_calls,
        "previous_response_id": req.previous_response_id,
        "prompt": None,
        "reasoning": req.reasoning,
        "service_tier": req.service_tier,
        "status": status,
        "text": req.text,
        "top_logprobs": sampling.get("logprobs"),
        "truncation": req.truncation or "disabled",
        "usage": usage,
        "user": req.user,
        "presence_penalty": sampling["presence_penalty"],
        "frequency_penalty": sampling["frequency_penalty"],
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "input_messages": None,
        "output_messages": None,
    }
