"""The scale-out derender routes with a reasoning and a tool parser configured, as vLLM's derender
runs them (vLLM's tests/entrypoints/scale_out/derender/test_derender_parity.py): a chat derender
of the ids a chat completion generated gives that completion's reasoning, content and tool calls,
whole or streamed chunk by chunk with `stream_state` carried between calls; the streaming text
completion derender decodes as without parsers.

In process: one worker and the simulated engine scripting DeepSeek V4 output (reasoning, then
DSML tool calls), `--enable-scale-out` for the routes."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.inprocess import InProcessStack
from tests.server.test_tools_sim import CALL, MESSAGES, TOOLS

MODEL = "dsv4"
THINK_AND_CALL = "The user wants weather.</think>Let me look." + CALL
EOS_TEXT = "<｜end▁of▁sentence｜>"


@pytest.fixture(scope="module")
def stack():
    s = InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "4096",
                        "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4",
                        "--reasoning-parser", "deepseek_v4", "--enable-scale-out", "--served-model-name", MODEL,
                        "--shutdown-timeout", "5", "demo:deepseek-v4"])
    yield s
    s.terminate()


@pytest.fixture()
def client(stack):
    with httpx.Client(base_url=stack.base_url, timeout=30) as c:
        yield c


def _coupled(client, text: str, **extra) -> dict:
    """A chat completion of scripted output, with its token ids; the ids the engine finished
    with (its EOS) are left out, so the derender decodes exactly the text."""
    r = client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": MESSAGES, "max_tokens": 200, "return_token_ids": True,
        "vllm_xargs": {"sim_text": text}, **extra})
    assert r.status_code == 200, r.text
    body = r.json()
    eos = client.post("/tokenize", json={"model": MODEL, "prompt": EOS_TEXT, "add_special_tokens": False}).json()
    ids = body["choices"][0]["token_ids"]
    if ids[-len(eos["tokens"]):] == eos["tokens"]:
        ids = ids[:-len(eos["tokens"])]
    return {"body": body, "ids": ids, "prompt_ids": body["prompt_token_ids"]}


def _derender(client, ids: list[int], chat_request: dict | None, **extra) -> httpx.Response:
    body = {"model": MODEL, "generate_response": {"request_id": "parity", "choices": [
        {"index": 0, "token_ids": ids, "finish_reason": "stop"}]}, "prompt_tokens": 7, **extra}
    if chat_request is not None:
        body["chat_request"] = chat_request
    return client.post("/v1/chat/completions/derender", json=body)


def _stream_derender(client, ids: list[int], size: int, chat_request: dict, prompt_ids: list[int]) -> list[dict]:
    """`ids` through the streaming chat derender, `size` at a time, the finish on the last
    chunk, `stream_state` carried: every chunk's choice."""
    state, out = None, []
    for start in range(0, len(ids), size):
        last = start + size >= len(ids)
        r = client.post("/v1/chat/completions/derender", json={
            "stream": True, "model": MODEL, "stream_state": state, "prompt_token_ids": prompt_ids,
            "prompt_tokens": len(prompt_ids), "chat_request": chat_request,
            "generate_chunk": {"request_id": "s", "choices": [
                {"index": 0, "token_ids": ids[start:start + size], "finish_reason": "stop" if last else None}]},
        })
        assert r.status_code == 200, r.text
        data = r.json()
        state = data["stream_state"]
        out += data["chunk"]["choices"]
    return out


def _assemble(choices: list[dict]) -> dict:
    content, reasoning, calls, finish = "", "", {}, None
    for c in choices:
        d = c["delta"]
        content += d.get("content") or ""
        reasoning += d.get("reasoning") or ""
        for tc in d.get("tool_calls") or []:
            cur = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
            if tc.get("id"):
                assert cur["id"] in (None, tc["id"]), "a tool call keeps its first id"
                cur["id"] = tc["id"]
            fn = tc.get("function") or {}
            cur["name"] = fn.get("name") or cur["name"]
            cur["arguments"] += fn.get("arguments") or ""
        finish = c.get("finish_reason") or finish
    return {"content": content or None, "reasoning": reasoning or None, "calls": calls, "finish": finish}


def test_whole_derender_parses_reasoning_and_tool_calls_as_the_chat_route(client):
    chat_request = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "return_token_ids": True}
    run = _coupled(client, THINK_AND_CALL, tools=TOOLS)
    coupled = run["body"]["choices"][0]["message"]
    r = _derender(client, run["ids"], chat_request)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    msg = choice["message"]
    assert msg["reasoning"] == coupled["reasoning"] == "The user wants weather."
    assert msg["content"] == coupled["content"] == "Let me look."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]] == [
        ("get_weather", {"city": "Paris"})]
    assert msg["tool_calls"][0]["type"] == "function" and len(msg["tool_calls"][0]["id"]) == 16
    # vLLM's derender keeps the finish it was given and returns the ids it decoded
    assert (choice["finish_reason"], choice["token_ids"]) == ("stop", run["ids"])
    assert r.json()["usage"] == {"prompt_tokens": 7, "total_tokens": 7 + len(run["ids"]),
                                 "completion_tokens": len(run["ids"]), "prompt_tokens_details": None,
                                 "completion_tokens_details": None}


def test_whole_derender_of_reasoning_only_has_no_content(client):
    """Content is null when the reasoning parser takes the whole output, in the derender and in
    the chat completion alike (vLLM's parsers give None, not "")."""
    run = _coupled(client, "only thinking here")
    coupled = run["body"]["choices"][0]["message"]
    assert (coupled["reasoning"], coupled["content"]) == ("only thinking here", None)
    r = _derender(client, run["ids"], {"model": MODEL, "messages": MESSAGES})
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    assert (msg["reasoning"], msg["content"]) == ("only thinking here", None)
    assert "tool_calls" not in msg  # vLLM's ChatMessage leaves an empty list out


def test_whole_derender_without_reasoning_reports_no_reasoning_or_ids(client):
    run = _coupled(client, "Short thought.</think>It is sunny.")
    r = _derender(client, run["ids"], {"model": MODEL, "messages": MESSAGES, "include_reasoning": False,
                                       "return_token_ids": True})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert (choice["message"]["reasoning"], choice["message"]["content"]) == (None, "It is sunny.")
    assert choice["token_ids"] is None  # (vLLM: ids would show the hidden reasoning)


@pytest.mark.parametrize("size", [1, 4])
def test_streaming_derender_replays_the_parsers(client, size):
    chat_request = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "return_token_ids": True}
    run = _coupled(client, THINK_AND_CALL, tools=TOOLS)
    choices = _stream_derender(client, run["ids"], size, chat_request, run["prompt_ids"])
    got = _assemble(choices)
    assert (got["reasoning"], got["content"]) == ("The user wants weather.", "Let me look.")
    assert [(c["name"], json.loads(c["arguments"])) for c in got["calls"].values()] == [
        ("get_weather", {"city": "Paris"})]
    assert got["calls"][0]["id"]
    assert got["finish"] == "tool_calls"  # a streamed call turns the engine's "stop" into "tool_calls"
    assert choices[0]["delta"]["role"] == "assistant"
    assert all(c["delta"]["role"] is None for c in choices[1:])
    assert [t for c in choices for t in c["token_ids"]] == run["ids"]
    # the coupled stream of the same output agrees
    with client.stream("POST", "/v1/chat/completions", json={
            "model": MODEL, "messages": MESSAGES, "max_tokens": 200, "tools": TOOLS, "stream": True,
            "vllm_xargs": {"sim_text": THINK_AND_CALL}}) as resp:
        lines = [json.loads(x[6:]) for x in resp.iter_lines() if x.startswith("data: {")]
    coupled = _assemble([c for chunk in lines for c in chunk["choices"]])
    assert (coupled["reasoning"], coupled["content"], coupled["finish"]) == (
        got["reasoning"], got["content"], got["finish"])
    assert [(c["name"], c["arguments"]) for c in coupled["calls"].values()] == [
        (c["name"], c["arguments"]) for c in got["calls"].values()]


def test_streaming_derender_carries_the_replay_state(client):
    run = _coupled(client, "Short thought.</think>It is sunny.")
    chat_request = {"model": MODEL, "messages": MESSAGES}
    ids = run["ids"]
    first = client.post("/v1/chat/completions/derender", json={
        "stream": True, "model": MODEL, "prompt_token_ids": run["prompt_ids"], "chat_request": chat_request,
        "generate_chunk": {"choices": [{"index": 0, "token_ids": ids[:3]}]}}).json()
    st = first["stream_state"]
    assert (st["output_token_ids"], st["output_chunk_lens"], st["role_sent"]) == (ids[:3], [3], True)
    assert (st["prev_tokens"], st["tools_streamed"], st["last_tool_call_ids"]) == ([], False, [])
    # a finish-only chunk flushes what the parsers hold
    rest = client.post("/v1/chat/completions/derender", json={
        "stream": True, "model": MODEL, "prompt_token_ids": run["prompt_ids"], "chat_request": chat_request,
        "stream_state": st, "generate_chunk": {"choices": [{"index": 0, "token_ids": ids[3:]}]}}).json()
    end = client.post("/v1/chat/completions/derender", json={
        "stream": True, "model": MODEL, "prompt_token_ids": run["prompt_ids"], "chat_request": chat_request,
        "stream_state": rest["stream_state"],
        "generate_chunk": {"choices": [{"index": 0, "token_ids": [], "finish_reason": "stop"}]}}).json()
    assert end["stream_state"]["output_chunk_lens"] == [3, len(ids) - 3]
    got = _assemble(first["chunk"]["choices"] + rest["chunk"]["choices"] + end["chunk"]["choices"])
    assert (got["reasoning"], got["content"], got["finish"]) == ("Short thought.", "It is sunny.", "stop")


@pytest.mark.parametrize("stream", [False, True])
def test_a_parser_needs_the_chat_request(client, stream):
    body = {"model": MODEL, "stream": stream}
    if stream:
        body.update(generate_chunk={"choices": [{"index": 0, "token_ids": [5]}]}, prompt_token_ids=[1, 2])
    else:
        body.update(generate_response={"choices": [{"index": 0, "token_ids": [5]}]})
    r = client.post("/v1/chat/completions/derender", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "chat_request is required when a tool or reasoning parser is configured because plain "
        "detokenization would leak raw parser markup into content.")


def test_streaming_with_a_parser_needs_the_prompt_ids(client):
    r = client.post("/v1/chat/completions/derender", json={
        "model": MODEL, "stream": True, "chat_request": {"model": MODEL, "messages": MESSAGES},
        "generate_chunk": {"choices": [{"index": 0, "token_ids": [5]}]}})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith(
        "prompt_token_ids is required when a tool or reasoning parser is configured.")


def test_empty_token_ids_are_refused(client):
    r = _derender(client, [], {"model": MODEL, "messages": MESSAGES})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "choice 0 has empty or null token_ids"


def test_streaming_text_completion_derender_is_not_parsed(client):
    """Text completions have no parsers: the streaming derender decodes, whatever is configured."""
    ids = client.post("/tokenize", json={"model": MODEL, "prompt": "Short thought.</think>It is sunny.",
                                         "add_special_tokens": False}).json()["tokens"]
    state, text = None, ""
    for start in range(0, len(ids), 2):
        r = client.post("/v1/completions/derender", json={
            "stream": True, "model": MODEL, "stream_state": state,
            "generate_chunk": {"choices": [{"index": 0, "token_ids": ids[start:start + 2]}]}})
        assert r.status_code == 200, r.text
        state = r.json()["stream_state"]
        text += "".join(c["text"] for c in r.json()["chunk"]["choices"])
    assert text == "Short thought.</think>It is sunny."


def test_completion_render_needs_a_prompt_or_embeddings(client):
    r = client.post("/v1/completions/render", json={"model": MODEL, "prompt": None, "prompt_embeds": []})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)")
