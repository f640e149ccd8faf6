"""The Messages request lowering (frontend/api/anthropic/lowering.py) against vLLM's own
(`AnthropicServingMessages.to_chat_completion_request`): the same chat messages, tools, tool
choice and sampling fields for a corpus of requests; and the error event framing."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.api.anthropic.formatter import AnthropicRun, event, stop_reason_of
from vllm_pyfrontend.api.anthropic.lowering import lower_request
from vllm_pyfrontend.api.anthropic.protocol import MessagesRequest
from vllm_pyfrontend.errors import APIError

TOOLS = [{"name": "get_weather", "description": "Weather", "input_schema": {"properties": {"city": {"type": "string"}}}},
         {"name": "now", "input_schema": {"type": "object"}}]
CALL_TURN = {"role": "assistant", "content": [
    {"type": "thinking", "thinking": "Need the tool.", "signature": "sig"},
    {"type": "redacted_thinking", "data": "opaque"},
    {"type": "text", "text": "Checking."},
    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
    {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}}]}
RESULTS = {"role": "user", "content": [
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
    {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "noon"},
                                                                  {"type": "text", "text": "UTC"}]},
    {"type": "text", "text": "And tomorrow?"}]}
Q = {"role": "user", "content": "Weather in Paris?"}

CORPUS: list[dict[str, Any]] = [
    {"messages": [Q]},
    {"messages": [Q], "system": "Be brief.", "stop_sequences": ["\n\n", "END"], "temperature": 0.3,
     "top_p": 0.9, "top_k": 5},
    {"messages": [Q], "system": [{"type": "text", "text": "A. "}, {"type": "text", "text": "B."},
                                 {"type": "text", "text": "x-anthropic-billing-header: cc=1"}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]},
    {"messages": [Q, CALL_TURN, RESULTS], "tools": TOOLS},
    {"messages": [Q, CALL_TURN, RESULTS], "tools": TOOLS, "tool_choice": {"type": "any"}},
    {"messages": [Q], "tools": TOOLS, "tool_choice": {"type": "tool", "name": "now",
                                                      "disable_parallel_tool_use": True}},
    {"messages": [Q], "tools": TOOLS, "tool_choice": {"type": "none"}},
    {"messages": [Q, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Go."}]},
    {"messages": [{"role": "system", "content": "inline system"}, Q]},
    {"messages": [Q], "thinking": {"type": "disabled"}},
    {"messages": [Q], "metadata": {"user_id": "u"}, "chat_template_kwargs": {"custom": 1}},
    {"messages": [Q, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "now", "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}], "tools": TOOLS},
]


def _theirs(body: dict[str, Any]):
    from vllm.entrypoints.anthropic.protocol import AnthropicMessagesRequest
    from vllm.entrypoints.anthropic.serving import AnthropicServingMessages

    req = AnthropicMessagesRequest.model_validate({"model": "m", "max_tokens": 64, **body})
    return AnthropicServingMessages.to_chat_completion_request(req)


def _their_messages(chat) -> list[dict[str, Any]]:
    out = []
    for m in chat.messages:
        m = dict(m)
        content = m.get("content")
        if isinstance(content, list):  # text parts: the chat layer joins them with newlines
            m["content"] = "\n".join(p["text"] for p in content)
        if "tool_calls" in m:
            m["tool_calls"] = [dict(c) for c in m["tool_calls"]]
        if m.get("role") == "assistant" and "content" not in m:
            m["content"] = None
        out.append(m)
    return out


@pytest.mark.parametrize("body", CORPUS, ids=range(len(CORPUS)))
def test_lowering_matches_vllm(body):
    chat = _theirs(body)
    req = msgspec.convert({"model": "m", "max_tokens": 64, **body}, MessagesRequest)
    ours = lower_request(req)
    assert ours.messages == _their_messages(chat)
    their_tools = None if chat.tools is None else [
        {"type": "function", "function": {"name": t.function.name, "description": t.function.description,
                                          "parameters": t.function.parameters}} for t in chat.tools]
    assert ours.tools == their_tools
    tc = chat.tool_choice
    assert ours.tool_choice == (tc.model_dump(exclude_none=True) if hasattr(tc, "model_dump") else tc)
    assert ours.parallel_tool_calls == (chat.parallel_tool_calls is not False)
    opts = ours.options
    assert (opts.max_tokens, opts.temperature, opts.top_p, opts.top_k) == \
        (chat.max_completion_tokens, chat.temperature, chat.top_p, chat.top_k)
    assert opts.stop == (chat.stop or [])
    if chat.reasoning_effort is not None:  # thinking disabled: effort "none" reaches the template
        assert ours.template_kwargs["reasoning_effort"] == chat.reasoning_effort
        assert ours.template_kwargs["enable_thinking"] is False
    for k, v in (chat.chat_template_kwargs or {}).items():
        assert ours.template_kwargs[k] == v


def test_is_error_reaches_the_model_and_vllm_drops_it():
    body = {"messages": [Q, CALL_TURN, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "timeout", "is_error": True},
        {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True}]}]}
    req = msgspec.convert({"model": "m", "max_tokens": 64, **body}, MessagesRequest)
    tools = [m for m in lower_request(req).messages if m["role"] == "tool"]
    assert [m["content"] for m in tools] == ["Error: timeout", "Error"]
    theirs = [m for m in _theirs(body).messages if m["role"] == "tool"]
    assert [m["content"] for m in theirs] == ["timeout", ""]  # vLLM: the failure is invisible


@pytest.mark.parametrize("body,param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": {}}]}]},
     "messages"),
    ({"messages": [Q], "thinking": {"type": "enabled", "budget_tokens": 100}}, "thinking.budget_tokens"),
    ({"messages": [Q], "thinking": {"type": "enabled", "budget_tokens": 2048}}, "thinking.budget_tokens"),
    ({"messages": [Q], "tool_choice": {"type": "tool"}}, "tool_choice"),
    ({"messages": [Q], "tools": [{"name": "bash", "type": "bash_20250124", "input_schema": {}}]}, "tools"),
])
def test_refusals(body, param):
    req = msgspec.convert({"model": "m", "max_tokens": 1500, **body}, MessagesRequest)
    with pytest.raises(InvalidRequestError) as e:
        lower_request(req)
    assert e.value.param == param


def test_stop_reason_mapping_as_vllm():
    from vllm.entrypoints.anthropic.serving import _to_anthropic_stop_reason

    for finish in ("stop", "length", "tool_calls", "abort", None):
        for stop in (None, 7, "END"):
            for used, complete in ((False, False), (True, False), (True, True)):
                assert stop_reason_of(finish, stop, used, complete) == \
                    _to_anthropic_stop_reason(finish, stop, used, complete), (finish, stop, used, complete)


def test_error_event_framing():
    run = AnthropicRun.__new__(AnthropicRun)
    frame = run.error_frame(APIError(500, "Internal server error."))
    assert frame == b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"Internal server error."}}\n\n'
    assert json.loads(event("ping", {"type": "ping"}).split(b"data: ")[1]) == {"type": "ping"}


def test_text_during_a_tool_call_follows_the_tool_use_block():
    """Text that arrives while a tool_use block is open waits for the block's end (the call's
    arguments may still come), then goes out as a text block of its own (as vLLM)."""
    from types import SimpleNamespace

    from vllm_pyfrontend.chat.assistant import AssistantDelta
    from vllm_pyfrontend.api.anthropic.formatter import AnthropicFormatter

    written: list[bytes] = []
    run = SimpleNamespace(sse=SimpleNamespace(write=written.append), num_prompt_tokens=7, completion_tokens=5,
                          finish_reason_of=lambda choice: "tool_calls")
    f = AnthropicFormatter("msg_1", "m")
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "now", "arguments": '{"a"'}}
    for delta, finish in ((AssistantDelta(tool_calls=[call]), None),
                          (AssistantDelta(content="aside"), None),
                          (AssistantDelta(tool_calls=[{"index": 0, "function": {"arguments": ": 1}"}}]), None),
                          (None, "tool_calls")):
        f.stream_delta(run, None, delta, None, None, finish, None)
    events = [json.loads(frame.split(b"data: ", 1)[1]) for frame in b"".join(written).split(b"\n\n") if frame]
    kinds = [(e["type"], (e.get("delta") or e.get("content_block") or {}).get("type"), e.get("index"))
             for e in events]
    assert kinds == [
        ("content_block_start", "tool_use", 0), ("content_block_delta", "input_json_delta", 0),
        ("content_block_delta", "input_json_delta", 0), ("content_block_stop", None, 0),
        ("content_block_start", "text", 1), ("content_block_delta", "text_delta", 1),
        ("content_block_stop", None, 1), ("message_delta", None, None), ("message_stop", None, None),
    ]
    assert events[5]["delta"]["text"] == "aside"
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"] == {"input_tokens": 7, "output_tokens": 5}
