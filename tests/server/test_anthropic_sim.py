"""Anthropic's Messages API end to end with the official `anthropic` SDK: frontend-supervisor
with the DeepSeek V4 parsers and the simulated engine, whose output each request scripts
(`vllm_xargs.sim_text`) in DeepSeek V4's thinking and DSML tool-call formats.

Covers the multi-turn tool loop (thinking + tool_use, tool_result back, a text answer) through
the SDK's streaming accumulator, stop reasons, forced tool choices, count_tokens, Anthropic's
error shape and status codes on these routes only, x-api-key, ping keep-alives, per-route HTTP
metrics, request logs and /openapi.json.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.inprocess import InProcessStack

KEY = "test-key"
D = "｜DSML｜"


def dsml_call(name: str, **params: str) -> str:
    body = "".join(f"<{D}parameter name=\"{k}\" string=\"true\">{v}</{D}parameter>\n" for k, v in params.items())
    return f"<{D}tool_calls>\n<{D}invoke name=\"{name}\">\n{body}</{D}invoke>\n</{D}tool_calls>"


TOOLS = [{
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]
USER = {"role": "user", "content": "What is the weather in Paris?"}


def sim_args(*extra: str, step: str = "0.002") -> list[str]:
    return ["--engine", "sim", "--workers", "1", "--sim-step-time", step, "--max-model-len", "4096",
            "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4", "--reasoning-parser", "deepseek_v4",
            "--served-model-name", "dsv4", "--shutdown-timeout", "5", *extra, "demo:deepseek-v4"]


@pytest.fixture(scope="module")
def stack():
    s = InProcessStack(sim_args("--api-key", KEY, "--enable-log-requests"))
    yield s
    s.terminate()


@pytest.fixture()
def client(stack):
    return anthropic.Anthropic(base_url=stack.base_url, api_key=KEY, max_retries=0, timeout=30)


def script(text: str) -> dict:
    return {"vllm_xargs": {"sim_text": text}}


def test_multi_turn_tool_loop_streaming(client):
    """thinking + tool_use, the client runs the tool and sends tool_result, the model answers."""
    messages: list[dict] = [USER]
    first = "The user wants the weather; call the tool.</think>Let me check." + dsml_call("get_weather", city="Paris")
    with client.messages.stream(model="dsv4", max_tokens=1500, messages=messages, tools=TOOLS,
                                thinking={"type": "enabled", "budget_tokens": 1024},
                                extra_body=script(first)) as stream:
        events = [e.type for e in stream]
        turn1 = stream.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert [b.type for b in turn1.content] == ["thinking", "text", "tool_use"]
    assert turn1.content[0].thinking == "The user wants the weather; call the tool."
    assert turn1.content[0].signature  # signature_delta closes a thinking block
    assert turn1.content[1].text == "Let me check."
    call = turn1.content[2]
    assert call.name == "get_weather" and call.input == {"city": "Paris"} and call.id
    assert turn1.stop_reason == "tool_use" and turn1.stop_sequence is None
    assert turn1.usage.input_tokens > 0 and turn1.usage.output_tokens > 0

    # Turn 2: the assistant turn goes back as the SDK gave it (thinking, text, tool_use blocks)
    # with the tool's result; the history renders and the model answers in text.
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True, exclude={"parsed_output"})
                                          for b in turn1.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18 C, sunny"}]},
    ]
    answer = "It is sunny.</think>It is 18 C and sunny in Paris."
    with client.messages.stream(model="dsv4", max_tokens=1500, messages=messages, tools=TOOLS,
                                thinking={"type": "enabled", "budget_tokens": 1024},
                                extra_body=script(answer)) as stream:
        text = "".join(stream.text_stream)
        turn2 = stream.get_final_message()
    assert text == "It is 18 C and sunny in Paris."
    assert [b.type for b in turn2.content] == ["thinking", "text"]
    assert turn2.content[1].text == text and turn2.stop_reason in ("end_turn", "max_tokens")
    # The history reached the prompt: it is longer than the first turn's.
    assert turn2.usage.input_tokens > turn1.usage.input_tokens
    # count_tokens renders the same prompt as create.
    count = client.messages.count_tokens(model="dsv4", messages=messages, tools=TOOLS,
                                         thinking={"type": "enabled", "budget_tokens": 1024})
    assert count.input_tokens == turn2.usage.input_tokens


def test_create_returns_the_same_blocks_as_the_stream(client):
    text = "Think.</think>Checking." + dsml_call("get_weather", city="Oslo")
    r = client.messages.create(model="dsv4", max_tokens=300, messages=[USER], tools=TOOLS, extra_body=script(text))
    assert r.type == "message" and r.role == "assistant" and r.id.startswith("msg_")
    assert [b.type for b in r.content] == ["thinking", "text", "tool_use"]
    assert r.content[2].input == {"city": "Oslo"} and r.stop_reason == "tool_use"
    with client.messages.stream(model="dsv4", max_tokens=300, messages=[USER], tools=TOOLS,
                                extra_body=script(text)) as stream:
        final = stream.get_final_message()
    assert [b.model_dump(exclude={"id", "signature", "parsed_output"}) for b in final.content] == \
        [b.model_dump(exclude={"id", "signature", "parsed_output"}) for b in r.content]
    assert (final.stop_reason, final.usage.output_tokens) == (r.stop_reason, r.usage.output_tokens)


def test_stop_reasons(client):
    r = client.messages.create(model="dsv4", max_tokens=3, messages=[USER],
                               extra_body=script("a b c d e f g h i j k l m n o p"))
    assert r.stop_reason == "max_tokens" and r.usage.output_tokens == 3
    r = client.messages.create(model="dsv4", max_tokens=100, messages=[USER], stop_sequences=["STOP"],
                               extra_body=script("x</think>one two STOP three"))
    assert (r.stop_reason, r.stop_sequence) == ("stop_sequence", "STOP")
    assert r.content[-1].text == "one two "
    r = client.messages.create(model="dsv4", max_tokens=100, messages=[USER], extra_body=script("x</think>Done."))
    assert (r.stop_reason, r.stop_sequence) in (("end_turn", None), ("max_tokens", None))
    with client.messages.stream(model="dsv4", max_tokens=100, messages=[USER], stop_sequences=["STOP"],
                                extra_body=script("x</think>one two STOP three")) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "STOP")


def test_thinking_disabled_and_empty_answer(client):
    # thinking disabled: reasoning effort "none", so the V4 parser treats all output as text.
    r = client.messages.create(model="dsv4", max_tokens=50, messages=[USER], thinking={"type": "disabled"},
                               extra_body=script("Plain answer."))
    assert [b.type for b in r.content] == ["text"] and r.content[0].text == "Plain answer."
    # Nothing but thinking: no text block of its own; an empty output is one empty text block.
    r = client.messages.create(model="dsv4", max_tokens=50, messages=[USER], thinking={"type": "disabled"},
                               extra_body={"vllm_xargs": {"sim_token_ids": [1]}})
    assert len(r.content) == 1 and r.content[0].type == "text"


def test_forced_tool_choices(client):
    # tool_choice "tool": the engine's structured outputs force the arguments (the sim scripts them).
    r = client.messages.create(model="dsv4", max_tokens=100, messages=[USER], tools=TOOLS,
                               tool_choice={"type": "tool", "name": "get_weather"},
                               extra_body=script('Forced.</think>{"city": "Rome"}'))
    assert [b.type for b in r.content][-1] == "tool_use"
    assert r.content[-1].input == {"city": "Rome"} and r.stop_reason == "tool_use"
    # "any": the model must call one of the tools.
    r = client.messages.create(model="dsv4", max_tokens=100, messages=[USER], tools=TOOLS,
                               tool_choice={"type": "any", "disable_parallel_tool_use": True},
                               extra_body=script('Any.</think>[{"name": "get_weather", "parameters": {"city": "Lima"}}]'))
    assert r.content[-1].type == "tool_use" and r.content[-1].input == {"city": "Lima"}
    assert r.stop_reason == "tool_use"
    # "none": the call stays text.
    r = client.messages.create(model="dsv4", max_tokens=200, messages=[USER], tools=TOOLS,
                               tool_choice={"type": "none"},
                               extra_body=script("x</think>" + dsml_call("get_weather", city="Paris")))
    assert [b.type for b in r.content] == ["thinking", "text"] and "invoke" in r.content[1].text


def test_history_blocks_reach_the_template(client):
    """system blocks, a thinking + tool_use assistant turn and an is_error tool_result render."""
    base = dict(model="dsv4", tools=TOOLS, system=[{"type": "text", "text": "Be brief."}])
    history = [USER, {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Need weather.", "signature": "s"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]}]
    ok = client.messages.count_tokens(messages=[*history, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]}]}], **base)
    failed = client.messages.count_tokens(messages=[*history, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny", "is_error": True}]}], **base)
    # is_error reaches the model ("Error: sunny"): vLLM drops the flag.
    assert failed.input_tokens > ok.input_tokens
    r = client.messages.create(max_tokens=20, messages=[*history, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
        {"type": "text", "text": "Thanks."}]}], extra_body=script("ok</think>Sunny."), **base)
    assert r.content[-1].text == "Sunny."


def test_errors_have_anthropic_shape_on_messages_routes_only(stack, client):
    url = stack.base_url
    auth = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    cases = [
        ({"model": "dsv4", "messages": [USER]}, 400),  # max_tokens is required
        ({"model": "dsv4", "messages": [USER], "max_tokens": 0}, 400),
        ({"model": "nope", "messages": [USER], "max_tokens": 5}, 404),
        ({"model": "dsv4", "messages": [USER], "max_tokens": "5"}, 400),
        ({"model": "dsv4", "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
          "max_tokens": 5}, 400),
        ({"model": "dsv4", "messages": [USER], "max_tokens": 5000,
          "thinking": {"type": "enabled", "budget_tokens": 100}}, 400),
        ({"model": "dsv4", "messages": [USER], "max_tokens": 500,
          "thinking": {"type": "enabled", "budget_tokens": 1024}}, 400),  # budget >= max_tokens
        ({"model": "dsv4", "messages": [USER], "max_tokens": 5, "tool_choice": {"type": "tool", "name": "x"},
          "tools": TOOLS}, 400),
    ]
    for body, status in cases:
        r = httpx.post(url + "/v1/messages", json=body, headers=auth, timeout=30)
        assert r.status_code == status, (body, r.text)
        err = r.json()
        assert err["type"] == "error" and err["error"]["message"], err
        assert err["error"]["type"] == ("not_found_error" if status == 404 else "invalid_request_error"), err
    # The SDK raises its typed errors from that shape.
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="nope", max_tokens=5, messages=[USER])
    assert e.value.body["error"]["type"] == "not_found_error"
    # Authentication: x-api-key or Bearer; without either, 401 in Anthropic's shape ...
    r = httpx.post(url + "/v1/messages", json=cases[0][0], timeout=30)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = httpx.post(url + "/v1/messages/count_tokens", json={"model": "dsv4", "messages": [USER]},
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert r.status_code == 200 and r.json()["input_tokens"] > 0
    r = httpx.get(url + "/v1/messages", headers=auth, timeout=30)
    assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0).messages.create(
            model="dsv4", max_tokens=5, messages=[USER])
    # ... while the other routes keep the OpenAI shape (and accept x-api-key too).
    r = httpx.post(url + "/v1/chat/completions", json={"model": "dsv4", "messages": [USER]}, timeout=30)
    assert r.status_code == 401 and r.json()["error"]["code"] == 401
    r = httpx.post(url + "/v1/chat/completions", json={"model": "nope", "messages": [USER]},
                   headers={"x-api-key": KEY}, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == 404


def test_raw_stream_events(stack):
    body = {"model": "dsv4", "max_tokens": 300, "messages": [USER], "tools": TOOLS, "stream": True,
            **script("Hmm.</think>Ok." + dsml_call("get_weather", city="Paris"))}
    with httpx.stream("POST", stack.base_url + "/v1/messages", json=body, headers={"x-api-key": KEY},
                      timeout=30) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert not any("[DONE]" in line for line in lines)
    names = [line[7:] for line in lines if line.startswith("event: ")]
    datas = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert [d["type"] for d in datas] == names
    kinds = [(d["type"], (d.get("delta") or d.get("content_block") or {}).get("type")) for d in datas]
    compact = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
    assert compact == [
        ("message_start", None),
        ("content_block_start", "thinking"), ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "signature_delta"), ("content_block_stop", None),
        ("content_block_start", "text"), ("content_block_delta", "text_delta"), ("content_block_stop", None),
        ("content_block_start", "tool_use"), ("content_block_delta", "input_json_delta"),
        ("content_block_stop", None),
        ("message_delta", None), ("message_stop", None),
    ]
    assert [d["index"] for d in datas if d["type"] == "content_block_start"] == [0, 1, 2]
    start = datas[0]["message"]
    assert start["usage"]["output_tokens"] == 0 and start["content"] == [] and start["stop_reason"] is None
    delta = datas[-2]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"]["input_tokens"] == start["usage"]["input_tokens"] and delta["usage"]["output_tokens"] > 0
    assert list(delta["usage"]) == ["input_tokens", "output_tokens"]  # no cache counts without prompt details


@pytest.fixture(scope="module")
def cache_stack():
    """--enable-prompt-tokens-details, and an engine that models a prefix cache (blocks of 16)."""
    with InProcessStack(sim_args("--enable-prompt-tokens-details", "--enable-prefix-caching")) as s:
        yield s


def test_cache_usage_with_prompt_tokens_details(cache_stack):
    """--enable-prompt-tokens-details (vLLM's test_anthropic_streaming_cache_usage): message_delta
    counts the prompt tokens read from the prefix cache and those written to it apart from
    `input_tokens` (message_start's input_tokens is the whole prompt, the sum of the three); the
    body's usage too."""
    s = cache_stack
    client = anthropic.Anthropic(base_url=s.base_url, api_key="none", max_retries=0, timeout=30)
    user = {"role": "user", "content": "Cache coverage sentinel. " * 64 + "Answer with one word."}

    def streamed() -> tuple[dict, dict]:
        with httpx.stream("POST", s.base_url + "/v1/messages", timeout=30, json={
                "model": "dsv4", "max_tokens": 1, "messages": [user], "stream": True}) as r:
            datas = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
        start, delta = datas[0], next(d for d in datas if d["type"] == "message_delta")
        assert list(delta["usage"]) == ["input_tokens", "output_tokens", "cache_creation_input_tokens",
                                        "cache_read_input_tokens"]
        return start["message"]["usage"], delta["usage"]

    start, cold = streamed()
    prompt = start["input_tokens"]
    assert start == {"input_tokens": prompt, "output_tokens": 0}
    assert cold["cache_read_input_tokens"] == 0
    assert cold["cache_creation_input_tokens"] == prompt // 16 * 16 > 0
    assert cold["input_tokens"] == prompt - cold["cache_creation_input_tokens"]
    start, warm = streamed()
    assert warm["cache_read_input_tokens"] > 0
    assert warm["input_tokens"] + warm["cache_read_input_tokens"] + warm["cache_creation_input_tokens"] == \
        start["input_tokens"] == prompt
    body = client.messages.create(model="dsv4", max_tokens=1, messages=[user])
    assert body.usage.cache_read_input_tokens > 0 and body.usage.cache_creation_input_tokens == 0
    assert body.usage.input_tokens + body.usage.cache_read_input_tokens == prompt


def test_chat_usage_reports_the_tokens_written_to_the_cache(cache_stack):
    """vLLM's chat `prompt_tokens_details` has the prompt tokens the engine wrote to its prefix
    cache (`created_cache_tokens`); its text completions leave them null."""
    content = "A fresh prompt for the cache. " * 20
    chat = httpx.post(cache_stack.base_url + "/v1/chat/completions", timeout=30, json={
        "model": "dsv4", "max_tokens": 1, "messages": [{"role": "user", "content": content}]}).json()
    prompt = chat["usage"]["prompt_tokens"]
    details = chat["usage"]["prompt_tokens_details"]
    # (the template's first blocks may be cached already: the other tests' prompts share them)
    assert list(details) == ["cached_tokens", "created_cache_tokens", "multimodal_tokens"]
    assert details["cached_tokens"] + details["created_cache_tokens"] == prompt // 16 * 16
    assert details["created_cache_tokens"] > 0 and details["multimodal_tokens"] is None
    with httpx.stream("POST", cache_stack.base_url + "/v1/chat/completions", timeout=30, json={
            "model": "dsv4", "max_tokens": 1, "messages": [{"role": "user", "content": content}], "stream": True,
            "stream_options": {"include_usage": True}}) as r:
        last = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")][-1]
    details = last["usage"]["prompt_tokens_details"]
    assert details["cached_tokens"] > 0 and details["created_cache_tokens"] == prompt // 16 * 16 - details["cached_tokens"]
    text = httpx.post(cache_stack.base_url + "/v1/completions", timeout=30, json={
        "model": "dsv4", "max_tokens": 1, "prompt": content}).json()
    assert text["usage"]["prompt_tokens_details"]["created_cache_tokens"] is None


def test_ping_events_keep_a_silent_stream_alive():
    with InProcessStack(sim_args("--sse-keep-alive-interval", "0.15", step="0.6")) as s:
        body = {"model": "dsv4", "max_tokens": 2, "messages": [USER], "stream": True}
        with httpx.stream("POST", s.base_url + "/v1/messages", json=body, timeout=30) as r:
            lines = [line for line in r.iter_lines() if line]
        assert lines.count("event: ping") >= 3, lines
        assert lines.count('data: {"type":"ping"}') == lines.count("event: ping")
        assert not any(line.startswith(":") for line in lines)
        # The SDK skips them.
        client = anthropic.Anthropic(base_url=s.base_url, api_key="none", max_retries=0)
        with client.messages.stream(model="dsv4", max_tokens=1, messages=[USER]) as stream:
            final = stream.get_final_message()
        assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 1


def test_metrics_logs_and_openapi(stack, client):
    client.messages.create(model="dsv4", max_tokens=3, messages=[USER])
    client.messages.count_tokens(model="dsv4", messages=[USER])
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="dsv4", max_tokens=0, messages=[USER])
    text = httpx.get(stack.base_url + "/metrics", headers={"x-api-key": KEY}, timeout=30).text
    got = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "http_requests_total":
                got[(s.labels["handler"], s.labels["status"])] = s.value
    assert got[("/v1/messages", "2xx")] >= 1 and got[("/v1/messages", "4xx")] >= 1
    assert got[("/v1/messages/count_tokens", "2xx")] >= 1
    logged = [json.loads(line[line.index("{"):]) for line in stack.logs().splitlines()
              if '"event":"request"' in line]
    routes = {(rec["route"], rec["status"]) for rec in logged}
    assert ("/v1/messages", 200) in routes and ("/v1/messages", 400) in routes
    assert ("/v1/messages/count_tokens", 200) in routes
    doc = httpx.get(stack.base_url + "/openapi.json", timeout=30).json()
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        op = doc["paths"][path]["post"]
        ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        assert ref in doc["components"]["schemas"]
        assert "AnthropicErrorResponse" in json.dumps(op["responses"]["400"])
    assert "max_tokens" in doc["components"]["schemas"]["MessagesRequest"]["required"]
