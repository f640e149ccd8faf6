"""Anthropic Messages API, differential: the same /v1/messages (and count_tokens) requests to
this frontend and to vLLM's own Python server, each in front of an identical real EngineCore on
CPU (`tiny_pair`, greedy). Text, stop reasons, stop sequences and usage must agree, and a stream
must carry the same event types in the same order. Then the official `anthropic` SDK against
this frontend on the real engine: create, stream and count_tokens parse.

The tiny model has random weights, so its output is noise: thinking and tool_use content are
shown with scripted output in tests/server/test_anthropic_sim.py.

Where vLLM is wrong, the case says so and asserts the right thing:
- vLLM's request-validation errors have OpenAI's shape, and its other errors carry OpenAI's
  type names ("BadRequestError") in Anthropic's envelope; Anthropic's API always answers
  `{"type": "error", "error": {"type": "invalid_request_error", "message": ...}}`.
- vLLM omits `stop_sequence` when it is null; Anthropic's messages always carry it.
- vLLM drops a tool_result's `is_error`; here the model sees "Error: <content>".
- vLLM refuses `thinking: {"type": "enabled"}` unless its engine has a reasoning config;
  here the budget is validated and the request served (see test_stop_sequence_as_vllm).
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.e2e.vllm_pair import MODEL

pytestmark = pytest.mark.real_engine

USER = {"role": "user", "content": "Write a short poem about the sea."}
TOOLS = [{"name": "get_weather", "description": "Weather for a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "18 C, sunny"}]},
        {"type": "text", "text": "Thanks, and tomorrow?"}]},
]


def msg(**kw) -> dict[str, Any]:
    return {"model": MODEL, "messages": [USER], "max_tokens": 12, "temperature": 0, **kw}


CASES: list[tuple[str, dict[str, Any]]] = [
    ("basic", msg()),
    ("system_string", msg(system="You are a helpful assistant.")),
    ("system_blocks", msg(system=[{"type": "text", "text": "You are "}, {"type": "text", "text": "terse."}])),
    ("text_blocks", msg(messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                              {"type": "text", "text": "there"}]}])),
    ("multi_turn", msg(messages=[USER, {"role": "assistant", "content": "Waves."},
                                 {"role": "user", "content": "More."}])),
    ("max_tokens_stop", msg(max_tokens=3)),
    ("top_k_top_p", msg(top_k=20, top_p=0.9)),
    ("metadata", msg(metadata={"user_id": "u-1"})),
    ("thinking_disabled", msg(thinking={"type": "disabled"})),
    ("tool_history", msg(messages=HISTORY, tools=TOOLS, tool_choice={"type": "none"})),
    ("assistant_thinking_history", msg(messages=[
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Greet back.", "signature": "x"},
                                          {"type": "text", "text": "Hello!"}]},
        {"role": "user", "content": "Again."}])),
]

ERRORS: list[tuple[str, dict[str, Any]]] = [
    ("missing_max_tokens", {"model": MODEL, "messages": [USER]}),
    ("max_tokens_zero", msg(max_tokens=0)),
    ("missing_messages", {"model": MODEL, "max_tokens": 5}),
    ("bad_role", msg(messages=[{"role": "wizard", "content": "hi"}])),
    ("unknown_model", msg(model="nope")),
    ("temperature_too_high", msg(temperature=9)),
    ("thinking_budget_too_small", msg(max_tokens=5000, thinking={"type": "enabled", "budget_tokens": 10})),
    ("thinking_budget_over_max_tokens", msg(max_tokens=1100, thinking={"type": "enabled", "budget_tokens": 2000})),
    ("tool_choice_auto_without_parser", msg(tools=TOOLS, tool_choice={"type": "auto"})),
    ("prompt_too_long", msg(messages=[{"role": "user", "content": "word " * 5000}])),
]

ANTHROPIC_TYPES = {400: "invalid_request_error", 404: "not_found_error"}


def post(base: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(base + path, json=body, timeout=120)


def stream_events(base: str, body: dict) -> list[tuple[str, dict]]:
    out = []
    with httpx.stream("POST", base + "/v1/messages", json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200, r.read()
        name = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                assert data["type"] == name
                out.append((name, data))
    return out


def essentials(body: dict) -> dict:
    text = "".join(b.get("text", "") for b in body["content"] if b["type"] == "text")
    return {"type": body["type"], "role": body["role"], "model": body["model"], "text": text,
            "blocks": [b["type"] for b in body["content"]], "stop_reason": body["stop_reason"],
            "stop_sequence": body.get("stop_sequence"), "usage": body["usage"]}


def stream_essentials(events: list[tuple[str, dict]]) -> dict:
    kinds = [(n, (d.get("delta") or d.get("content_block") or {}).get("type")) for n, d in events]
    # Consecutive deltas of one kind are one run: token chunking may differ under load.
    compact = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
    text = "".join(d["delta"].get("text", "") for n, d in events if n == "content_block_delta")
    start = events[0][1]["message"]
    final = [d for n, d in events if n == "message_delta"]
    return {"events": compact, "text": text, "start_usage": start["usage"],
            "start": {k: v for k, v in start.items() if k not in ("id", "usage")},
            "delta": final[-1]["delta"] if final else None, "usage": final[-1]["usage"] if final else None}


@pytest.fixture(scope="module")
def pair(tiny_pair):
    return tiny_pair


@pytest.mark.parametrize("name,body", CASES, ids=[c[0] for c in CASES])
def test_same_message_as_vllm(pair, name, body):
    ours, theirs = post(pair.ours, "/v1/messages", body), post(pair.vllm, "/v1/messages", body)
    assert ours.status_code == theirs.status_code == 200, (ours.text, theirs.text)
    a, b = ours.json(), theirs.json()
    # vLLM leaves out a null stop_sequence (exclude_none); Anthropic's messages always carry it.
    assert "stop_sequence" in a
    assert essentials(a) == essentials(b)
    assert a["id"].startswith("msg_")
    # Streaming: the same events in the same order, the same text, stop reason and usage.
    sa, sb = stream_essentials(stream_events(pair.ours, body)), stream_essentials(stream_events(pair.vllm, body))
    assert sa == sb
    assert sa["text"] == essentials(a)["text"] and sa["delta"]["stop_reason"] == a["stop_reason"]
    assert sa["usage"] == a["usage"]


def test_stop_sequence_as_vllm(pair):
    # A stop sequence cut from what the model says greedily, so the engine's output reaches it.
    said = post(pair.ours, "/v1/messages", msg(max_tokens=12)).json()["content"][0]["text"]
    assert len(said) >= 10, said
    stop = said[2:9]
    body = msg(max_tokens=12, stop_sequences=["never-said-1", stop])
    a, b = post(pair.ours, "/v1/messages", body).json(), post(pair.vllm, "/v1/messages", body).json()
    assert essentials(a) == essentials(b)
    assert (a["stop_reason"], a["stop_sequence"]) == ("stop_sequence", stop)
    assert essentials(a)["text"] == said[:said.index(stop)]
    sa, sb = stream_essentials(stream_events(pair.ours, body)), stream_essentials(stream_events(pair.vllm, body))
    assert sa == sb and sa["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": stop}

    # Extended thinking: vLLM sends budget_tokens to the engine as thinking_token_budget and so
    # refuses the request unless the engine has a reasoning config (400); here the budget is
    # validated and max_tokens bounds the output (the stop sequence keeps it short).
    thinking = {**body, "max_tokens": 1100, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    refused = post(pair.vllm, "/v1/messages", thinking)
    assert refused.status_code == 400 and "thinking_token_budget" in refused.text
    served = post(pair.ours, "/v1/messages", thinking)
    assert served.status_code == 200 and essentials(served.json()) == essentials(a)


@pytest.mark.parametrize("body", [
    {"model": MODEL, "messages": [USER]},
    {"model": MODEL, "messages": [USER], "system": "Be brief."},
    {"model": MODEL, "messages": HISTORY, "tools": TOOLS, "tool_choice": {"type": "none"}},
    {"model": MODEL, "messages": HISTORY, "system": [{"type": "text", "text": "Be brief."}]},
    {"model": MODEL, "messages": [USER], "thinking": {"type": "disabled"}},
], ids=["basic", "system", "tools_history", "history_system_blocks", "thinking_disabled"])
def test_count_tokens_as_vllm(pair, body):
    a, b = post(pair.ours, "/v1/messages/count_tokens", body), post(pair.vllm, "/v1/messages/count_tokens", body)
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    assert a.json() == b.json()
    # ... and it is the prompt the Messages route sends.
    made = post(pair.ours, "/v1/messages", {**body, "max_tokens": 1, "temperature": 0}).json()
    assert made["usage"]["input_tokens"] == a.json()["input_tokens"]


def test_is_error_reaches_the_model(pair):
    """vLLM drops a tool_result's is_error: a failed tool looks like a successful one to the
    model. Here its content goes as "Error: ...", so the prompts differ by that prefix."""
    failed = [*HISTORY[:2], {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "18 C, sunny", "is_error": True}]}]
    ok = [*HISTORY[:2], {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "18 C, sunny"}]}]
    count = {}
    for name, messages in (("failed", failed), ("ok", ok)):
        for side in ("ours", "vllm"):
            r = post(getattr(pair, side), "/v1/messages/count_tokens", {"model": MODEL, "messages": messages})
            count[name, side] = r.json()["input_tokens"]
    assert count["ok", "ours"] == count["ok", "vllm"] == count["failed", "vllm"]  # vLLM: no difference
    assert count["failed", "ours"] > count["ok", "ours"]


@pytest.mark.parametrize("name,body", ERRORS, ids=[e[0] for e in ERRORS])
def test_same_error_status_as_vllm(pair, name, body):
    ours, theirs = post(pair.ours, "/v1/messages", body), post(pair.vllm, "/v1/messages", body)
    assert ours.status_code == theirs.status_code, (ours.text, theirs.text)
    # vLLM answers its request-validation errors in OpenAI's shape ({"error": {..., "code"}})
    # and its other errors with OpenAI's type names ("BadRequestError") in Anthropic's envelope;
    # Anthropic's API (and its SDK) use Anthropic's shape and types, always.
    a = ours.json()
    assert a["type"] == "error" and a["error"]["message"] and set(a["error"]) == {"type", "message"}
    assert a["error"]["type"] == ANTHROPIC_TYPES[ours.status_code]


def test_max_tokens_must_be_an_integer(pair):
    """vLLM coerces "5" to 5 (pydantic's lax mode) and answers 200; a string is not an integer."""
    body = msg(max_tokens="5")
    assert post(pair.vllm, "/v1/messages", body).status_code == 200
    ours = post(pair.ours, "/v1/messages", body)
    assert ours.status_code == 400 and ours.json()["error"]["type"] == "invalid_request_error"


def test_anthropic_sdk_on_the_real_engine(pair):
    client = anthropic.Anthropic(base_url=pair.ours, api_key="none", max_retries=0, timeout=120)
    # (This SDK version has no sampling arguments: temperature goes in the body.)
    kw = dict(model=MODEL, max_tokens=8, system="Be brief.", messages=[USER], extra_body={"temperature": 0})
    made = client.messages.create(**kw)
    assert isinstance(made, anthropic.types.Message)
    assert made.content[0].type == "text" and made.stop_reason in ("end_turn", "max_tokens")
    assert made.usage.output_tokens <= 8
    with client.messages.stream(**kw) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == made.content[0].text == final.content[0].text
    assert (final.stop_reason, final.usage.input_tokens, final.usage.output_tokens) == \
        (made.stop_reason, made.usage.input_tokens, made.usage.output_tokens)
    count = client.messages.count_tokens(model=MODEL, system="Be brief.", messages=[USER])
    assert count.input_tokens == made.usage.input_tokens
    # The same SDK calls against vLLM's server parse to the same results.
    theirs = anthropic.Anthropic(base_url=pair.vllm, api_key="none", max_retries=0, timeout=120)
    other = theirs.messages.create(**kw)
    assert (other.content[0].text, other.stop_reason, other.usage.output_tokens) == \
        (made.content[0].text, made.stop_reason, made.usage.output_tokens)
    assert theirs.messages.count_tokens(model=MODEL, system="Be brief.", messages=[USER]).input_tokens == \
        count.input_tokens
