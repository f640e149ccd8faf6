"""Tool calls and reasoning end to end: frontend-supervisor with the DeepSeek V4 parsers, the
simulated engine emitting scripted DSML output, the openai client receiving the calls."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from vllm_pyfrontend.chat.tools import ToolChoiceError, plan_tools
from tests.inprocess import InProcessStack

D = "｜DSML｜"
CALL = (
    f"<{D}tool_calls>\n<{D}invoke name=\"get_weather\">\n"
    f"<{D}parameter name=\"city\" string=\"true\">Paris</{D}parameter>\n"
    f"</{D}invoke>\n</{D}tool_calls>"
)
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def stack():
    s = InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "4096",
               "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4",
               "--reasoning-parser", "deepseek_v4", "--served-model-name", "dsv4", "--shutdown-timeout", "5",
               "demo:deepseek-v4"])
    yield s
    s.terminate()


@pytest.fixture()
def client(stack):
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0, timeout=30)


def _create(client, text, **kw):
    kw.setdefault("tools", TOOLS)
    return client.chat.completions.create(
        model="dsv4", messages=MESSAGES, max_tokens=200, extra_body={"vllm_xargs": {"sim_text": text}}, **kw
    )


def _stream(client, text, **kw):
    kw.setdefault("tools", TOOLS)
    chunks = list(client.chat.completions.create(
        model="dsv4", messages=MESSAGES, max_tokens=200, stream=True,
        extra_body={"vllm_xargs": {"sim_text": text}}, **kw,
    ))
    content, reasoning, calls, finish = "", "", {}, None
    for ch in chunks:
        for c in ch.choices:
            d = c.delta
            content += d.content or ""
            reasoning += (d.model_extra or {}).get("reasoning") or ""
            for tc in d.tool_calls or []:
                cur = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                if tc.id:
                    cur["id"] = tc.id
                if tc.function and tc.function.name:
                    assert cur["name"] is None, "the name comes once, first"
                    cur["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    cur["arguments"] += tc.function.arguments
            finish = c.finish_reason or finish
    return content, reasoning, calls, finish


def test_auto_tool_call_with_reasoning(client):
    text = "The user wants weather.</think>Let me look." + CALL
    r = _create(client, text)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert (msg.model_extra or {}).get("reasoning") == "The user wants weather."
    assert msg.content == "Let me look."
    assert len(msg.tool_calls) == 1
    call = msg.tool_calls[0]
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    # Streaming gives the same result.
    content, reasoning, calls, finish = _stream(client, text)
    assert (content, reasoning, finish) == ("Let me look.", "The user wants weather.", "tool_calls")
    assert [c["name"] for c in calls.values()] == ["get_weather"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


def test_plain_answer_has_no_calls(client):
    r = _create(client, "Short thought.</think>It is sunny.")
    assert r.choices[0].finish_reason == "stop" or r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content == "It is sunny."
    assert not r.choices[0].message.tool_calls


def test_tool_choice_none_leaves_text_alone(client):
    r = _create(client, "ok</think>" + CALL, tool_choice="none")
    assert not r.choices[0].message.tool_calls
    assert "invoke" in r.choices[0].message.content


def test_include_reasoning_false(client):
    r = client.chat.completions.create(
        model="dsv4", messages=MESSAGES, max_tokens=50,
        extra_body={"vllm_xargs": {"sim_text": "secret plan</think>Answer."}, "include_reasoning": False},
    )
    assert r.choices[0].message.content == "Answer."
    assert not (r.choices[0].message.model_extra or {}).get("reasoning")


def test_named_tool_choice_is_forced_and_finishes_with_stop(client):
    # The engine's structured outputs would force this JSON; the sim scripts it.
    choice = {"type": "function", "function": {"name": "get_weather"}}
    r = _create(client, 'Use the tool.</think>{"city": "Paris"}', tool_choice=choice)
    assert r.choices[0].finish_reason == "stop"
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_required_tool_choice(client):
    r = _create(client, 'Use it.</think>[{"name": "get_weather", "parameters": {"city": "Paris"}}]', tool_choice="required")
    assert r.choices[0].finish_reason == "tool_calls"
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {"city": "Paris"}


def test_tool_choice_errors(stack):
    for body in (
        {"tool_choice": "required"},
        {"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": TOOLS},
        {"tool_choice": "sometimes", "tools": TOOLS},
        {"tools": [{"type": "function", "function": {}}]},
    ):
        r = httpx.post(stack.base_url + "/v1/chat/completions",
                       json={"model": "dsv4", "messages": MESSAGES, **body}, timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] in ("tool_choice", "tools")


def test_auto_needs_the_server_flags():
    with pytest.raises(ToolChoiceError) as e:
        plan_tools(TOOLS, "auto", parallel_tool_calls=None, auto_enabled=False, has_parser=True)
    assert "--enable-auto-tool-choice" in e.value.message
    plan = plan_tools(TOOLS, "required", parallel_tool_calls=False, auto_enabled=False, has_parser=False)
    assert plan.schema["maxItems"] == 1


def test_required_schema_matches_vllm():
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam
    from vllm.tool_parsers.utils import get_json_schema_from_tools

    tools = [ChatCompletionToolsParam(**t) for t in TOOLS]
    for parallel in (None, False):
        ours = plan_tools(TOOLS, "required", parallel_tool_calls=parallel, auto_enabled=False, has_parser=False)
        assert ours.schema == get_json_schema_from_tools("required", tools, parallel)


def test_long_argument_streams_through_the_openai_sdk(client):
    """A long string parameter reaches the SDK's streaming accumulator as many
    argument deltas while the model is still writing it (each delta a valid
    prefix, not yet the whole call), and the accumulated call equals the
    non-streaming response's."""
    code = "".join(f'print("line {i}: <b>杭州</b> \\\\ ok")\n' for i in range(40))
    text = "plan</think>" + (
        f"<{D}tool_calls>\n<{D}invoke name=\"run_code\">\n"
        f"<{D}parameter name=\"code\" string=\"true\">{code}</{D}parameter>\n"
        f"<{D}parameter name=\"timeout\" string=\"false\">30</{D}parameter>\n"
        f"</{D}invoke>\n</{D}tool_calls>"
    )
    tools = [{
        "type": "function",
        "function": {
            "name": "run_code",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}, "timeout": {"type": "integer"}},
                "required": ["code", "timeout"],
                "additionalProperties": False,
            },
        },
    }]
    kw = dict(model="dsv4", messages=MESSAGES, max_tokens=2000, tools=tools,
              extra_body={"vllm_xargs": {"sim_text": text}})
    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in whole] == [
        ("run_code", {"code": code, "timeout": 30})
    ]
    deltas = []
    with client.chat.completions.stream(**kw) as stream:
        for event in stream:
            if event.type == "tool_calls.function.arguments.delta":
                deltas.append((event.arguments_delta, event.arguments))
        final = stream.get_final_completion()
    # many deltas for the one long argument, arriving before the call closed
    assert len(deltas) >= 10, len(deltas)
    early = [acc for _, acc in deltas if acc.startswith('{"code": "') and "timeout" not in acc]
    assert len(early) >= 5
    assert "".join(d for d, _ in deltas) == whole[0].function.arguments
    call = final.choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("run_code", whole[0].function.arguments)
    assert call.function.parsed_arguments == {"code": code, "timeout": 30}
    assert final.choices[0].finish_reason == "tool_calls"
