"""--tool-parser-plugin: a user's file registers a tool parser that --tool-call-parser then names
(as vLLM's flag). The supervisor stops the start on a broken plugin or an unregistered name; the
workers load the plugin and the openai SDK receives the calls (simulated engine)."""

from __future__ import annotations

import json
import os

import openai
import pytest

from tests.stack import Stack
from vllm_pyfrontend.supervisor.cli import parse_args

PLUGIN = os.path.join(os.path.dirname(__file__), "tool_parser_plugin_example.py")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


def test_plugin_name_accepted_at_start():
    opts = parse_args(["--engine", "sim", "--enable-auto-tool-choice", "--tool-parser-plugin", PLUGIN,
                       "--tool-call-parser", "example_calls", "demo:deepseek-v4"])
    assert opts.policy.tool_parser_plugin == PLUGIN


@pytest.mark.parametrize("argv, reason", [
    (["--tool-parser-plugin", "/nonexistent/plugin.py", "--tool-call-parser", "hermes"], "could not be loaded"),
    (["--tool-parser-plugin", PLUGIN, "--tool-call-parser", "not_registered"], "not registered"),
])
def test_bad_plugin_stops_the_start(argv, reason, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--engine", "sim", "--enable-auto-tool-choice", *argv, "demo:deepseek-v4"])
    assert reason in capsys.readouterr().err


@pytest.fixture(scope="module")
def client():
    s = Stack(["--engine", "sim", "--workers", "2", "--sim-step-time", "0.002", "--max-model-len", "4096",
               "--enable-auto-tool-choice", "--tool-parser-plugin", PLUGIN, "--tool-call-parser", "example_calls",
               "--served-model-name", "m", "--shutdown-timeout", "5", "demo:deepseek-v4"])
    try:
        yield openai.OpenAI(base_url=s.base_url + "/v1", api_key="none", max_retries=0, timeout=30)
    finally:
        s.terminate()


TEXT = 'Checking. <<call get_weather>>{"city": "Paris"}<</call>>'


def test_plugin_parser_serves_calls(client):
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                       max_tokens=100, extra_body={"vllm_xargs": {"sim_text": TEXT}})
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert m.content == "Checking."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [
        ("get_weather", {"city": "Paris"})]
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                            max_tokens=100, stream=True,
                                            extra_body={"vllm_xargs": {"sim_text": TEXT}})
    args, names = "", []
    for ch in stream:
        for tc in ch.choices[0].delta.tool_calls or [] if ch.choices else []:
            names += [tc.function.name] if tc.function and tc.function.name else []
            args += tc.function.arguments or "" if tc.function else ""
    assert names == ["get_weather"] and json.loads(args) == {"city": "Paris"}
