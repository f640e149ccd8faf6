"""The chat route's usage and message as vLLM words them with parsers (vLLM 0.32
`chat_completion/serving.py`):

- with a `--reasoning-parser` configured, `usage.completion_tokens_details` is
  `{"reasoning_tokens": N}`: the output tokens inside reasoning, summed over the choices, with
  `include_reasoning: false` too (vLLM's tests/entrypoints/openai/chat_completion/
  test_include_reasoning.py::test_reasoning_tokens_in_usage); streamed in the usage chunk, and
  per choice (so far) in every continuous usage chunk, the role chunk's 0 included; Responses
  reports the same count in `output_tokens_details`. Without a reasoning parser the body's
  `completion_tokens_details` is null, the usage chunk has none, and continuous usage chunks
  carry it null;
- with a "required" or named tool choice the non-streamed message's content is "" rather than
  null when the call is all the output.

In process: the simulated engine scripting DeepSeek V4 output (`sim_text`); its chat template
opens the assistant's turn in reasoning, so the text before `</think>` is reasoning."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.inprocess import InProcessStack

MODEL = "dsv4"
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
REASONING = "The user wants weather."
ANSWER = "Paris is sunny."
TOOLS = [{
    "type": "function",
    "function": {"name": "get_weather", "description": "Weather for a city",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def _stack(*flags: str) -> InProcessStack:
    return InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "4096",
                           *flags, "--served-model-name", MODEL, "--shutdown-timeout", "5", "demo:deepseek-v4"])


@pytest.fixture(scope="module")
def reasoning():
    s = _stack("--reasoning-parser", "deepseek_v4", "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4")
    yield s
    s.terminate()


@pytest.fixture(scope="module")
def plain():
    s = _stack()
    yield s
    s.terminate()


def _client(stack) -> httpx.Client:
    return httpx.Client(base_url=stack.base_url, timeout=30)


def _chat(stack, text: str, **extra) -> dict:
    with _client(stack) as c:
        r = c.post("/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES, "max_tokens": 100,
                                                 "vllm_xargs": {"sim_text": text}, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _events(stack, text: str, **extra) -> list[dict]:
    with _client(stack) as c:
        r = c.post("/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES, "max_tokens": 100,
                                                 "stream": True, "vllm_xargs": {"sim_text": text}, **extra})
    assert r.status_code == 200, r.text
    return [json.loads(line[6:]) for line in r.text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def _n_tokens(stack, text: str) -> int:
    with _client(stack) as c:
        r = c.post("/tokenize", json={"model": MODEL, "prompt": text, "add_special_tokens": False})
    return r.json()["count"]


@pytest.mark.parametrize("include_reasoning", [True, False])
def test_body_counts_reasoning_tokens(reasoning, include_reasoning):
    n = _n_tokens(reasoning, REASONING)
    body = _chat(reasoning, f"{REASONING}</think>{ANSWER}", include_reasoning=include_reasoning)
    message = body["choices"][0]["message"]
    assert message["content"] == ANSWER
    assert message["reasoning"] == (REASONING if include_reasoning else None)
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": n}
    assert 0 < n < body["usage"]["completion_tokens"]


def test_body_sums_the_choices(reasoning):
    n = _n_tokens(reasoning, REASONING)
    body = _chat(reasoning, f"{REASONING}</think>{ANSWER}", n=2, temperature=1.0, seed=1)
    assert len(body["choices"]) == 2
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2 * n}


def test_no_reasoning_counts_zero(reasoning):
    """An answer without reasoning (it ends at once): 0, not null."""
    body = _chat(reasoning, f"</think>{ANSWER}")
    assert body["choices"][0]["message"]["content"] == ANSWER
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


def test_stream_usage_chunk_counts_reasoning_tokens(reasoning):
    n = _n_tokens(reasoning, REASONING)
    events = _events(reasoning, f"{REASONING}</think>{ANSWER}", n=2, temperature=1.0, seed=1,
                     include_reasoning=False, stream_options={"include_usage": True})
    usage = events[-1]
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2 * n}
    assert not any(e["choices"][0]["delta"].get("reasoning") for e in events[:-1])


def test_continuous_usage_counts_per_choice_so_far(reasoning):
    n = _n_tokens(reasoning, REASONING)
    events = _events(reasoning, f"{REASONING}</think>{ANSWER}",
                     stream_options={"include_usage": True, "continuous_usage_stats": True})
    counts = [e["usage"]["completion_tokens_details"]["reasoning_tokens"] for e in events if e["choices"]]
    assert counts[0] == 0  # the role chunk
    assert counts == sorted(counts) and counts[-1] == n
    # every chunk of the reasoning counts all its tokens so far
    for e in events:
        if e["choices"] and e["choices"][0]["delta"].get("reasoning"):
            assert e["usage"]["completion_tokens_details"]["reasoning_tokens"] == e["usage"]["completion_tokens"]
    assert events[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": n}


def test_responses_count_the_same(reasoning):
    n = _n_tokens(reasoning, REASONING)
    with _client(reasoning) as c:
        r = c.post("/v1/responses", json={"model": MODEL, "input": "Weather in Paris?", "max_output_tokens": 100,
                                          "vllm_xargs": {"sim_text": f"{REASONING}</think>{ANSWER}"}})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["output_tokens_details"]["reasoning_tokens"] == n


def test_without_reasoning_parser_details_are_null(plain):
    body = _chat(plain, ANSWER)
    assert body["usage"]["completion_tokens_details"] is None
    events = _events(plain, ANSWER, stream_options={"include_usage": True, "continuous_usage_stats": True})
    assert "completion_tokens_details" not in events[-1]["usage"]  # (vLLM's usage chunk drops nulls)
    running = [e["usage"] for e in events if e["choices"]]
    assert running and all("completion_tokens_details" in u and u["completion_tokens_details"] is None
                           for u in running)
    # text completions carry no such field in their continuous usage
    with _client(plain) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 3, "stream": True,
                                            "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    usages = [json.loads(line[6:])["usage"] for line in r.text.splitlines()
              if line.startswith("data: {")]
    assert usages and all("completion_tokens_details" not in u for u in usages)


CALL_ARGS = {"city": "Paris"}


@pytest.mark.parametrize("choice,text", [
    (NAMED, json.dumps(CALL_ARGS)),
    ("required", json.dumps([{"name": "get_weather", "parameters": CALL_ARGS}])),
], ids=["named", "required"])
def test_forced_tool_choice_content_is_empty_string(plain, choice, text):
    body = _chat(plain, text, tools=TOOLS, tool_choice=choice)
    message = body["choices"][0]["message"]
    assert [json.loads(t["function"]["arguments"]) for t in message["tool_calls"]] == [CALL_ARGS]
    assert message["content"] == ""
    # ("auto" with a call keeps null content, as vLLM's)


def test_forced_tool_choice_after_reasoning(reasoning):
    body = _chat(reasoning, "Think.</think>" + json.dumps(CALL_ARGS), tools=TOOLS, tool_choice=NAMED)
    message = body["choices"][0]["message"]
    assert message["reasoning"] == "Think." and message["tool_calls"]
    assert message["content"] == ""
    assert body["choices"][0]["finish_reason"] == "stop"  # (a named choice finishes with "stop")


def test_auto_tool_call_content_stays_null(reasoning):
    d = "｜DSML｜"
    call = (f"<{d}tool_calls>\n<{d}invoke name=\"get_weather\">\n"
            f"<{d}parameter name=\"city\" string=\"true\">Paris</{d}parameter>\n</{d}invoke>\n</{d}tool_calls>")
    body = _chat(reasoning, "Think.</think>" + call, tools=TOOLS)
    message = body["choices"][0]["message"]
    assert message["tool_calls"] and message["content"] is None
