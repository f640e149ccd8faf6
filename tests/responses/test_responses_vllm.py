"""The Responses API on the real engine (`tiny_pair`: this frontend with 2 workers and vLLM's own
Python server, each with its own CPU EngineCore on the tiny model, greedy):

- the official `openai` SDK: `responses.create`, `responses.stream`, `responses.retrieve`, and a
  `previous_response_id` chain whose second turn is served by the other worker (each answer
  names its worker in the X-Vllm-Pyfrontend-Worker header);
- differential against vLLM's `/v1/responses`: same text, status and usage; the same streaming
  event types in the same order. Where vLLM is wrong, the case says so and asserts the right thing.
"""

from __future__ import annotations

import itertools
import json

import httpx
import pytest

from tests.e2e.vllm_pair import MODEL
from tests.responses.helpers import client, create_on

pytestmark = pytest.mark.real_engine

BASE = {"model": MODEL, "instructions": "You are a helpful assistant.", "temperature": 0}
POEM = "Write a short poem about the sea."


def _post(base: str, body: dict) -> httpx.Response:
    return httpx.post(base + "/v1/responses", json=body, timeout=180)


def _events(r: httpx.Response) -> list[dict]:
    """SSE `event:` / `data:` pairs; the event name must be the data's `type`."""
    out = []
    for block in r.text.split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        ev = json.loads(lines["data"])
        assert lines["event"] == ev["type"]
        out.append(ev)
    return out


def _summary(resp: dict) -> dict:
    u = resp["usage"]
    return {
        "status": resp["status"],
        "incomplete_details": resp["incomplete_details"],
        "items": [o["type"] for o in resp["output"]],
        "text": "".join(c["text"] for o in resp["output"] if o["type"] == "message" for c in o["content"]),
        "usage": (u["input_tokens"], u["output_tokens"], u["total_tokens"]),
        "max_output_tokens": resp["max_output_tokens"],
        "temperature": resp["temperature"],
        "top_p": resp["top_p"],
        "instructions": resp["instructions"],
        "metadata": resp["metadata"],
    }


def _types(events: list[dict]) -> list[str]:
    """Event types with runs of one delta type collapsed (token chunking may differ)."""
    return [t for t, _ in itertools.groupby(ev["type"] for ev in events)]


CASES = {
    "string_input_length": {**BASE, "input": POEM, "max_output_tokens": 10},
    "items_multi_turn": {**BASE, "max_output_tokens": 8, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Hello there."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi! How can I help?"}]},
        {"role": "user", "content": "Tell me about waves."}]},
    "developer_role_metadata": {**BASE, "instructions": None, "max_output_tokens": 6, "metadata": {"k": "v"},
                                "input": [{"type": "message", "role": "developer", "content": "Be brief."},
                                          {"type": "message", "role": "user", "content": POEM}]},
}


@pytest.mark.parametrize("name", list(CASES))
def test_same_response_as_vllm(tiny_pair, name):
    body = CASES[name]
    ours, theirs = _post(tiny_pair.ours, body), _post(tiny_pair.vllm, body)
    assert ours.status_code == theirs.status_code == 200, (ours.text, theirs.text)
    assert _summary(ours.json()) == _summary(theirs.json())


def test_stop_string_completes_like_vllm(tiny_pair):
    """Seeded sampling, a stop string taken from the middle of the text: both stop there with
    status completed and the same text and usage. Greedy, the tiny model repeats `<think>`, so
    a stop string from it ends the output at once: both answer one empty message item."""
    seeded = {"model": MODEL, "temperature": 1.0, "seed": 1234, "input": POEM, "max_output_tokens": 12}
    text = _summary(_post(tiny_pair.ours, seeded).json())["text"]
    stop = text[len(text) // 2: len(text) // 2 + 2]
    for body in ({**seeded, "stop": [stop]}, {**BASE, "input": POEM, "max_output_tokens": 12, "stop": ["<th"]}):
        ours, theirs = _post(tiny_pair.ours, body).json(), _post(tiny_pair.vllm, body).json()
        assert _summary(ours) == _summary(theirs)
        assert ours["status"] == "completed" and ours["incomplete_details"] is None
        assert body["stop"][0] not in _summary(ours)["text"]
    assert _summary(ours)["text"] == "" and ours["output"][0]["content"] == []


@pytest.mark.parametrize("name", ["string_input_length", "items_multi_turn"])
def test_same_event_stream_as_vllm(tiny_pair, name):
    body = {**CASES[name], "stream": True}
    ours, theirs = _events(_post(tiny_pair.ours, body)), _events(_post(tiny_pair.vllm, body))
    for events in (ours, theirs):
        assert [ev["sequence_number"] for ev in events] == list(range(len(events)))
    # vLLM is wrong here: a response cut by max_output_tokens ends its stream with
    # `response.completed` carrying status "incomplete"; the Responses API's terminal event for
    # that status is `response.incomplete` (the openai SDK's types have it). We send it.
    assert theirs[-1]["type"] == "response.completed" and theirs[-1]["response"]["status"] == "incomplete"
    assert ours[-1]["type"] == "response.incomplete"
    assert _types(ours)[:-1] == _types(theirs)[:-1] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done"]
    deltas = ["".join(ev["delta"] for ev in evs if ev["type"] == "response.output_text.delta") for evs in (ours, theirs)]
    assert deltas[0] == deltas[1]
    assert _summary(ours[-1]["response"]) == _summary(theirs[-1]["response"])
    # ...and the streamed final object agrees with the non-streamed one.
    assert _summary(ours[-1]["response"]) == _summary(_post(tiny_pair.ours, CASES[name]).json())


def test_same_logprobs_as_vllm(tiny_pair):
    """include=["message.output_text.logprobs"] with top_logprobs, seeded: the same tokens,
    logprobs and top lists in the message part and in the stream's text deltas (per token)."""
    body = {"model": MODEL, "temperature": 1.0, "seed": 7, "input": POEM, "max_output_tokens": 3,
            "include": ["message.output_text.logprobs"], "top_logprobs": 2}
    ours, theirs = _post(tiny_pair.ours, body).json(), _post(tiny_pair.vllm, body).json()
    assert ours["output"][0]["content"][0]["logprobs"] == theirs["output"][0]["content"][0]["logprobs"]
    assert ours["top_logprobs"] == theirs["top_logprobs"] == 2
    # Per token, not per delta: under load an engine step may carry several tokens in one delta.
    streamed = [[lp for ev in _events(_post(base, {**body, "stream": True}))
                 if ev["type"] == "response.output_text.delta" for lp in ev["logprobs"]]
                for base in (tiny_pair.ours, tiny_pair.vllm)]
    assert streamed[0] == streamed[1] and len(streamed[0]) == 3


def test_errors_agree_with_vllm(tiny_pair):
    for body in (
        {**BASE, "input": POEM, "model": "nope"},
        {**BASE, "input": POEM, "background": True, "store": False},
        {**BASE, "input": POEM, "tool_choice": "required"},
        {**BASE, "input": POEM, "previous_response_id": "resp_missing"},
        {**BASE},
    ):
        ours, theirs = _post(tiny_pair.ours, body), _post(tiny_pair.vllm, body)
        assert ours.status_code == theirs.status_code, (body, ours.text, theirs.text)


def test_openai_sdk_against_the_real_engine(tiny_pair):
    c = client(tiny_pair.ours)
    r = c.responses.create(model=MODEL, input=POEM, instructions="Be a poet.", temperature=0, max_output_tokens=6)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text and r.usage.output_tokens == 6 and r.usage.total_tokens == r.usage.input_tokens + 6
    with c.responses.stream(model=MODEL, input=POEM, instructions="Be a poet.", temperature=0,
                            max_output_tokens=6) as st:
        events = list(st)
    text = "".join(ev.delta for ev in events if ev.type == "response.output_text.delta")
    assert events[-1].type == "response.incomplete"  # (the SDK's get_final_response wants completed)
    final = events[-1].response
    assert text == final.output_text == r.output_text  # greedy: the same text either way
    got = c.responses.retrieve(final.id)
    assert got.output_text == final.output_text and got.status == "incomplete"
    # A response that completes (a stop string), through the SDK's stream helper.
    seeded = dict(model=MODEL, input=POEM, temperature=1.0, max_output_tokens=12)
    text = c.responses.create(**seeded, extra_body={"seed": 1234}).output_text
    stop = text[len(text) // 2: len(text) // 2 + 2]
    with c.responses.stream(**seeded, extra_body={"seed": 1234, "stop": [stop]}) as st:
        done = st.get_final_response()
    assert done.status == "completed" and done.output_text and text.startswith(done.output_text)
    assert c.responses.retrieve(done.id).output_text == done.output_text


def test_previous_response_id_chain_across_workers(tiny_pair):
    """Turn 1 served by worker 0, turn 2 (previous_response_id) by worker 1: the store is
    shared (vLLM's in-memory store would answer 404 on the other process)."""
    first, w1 = create_on(tiny_pair.ours, 0, model=MODEL, input=POEM, temperature=0, max_output_tokens=5)
    second, w2 = create_on(tiny_pair.ours, 1, model=MODEL, input="Another one.", previous_response_id=first.id,
                           temperature=0, max_output_tokens=5)
    assert (w1, w2) == (0, 1)
    assert second.previous_response_id == first.id
    # Turn 2's prompt is turn 1's conversation + turn 1's output + the new input: the same
    # prompt as sending the whole conversation.
    whole = client(tiny_pair.ours).responses.create(
        model=MODEL, temperature=0, max_output_tokens=5,
        input=[{"role": "user", "content": POEM},
               {"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": first.output_text}]},
               {"role": "user", "content": "Another one."}])
    assert whole.usage.input_tokens == second.usage.input_tokens
    assert whole.output_text == second.output_text
