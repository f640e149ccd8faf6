"""The Responses API on the simulated engine with the DeepSeek V4 parsers (scripted engine
output): a streaming multi-turn tool-calling loop through the official `openai` SDK, background
responses cancelled from the other worker, `store: false`, refusals, per-route metrics and
request logs, `/openapi.json`, and stored responses outliving the workers (SQLite store)."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import openai
import pytest

from tests.reliability.helpers import workers_of
from tests.responses.helpers import client, create_on, on_worker
from tests.stack import Stack

D = "｜DSML｜"
CALL = (
    f"<{D}tool_calls>\n<{D}invoke name=\"get_weather\">\n"
    f"<{D}parameter name=\"city\" string=\"true\">Paris</{D}parameter>\n"
    f"</{D}invoke>\n</{D}tool_calls>"
)
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


@pytest.fixture(scope="module")
def stack():
    s = Stack(["--engine", "sim", "--workers", "2", "--sim-step-time", "0.002", "--max-model-len", "8192",
               "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4", "--reasoning-parser", "deepseek_v4",
               "--enable-log-requests", "--served-model-name", "dsv4", "--shutdown-timeout", "5",
               "demo:deepseek-v4"])
    yield s
    s.terminate()


def _script(text: str) -> dict:
    return {"vllm_xargs": {"sim_text": text}}


def test_streaming_tool_loop_with_previous_response_id(stack):
    """The model calls a tool (streamed), the client answers with function_call_output and
    previous_response_id on another connection, the model answers; all in the Responses style."""
    c = client(stack.base_url)
    with c.responses.stream(model="dsv4", input="What is the weather in Paris?", tools=TOOLS,
                            max_output_tokens=300,
                            extra_body=_script("The user wants the weather.</think>Let me check." + CALL)) as st:
        events = list(st)
        first = st.get_final_response()
    types = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    # Reasoning, then the message, then the call: each item added, streamed, done, in order.
    assert types[2:] == [
        "response.output_item.added", "response.content_part.added",
        *["response.reasoning_text.delta"] * types.count("response.reasoning_text.delta"),
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        *["response.output_text.delta"] * types.count("response.output_text.delta"),
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * types.count("response.function_call_arguments.delta"),
        "response.function_call_arguments.done", "response.output_item.done", "response.completed",
    ]
    assert types.count("response.function_call_arguments.delta") >= 1
    assert [o.type for o in first.output] == ["reasoning", "message", "function_call"]
    assert first.output[0].content[0].text == "The user wants the weather."
    assert first.output_text == "Let me check."
    call = first.output[2]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    done_call = [e for e in events if e.type == "response.function_call_arguments.done"][0]
    assert done_call.arguments == call.arguments
    assert first.status == "completed" and first.usage.output_tokens_details.reasoning_tokens > 0

    # Turn 2: only the tool's output and the previous response's id; the frontend rebuilds the
    # conversation (turn 1's input, its reasoning, message and call, then the output).
    with c.responses.stream(model="dsv4", previous_response_id=first.id, tools=TOOLS, max_output_tokens=300,
                            input=[{"type": "function_call_output", "call_id": call.call_id,
                                    "output": json.dumps({"sky": "sunny", "c": 21})}],
                            extra_body=_script("It is known now.</think>It is sunny and 21 C in Paris.")) as st:
        types2 = [e.type for e in st]
        second = st.get_final_response()
    assert second.output_text == "It is sunny and 21 C in Paris."
    assert second.previous_response_id == first.id and types2[-1] == "response.completed"
    assert "response.function_call_arguments.delta" not in types2
    # Its prompt holds turn 1 (input + output) and the tool output on top.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens

    # The same conversation sent in full, without previous_response_id, is the same prompt.
    full = c.responses.create(
        model="dsv4", tools=TOOLS, max_output_tokens=5,
        input=[{"role": "user", "content": "What is the weather in Paris?"},
               {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "The user wants the weather."}],
                "summary": []},
               {"role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
               {"type": "function_call", "call_id": call.call_id, "name": "get_weather", "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id,
                "output": json.dumps({"sky": "sunny", "c": 21})}],
        extra_body=_script("x</think>y"))
    assert full.usage.input_tokens == second.usage.input_tokens


def test_tool_choice_required_and_refusals(stack):
    c = client(stack.base_url)
    forced = c.responses.create(model="dsv4", input="Weather?", tools=TOOLS, tool_choice="required",
                                max_output_tokens=100,
                                extra_body=_script('Use it.</think>[{"name": "get_weather", "parameters": {"city": "Oslo"}}]'))
    calls = [o for o in forced.output if o.type == "function_call"]
    assert len(calls) == 1 and json.loads(calls[0].arguments) == {"city": "Oslo"}
    for kw, param in [
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}, "tools"),
        ({"tool_choice": {"type": "file_search"}, "tools": TOOLS}, "tool_choice"),
        ({"background": True, "store": False}, "background"),
        ({"previous_response_id": "resp_nope"}, "response_id"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]}, "input"),
    ]:
        body = {"model": "dsv4", "input": "hi", **kw}
        r = httpx.post(stack.base_url + "/v1/responses", json=body, timeout=30)
        want = 404 if param == "response_id" else 400
        assert r.status_code == want, (kw, r.text)
        assert r.json()["error"]["param"] == param, (kw, r.text)
    r = httpx.post(stack.base_url + "/v1/responses", json={"model": "dsv4", "input": "hi", "tools": [{"type": "web_search"}]})
    assert "web_search" in r.json()["error"]["message"]


def test_store_false_and_text_format(stack):
    c = client(stack.base_url)
    r = c.responses.create(model="dsv4", input="hi", store=False, max_output_tokens=4,
                           extra_body=_script("x</think>hello"))
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model="dsv4", input="again", previous_response_id=r.id, max_output_tokens=4)
    # text.format json_schema is lowered to the engine's structured outputs (the sim engine
    # ignores constraints, so the request is the check: accepted, and echoed back).
    fmt = {"type": "json_schema", "name": "p", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}
    r = c.responses.create(model="dsv4", input="json", text={"format": fmt}, max_output_tokens=40,
                           extra_body=_script('x</think>{"a": 1}'))
    assert r.text.format.type == "json_schema" and r.output_text == '{"a": 1}'


def test_background_cancelled_from_the_other_worker(stack):
    """A background response runs on worker A; the cancel lands on worker B (fresh connections
    until B takes one), which sets the store's flag; A aborts its engine request."""
    body = dict(model="dsv4", input="Write a very long story.", background=True, max_output_tokens=4000,
                extra_body={"ignore_eos": True})
    started, owner = create_on(stack.base_url, None, **body)
    assert started.status == "queued" and started.background
    other = 1 - owner
    got, _ = on_worker(stack.base_url, other, lambda c: c.responses.with_raw_response.retrieve(started.id))
    assert got.status == "in_progress"
    cancelled, served = on_worker(stack.base_url, other, lambda c: c.responses.with_raw_response.cancel(started.id))
    assert served == other and cancelled.status == "cancelled"
    deadline = time.monotonic() + 20
    while True:
        final, _ = on_worker(stack.base_url, None, lambda c: c.responses.with_raw_response.retrieve(started.id))
        if final.usage is not None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    # The owner stored what it had when it aborted: cancelled, far short of 4000 tokens.
    assert final.status == "cancelled" and final.usage is not None
    assert 0 < final.usage.output_tokens < 4000
    stats = None
    for _ in range(50):
        stats = stack.freshest_engine_stats()
        if stats and stats["num_running_reqs"] == 0 and stats["num_waiting_reqs"] == 0:
            break
        time.sleep(0.2)
    assert stats["num_running_reqs"] == 0 and stats["num_waiting_reqs"] == 0, stats
    # A finished (synchronous) response cannot be cancelled.
    sync = client(stack.base_url).responses.create(model="dsv4", input="hi", max_output_tokens=3)
    r = httpx.post(f"{stack.base_url}/v1/responses/{sync.id}/cancel", timeout=30)
    assert r.status_code == 400


def test_background_survives_its_client_leaving(stack):
    """A background stream whose client disconnects mid-stream still completes and is stored."""
    c = client(stack.base_url)
    stream = c.responses.create(model="dsv4", input="story", background=True, stream=True, max_output_tokens=400,
                                extra_body={"ignore_eos": True})
    first = next(iter(stream))
    assert first.type == "response.created"
    rid = first.response.id
    stream.close()  # the client leaves
    deadline = time.monotonic() + 30
    while True:
        got = client(stack.base_url).responses.retrieve(rid)
        if got.status != "in_progress" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got.status == "incomplete" and got.usage.output_tokens == 400
    assert got.incomplete_details.reason == "max_output_tokens"


def test_routes_metrics_logs_and_openapi(stack):
    spec = httpx.get(stack.base_url + "/openapi.json").json()
    for path, method in [("/v1/responses", "post"), ("/v1/responses/{response_id}", "get"),
                         ("/v1/responses/{response_id}/cancel", "post")]:
        assert method in spec["paths"][path], path
    body = spec["paths"]["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    props = spec["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]["properties"]
    assert {"input", "previous_response_id", "background", "store", "tools", "text"} <= set(props)
    c = client(stack.base_url)
    r = c.responses.create(model="dsv4", input="hi", max_output_tokens=3)
    c.responses.retrieve(r.id)
    metrics = ""
    for _ in range(5):
        metrics = httpx.get(stack.base_url + "/metrics").text
        if 'handler="/v1/responses/{response_id}"' in metrics:
            break
        time.sleep(0.5)
    assert any('handler="/v1/responses"' in line and 'status="2xx"' in line and line.startswith("http_requests_total")
               for line in metrics.splitlines()), metrics[:2000]
    assert 'handler="/v1/responses/{response_id}"' in metrics
    logged = [json.loads(line[line.index("{"):])
              for line in list(stack.log) if '"event":"request"' in line and "/v1/responses" in line]
    routes = {rec["route"] for rec in logged}
    assert {"/v1/responses", "/v1/responses/{response_id}"} <= routes, routes


def test_stored_responses_outlive_every_worker(stack):
    """SQLite in the supervisor's runtime directory: both workers killed and restarted, the
    stored response is still there (vLLM's in-memory store loses it), and chains on."""
    c = client(stack.base_url)
    r = c.responses.create(model="dsv4", input="remember me", max_output_tokens=4, extra_body=_script("a</think>b"))
    pids = workers_of(stack)
    assert len(pids) == 2
    restarts = sum("ready again" in line for line in stack.log)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while sum("ready again" in line for line in stack.log) < restarts + 2:
        assert time.monotonic() < deadline, stack.logs()
        time.sleep(0.2)
    assert not set(workers_of(stack)) & set(pids)
    for worker in (0, 1):
        got, served = on_worker(stack.base_url, worker, lambda cl: cl.responses.with_raw_response.retrieve(r.id))
        assert got.id == r.id and got.output_text == "b" and served == worker
    nxt = client(stack.base_url).responses.create(model="dsv4", input="and now?", previous_response_id=r.id,
                                                  max_output_tokens=3)
    assert nxt.previous_response_id == r.id
