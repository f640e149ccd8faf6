"""vLLM's stream interval, end to end on the simulated engine (one worker): `--stream-interval N`
(an engine flag whose effect is the frontend's) and a request's own `stream_interval` (which can
raise the server's, not lower it). A streamed choice's first step goes out at once, each later
chunk waits until N tokens have gathered since the last one that went out, and the last step
takes whatever waits; text, token ids, logprobs, stop strings and tool calls come out the same as
without the interval, only in fewer chunks.

A busy worker may merge steps further (one write per stream per drain of the engine's output),
so a running chunk is checked for at least N tokens, not exactly N.
"""

from __future__ import annotations

import json

import httpx
import pytest

from vllm_pyfrontend.supervisor.cli import parse_args
from tests.inprocess import InProcessStack

D = "｜DSML｜"
USER = [{"role": "user", "content": "hi"}]
WORDS = " ".join(f"w{i}" for i in range(40))
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
TOOL_SCRIPT = (f"<{D}tool_calls>\n<{D}invoke name=\"get_weather\">\n"
               f"<{D}parameter name=\"city\" string=\"true\">Paris</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>")


def sim_args(*extra: str) -> list[str]:
    return ["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "4096",
            "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4",
            "--served-model-name", "dsv4", "--shutdown-timeout", "5", *extra, "demo:deepseek-v4"]


@pytest.fixture(scope="module")
def every3():
    s = InProcessStack(sim_args("--stream-interval", "3"))
    yield s
    s.terminate()


@pytest.fixture(scope="module")
def plain():
    s = InProcessStack(sim_args())
    yield s
    s.terminate()


def events(stack: InProcessStack, route: str, body: dict) -> list[dict]:
    body = {"model": "dsv4", "stream": True, **body}
    r = httpx.post(stack.base_url + route, json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.text.rstrip().endswith("data: [DONE]")
    return [json.loads(line[6:]) for line in r.text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def chat(stack: InProcessStack, **body) -> list[dict]:
    return events(stack, "/v1/chat/completions", {"messages": USER, "return_token_ids": True, **body})


def token_chunks(evs: list[dict]) -> list[tuple[list[int], str, str | None]]:
    """(token ids, text, finish reason) of each chunk of choice 0 that carries tokens or a finish."""
    out = []
    for ev in evs:
        for c in ev.get("choices") or []:
            ids = c.get("token_ids") or []
            text = (c.get("delta") or {}).get("content") if "delta" in c else c.get("text")
            if ids or c.get("finish_reason"):
                out.append((ids, text or "", c.get("finish_reason")))
    return out


def check_interval(chunks: list[tuple[list[int], str, str | None]], interval: int, total: int) -> None:
    """The first chunk carries the first step, every other running chunk at least `interval`
    tokens, the last one the rest; no token is lost or repeated."""
    sizes = [len(ids) for ids, _, _ in chunks]
    assert sum(sizes) == total, sizes
    assert sizes[0] >= 1
    assert chunks[-1][2] is not None, chunks[-1]
    for size in sizes[1:-1]:
        assert size >= interval, sizes
    assert len(chunks) <= 2 + (total - 1) // interval, sizes


def test_server_interval_waits_for_n_tokens(every3, plain):
    body = {"max_tokens": 16, "ignore_eos": True, "vllm_xargs": {"sim_text": WORDS}}
    got = token_chunks(chat(every3, **body))
    check_interval(got, 3, 16)
    want = token_chunks(chat(plain, **body))
    assert len(want) > len(got)  # one chunk per step without the interval
    assert [t for ids, _, _ in got for t in ids] == [t for ids, _, _ in want for t in ids]
    assert "".join(t for _, t, _ in got) == "".join(t for _, t, _ in want)
    assert got[-1][2] == want[-1][2] == "length"


def test_request_interval_raises_the_servers_never_lowers_it(every3, plain):
    body = {"max_tokens": 16, "ignore_eos": True, "vllm_xargs": {"sim_text": WORDS}}
    check_interval(token_chunks(chat(every3, stream_interval=1, **body)), 3, 16)
    check_interval(token_chunks(chat(every3, stream_interval=5, **body)), 5, 16)
    check_interval(token_chunks(chat(plain, stream_interval=4, **body)), 4, 16)
    # completions take it too
    evs = events(plain, "/v1/completions", {"prompt": "hi", "stream_interval": 4, "return_token_ids": True, **body})
    check_interval(token_chunks(evs), 4, 16)


def test_stop_string_inside_waiting_steps(every3, plain):
    """The stop string completes in a step that waits: the request ends there, with the text
    before it and the waiting steps' text, as without the interval."""
    body = {"max_tokens": 40, "stop": ["w9 "], "vllm_xargs": {"sim_text": WORDS},
            "stream_options": {"include_usage": True}}
    got, want = chat(every3, **body), chat(plain, **body)
    text = "".join(t for _, t, _ in token_chunks(got))
    assert text == "".join(t for _, t, _ in token_chunks(want)) == "w0 w1 w2 w3 w4 w5 w6 w7 w8 "
    assert token_chunks(got)[-1][2] == "stop"
    assert got[-1]["usage"] == want[-1]["usage"]


def test_logprobs_and_continuous_usage_follow_the_chunks(every3):
    evs = chat(every3, max_tokens=11, ignore_eos=True, logprobs=True, top_logprobs=2,
               vllm_xargs={"sim_text": WORDS}, stream_options={"include_usage": True, "continuous_usage_stats": True})
    sent = 0
    for ev in evs:
        for c in ev.get("choices") or []:
            ids = c.get("token_ids") or []
            rows = (c.get("logprobs") or {}).get("content") or []
            assert len(rows) == len(ids), c
            sent += len(ids)
            if ids:
                assert ev["usage"]["completion_tokens"] == sent
    assert sent == 11
    check_interval(token_chunks(evs), 3, 11)


def test_tool_call_same_under_interval(every3, plain):
    body = {"max_tokens": 100, "tools": TOOLS, "vllm_xargs": {"sim_text": TOOL_SCRIPT}}

    def call(evs: list[dict]) -> tuple[str, str, str | None]:
        name = args = ""
        finish = None
        for ev in evs:
            for c in ev.get("choices") or []:
                for tc in (c.get("delta") or {}).get("tool_calls") or []:
                    name += tc["function"].get("name") or ""
                    args += tc["function"].get("arguments") or ""
                finish = c.get("finish_reason") or finish
        return name, args, finish

    got = call(chat(every3, **body))
    assert got == call(chat(plain, **body))
    assert got[0] == "get_weather" and json.loads(got[1]) == {"city": "Paris"} and got[2] == "tool_calls"


def test_non_streaming_answer_unchanged(every3, plain):
    body = {"model": "dsv4", "messages": USER, "max_tokens": 9, "ignore_eos": True, "vllm_xargs": {"sim_text": WORDS}}
    a = httpx.post(every3.base_url + "/v1/chat/completions", json=body, timeout=60).json()
    b = httpx.post(plain.base_url + "/v1/chat/completions", json=body, timeout=60).json()
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert a["usage"] == b["usage"]


@pytest.mark.parametrize("value", ["0", "-2", "x"])
def test_supervisor_refuses_a_bad_interval(value, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--engine", "sim", "--stream-interval", value, "demo:deepseek-v4"])
    assert "--stream-interval must be an integer >= 1" in capsys.readouterr().err
