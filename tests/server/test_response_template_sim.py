"""`--tool-call-parser hf --reasoning-parser hf` end to end: a model dir whose tokenizer_config.json
carries a response_template (the DeepSeek V4 demo model plus a Qwen3-style template anchored at its
assistant turn), the simulated engine replaying scripted output, the official openai SDK receiving
reasoning, content and a tool call whose arguments stream (several deltas for one long argument,
before the call closes) and end as the non-streaming call. Thinking on, the prompt itself opens
``<think>`` (DeepSeek V4's template): the template's start anchor lets the parser see that."""

from __future__ import annotations

import json
import os

import openai
import pytest

from tests.inprocess import InProcessStack
from vllm_pyfrontend.parsers.selection import ParserSelection
from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4

TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<｜Assistant｜>",
    "fields": {
        "thinking": {"open": "<think>", "close": "</think>", "content": "text"},
        "tool_calls": {
            "open": "<tool_call>", "close": "</tool_call>", "repeats": True, "content": "json",
            "transform": {"type": "function",
                          "function": {"name": "{content.name}", "arguments": "{content.arguments}"}},
        },
    },
}  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}, "mode": {"type": "integer"}}}}}]
CODE = "".join(f"print('line {i}: \"quoted\" and \\\\ escaped')\n" for i in range(40))
CALL = {"name": "write_file", "arguments": {"path": "a.py", "content": CODE, "mode": "644"}}
TEXT = "Write the file first.</think>Writing it.<tool_call>" + json.dumps(CALL) + "</tool_call>"
MESSAGES = [{"role": "user", "content": "Write a.py"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = materialize_deepseek_v4(str(tmp_path_factory.mktemp("hf_template_model")))
    path = os.path.join(d, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config["response_template"] = TEMPLATE
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    return d


@pytest.fixture(scope="module")
def client(model_dir):
    s = InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.001", "--max-model-len", "8192",
               "--enable-auto-tool-choice", "--tool-call-parser", "hf", "--reasoning-parser", "hf",
               "--served-model-name", "m", "--shutdown-timeout", "5", model_dir])
    try:
        yield openai.OpenAI(base_url=s.base_url + "/v1", api_key="none", max_retries=0, timeout=60)
    finally:
        s.terminate()


def _kw(text: str, **extra) -> dict:
    return dict(model="m", messages=MESSAGES, tools=TOOLS, max_tokens=4000,
                extra_body={"vllm_xargs": {"sim_text": text},
                            "chat_template_kwargs": {"enable_thinking": True}}, **extra)


def test_reasoning_content_and_streamed_call(client):
    whole = client.chat.completions.create(**_kw(TEXT))
    m = whole.choices[0].message
    assert whole.choices[0].finish_reason == "tool_calls"
    assert (m.model_extra or {}).get("reasoning") == "Write the file first."  # <think> was in the prompt
    assert m.content == "Writing it."
    [call] = m.tool_calls
    # cast by the schema ("644" -> 644), written as vLLM writes it (json.dumps of the object)
    assert call.function.name == "write_file"
    assert call.function.arguments == json.dumps({"path": "a.py", "content": CODE, "mode": 644}, ensure_ascii=False)

    deltas, reasoning, content = [], "", ""
    with client.chat.completions.stream(**_kw(TEXT)) as stream:
        for event in stream:
            if event.type == "tool_calls.function.arguments.delta":
                deltas.append((event.arguments_delta, event.arguments))
            elif event.type == "chunk" and event.chunk.choices:
                d = event.chunk.choices[0].delta
                reasoning += (d.model_extra or {}).get("reasoning") or ""
                content += d.content or ""
        final = stream.get_final_completion()
    assert (reasoning, content) == ("Write the file first.", "Writing it.")
    # many deltas for the one long argument, arriving before the call closed
    early = [acc for _, acc in deltas if '"mode"' not in acc]
    assert len(early) >= 5, deltas
    assert "".join(d for d, _ in deltas) == call.function.arguments
    streamed = final.choices[0].message.tool_calls[0]
    assert (streamed.function.name, streamed.function.arguments) == ("write_file", call.function.arguments)
    assert final.choices[0].finish_reason == "tool_calls"


def test_thinking_off_and_no_call(client):
    kw = _kw("Just the answer.")
    kw["extra_body"]["chat_template_kwargs"] = {"enable_thinking": False}
    r = client.chat.completions.create(**kw)
    m = r.choices[0].message
    assert (m.content, (m.model_extra or {}).get("reasoning"), m.tool_calls) == ("Just the answer.", None, None)
    assert r.choices[0].finish_reason == "stop"


def test_required_tool_choice(client):
    """Forced by structured outputs from the first token (vLLM refuses required with hf): the call,
    though DeepSeek V4's prompt with tools opens <think>."""
    r = client.chat.completions.create(
        model="m", messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=300,
        extra_body={"vllm_xargs": {"sim_text": '[{"name": "write_file", "parameters": {"path": "x"}}]'}})
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [
        ("write_file", {"path": "x"})]


def test_hf_without_template_fails_at_startup(tmp_path):
    from vllm_pyfrontend.text.tokenizer import Tokenizer

    tok = Tokenizer.load(materialize_deepseek_v4(str(tmp_path)))
    with pytest.raises(ValueError, match="requires `response_template` metadata"):
        ParserSelection("hf", None, tok)
    with pytest.raises(ValueError, match="cannot be combined"):
        ParserSelection("hermes", "hf", tok)


def test_supervisor_stops_the_start_without_a_template(tmp_path, capfd):
    """Checked by the supervisor before any worker starts (as vLLM checks at startup)."""
    from vllm_pyfrontend.supervisor.cli import main

    d = materialize_deepseek_v4(str(tmp_path))
    assert main(["--engine", "sim", "--enable-auto-tool-choice", "--tool-call-parser", "hf", d]) == 2
    out, err = capfd.readouterr()
    assert "requires `response_template` metadata" in out + err
