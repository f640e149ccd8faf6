"""vLLM serve flags of the answers, the request log and the HTTP parser, end to end on the
simulated engine (one worker each): `--enable-per-request-metrics` (the `metrics` object of chat,
completion and Responses answers), `--enable-log-outputs` / `--enable-log-deltas` (vLLM's "Generated
response" lines in the request log), `--anthropic-disabled-thinking-effort` (the reasoning
effort of /v1/messages with thinking disabled) and `--h11-max-incomplete-event-size` /
`--h11-max-header-count` (the request head's bounds), `--tokens-only` (the token-in/token-out
routes without --enable-scale-out, never detokenizing), `--tokenizer-backend` (the library that
encodes prompts). Each against a server without the flag.
"""

from __future__ import annotations

import json
import re
import socket

import anthropic
import httpx
import openai
import pytest

from vllm_pyfrontend.supervisor.cli import parse_args
from tests.inprocess import InProcessStack

D = "｜DSML｜"
FORGED = "[worker 0] 00:00:00 ERROR forged by a client"
METRIC_FIELDS = {"time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second"}
USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def sim_args(*extra: str) -> list[str]:
    return ["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "4096",
            "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4", "--reasoning-parser", "deepseek_v4",
            "--served-model-name", "dsv4", "--shutdown-timeout", "5", *extra, "demo:deepseek-v4"]


@pytest.fixture(scope="module")
def on():
    s = InProcessStack(sim_args("--enable-per-request-metrics", "--enable-log-requests", "--enable-log-outputs",
                       "--max-log-len", "300", "--anthropic-disabled-thinking-effort", "low",
                       "--h11-max-incomplete-event-size", "3000", "--h11-max-header-count", "24",
                       "--tokens-only", "--tokenizer-backend", "tokenizers"))
    yield s
    s.terminate()


@pytest.fixture(scope="module")
def off():
    s = InProcessStack(sim_args("--enable-log-requests"))
    yield s
    s.terminate()


@pytest.fixture(scope="module")
def no_deltas():
    s = InProcessStack(sim_args("--enable-log-requests", "--enable-log-outputs", "--no-enable-log-deltas"))
    yield s
    s.terminate()


def client(stack: InProcessStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key="x", max_retries=0, timeout=60)


def script(text: str) -> dict:
    return {"vllm_xargs": {"sim_text": text}}


def generated_lines(stack: InProcessStack, request_id: str, count: int) -> list[str]:
    """The request log's "Generated response" lines of one request, once `count` are there
    (and a stream's complete line, its last)."""
    def lines() -> list[str]:
        return [line for line in stack.logs().splitlines() if f"Generated response {request_id}" in line]

    def there() -> bool:
        found = lines()
        deltas = any("(streaming delta)" in line for line in found)
        return len(found) >= count and (not deltas or "(streaming complete)" in found[-1])
    stack.wait_for(there, 30, f"{count} output log line(s) of {request_id}")
    return lines()


def logged_output(line: str) -> tuple[str, str]:
    """(the output as logged, a Python string literal; the finish reason) of one INFO line."""
    m = re.search(r": output: (.*), finish_reason: (\S+)$", line)
    assert m is not None, line
    return m.group(1), m.group(2)


# -- --enable-per-request-metrics ------------------------------------------------------------


def check_timing(metrics: dict, completion_tokens: int) -> None:
    for name in METRIC_FIELDS:
        assert isinstance(metrics[name], float) and metrics[name] >= 0, (name, metrics)
    # vLLM's definitions (build_per_request_timing_metrics), on the engine's clock
    assert metrics["mean_itl_ms"] == pytest.approx(metrics["generation_time_ms"] / (completion_tokens - 1))
    inference_ms = metrics["time_to_first_token_ms"] + metrics["generation_time_ms"]
    assert metrics["tokens_per_second"] == pytest.approx(completion_tokens / inference_ms * 1000, rel=1e-6)
    assert metrics["generation_time_ms"] > 0  # several engine steps of 2 ms


def test_chat_and_completion_bodies_carry_timing_metrics(on):
    c = client(on)
    r = c.chat.completions.create(model="dsv4", messages=USER, max_tokens=6, extra_body=script("a b c d e f g h"))
    body = r.model_dump()
    assert set(body["metrics"]) == METRIC_FIELDS | {"speculative_decoding"}
    assert body["metrics"]["speculative_decoding"] is None
    check_timing(body["metrics"], r.usage.completion_tokens)
    r = c.completions.create(model="dsv4", prompt="hi", max_tokens=5)
    assert r.usage.completion_tokens == 5
    check_timing(r.model_dump()["metrics"], 5)
    # one token: no decode interval, no inter-token latency
    r = c.completions.create(model="dsv4", prompt="hi", max_tokens=1)
    m = r.model_dump()["metrics"]
    assert m["generation_time_ms"] == 0.0 and m["mean_itl_ms"] is None
    # (tokens per second over scheduled -> last output: none when that interval is 0, as the
    # simulated engine stamps a request's scheduling and its first step alike)
    assert (m["tokens_per_second"] is None) == (m["time_to_first_token_ms"] == 0.0)


@pytest.mark.parametrize("queued, scheduled, first, last, tokens", [
    (10.0, 10.5, 10.75, 11.75, 5), (10.0, 10.5, 10.75, 10.75, 1), (0.0, 0.0, 10.75, 11.0, 3),
    (10.0, 10.0, 10.0, 10.0, 1), (10.0, 10.25, 0.0, 0.0, 0)])
def test_the_fields_are_vllms(queued, scheduled, first, last, tokens):
    """The same timestamps give vLLM's own `build_per_request_timing_metrics` object."""
    from vllm.entrypoints.generate.base.serving import build_per_request_timing_metrics
    from vllm.v1.metrics.stats import RequestStateStats

    from vllm_pyfrontend.llm.generation import ENDED, Generation
    from vllm_pyfrontend.metrics import EngineTiming
    from vllm_pyfrontend.serving.per_request_metrics import timing_metrics

    gen = Generation("r", 0, ENDED, None, 3)
    t = gen.timing = EngineTiming()
    t.scheduled_at, t.first_token_at, t.last_token_at = (v or None for v in (scheduled, first, last))
    t.queue_time = scheduled - queued if queued and scheduled else None
    stats = RequestStateStats(queued_ts=queued, scheduled_ts=scheduled, first_token_ts=first, last_token_ts=last)
    assert timing_metrics(gen, tokens) == build_per_request_timing_metrics(stats, tokens).model_dump()


def test_metrics_ride_on_the_streams_usage_chunk(on):
    with httpx.Client(base_url=on.base_url, timeout=60) as h:
        for path, body in (("/v1/chat/completions", {"messages": USER}), ("/v1/completions", {"prompt": "hi"})):
            r = h.post(path, json={"model": "dsv4", "max_tokens": 5, "stream": True,
                                   "stream_options": {"include_usage": True}, **body})
            chunks = [json.loads(line[6:]) for line in r.text.splitlines()
                      if line.startswith("data: {")]
            usage = [ch for ch in chunks if ch.get("usage")]
            assert len(usage) == 1 and usage[0]["choices"] == []
            # vLLM writes the usage chunk without null fields: every known one, nothing else
            assert set(usage[0]["metrics"]) == METRIC_FIELDS, usage[0]
            check_timing(usage[0]["metrics"], usage[0]["usage"]["completion_tokens"])
            assert all("metrics" not in ch for ch in chunks if not ch.get("usage"))
            # no usage chunk asked for: nothing carries them
            r = h.post(path, json={"model": "dsv4", "max_tokens": 5, "stream": True, **body})
            assert '"metrics"' not in r.text and "[DONE]" in r.text
    # through the SDK, as a client reads them
    stream = client(on).chat.completions.create(model="dsv4", messages=USER, max_tokens=4, stream=True,
                                               stream_options={"include_usage": True})
    last = [ch for ch in stream][-1]
    assert last.usage is not None and set(last.model_extra["metrics"]) == METRIC_FIELDS


def test_responses_carry_them_only_with_the_flag(on, off):
    r = client(on).responses.create(model="dsv4", input="hi", max_output_tokens=6,
                                    extra_body=script("x</think>one two three four five six seven"))
    metrics = r.model_extra["metrics"]
    assert set(metrics) == METRIC_FIELDS | {"speculative_decoding"}
    check_timing(metrics, r.usage.output_tokens)
    stream = client(on).responses.create(model="dsv4", input="hi", max_output_tokens=6, stream=True)
    (done,) = [e for e in stream if e.type in ("response.completed", "response.incomplete")]
    check_timing(done.response.model_extra["metrics"], done.response.usage.output_tokens)
    r = client(off).responses.create(model="dsv4", input="hi", max_output_tokens=4)
    assert "metrics" not in (r.model_extra or {})  # vLLM leaves the key out without the flag


def test_metrics_are_null_for_several_choices_or_prompts(on):
    c = client(on)
    r = c.chat.completions.create(model="dsv4", messages=USER, max_tokens=3, n=2)
    assert r.model_dump()["metrics"] is None
    r = c.completions.create(model="dsv4", prompt=["a", "b"], max_tokens=3)
    assert r.model_dump()["metrics"] is None


def test_without_the_flag_metrics_are_null(off):
    c = client(off)
    r = c.chat.completions.create(model="dsv4", messages=USER, max_tokens=4)
    assert "metrics" in r.model_dump() and r.model_dump()["metrics"] is None
    assert c.completions.create(model="dsv4", prompt="hi", max_tokens=4).model_dump()["metrics"] is None
    stream = c.chat.completions.create(model="dsv4", messages=USER, max_tokens=4, stream=True,
                                       stream_options={"include_usage": True})
    last = [ch for ch in stream][-1]
    assert last.usage is not None and "metrics" not in (last.model_extra or {})


# -- --enable-log-outputs, --enable-log-deltas -----------------------------------------------


def test_one_body_answers_are_logged_with_their_finish_reason(on):
    c = client(on)
    text = f"a\n{FORGED}\r\x1b[2K\u2028{FORGED}"
    r = c.chat.completions.create(model="dsv4", messages=USER, max_tokens=200,
                                  extra_body=script("x</think>" + text))
    (line,) = generated_lines(on, r.id, 1)
    output, finish = logged_output(line)
    assert output == repr(r.choices[0].message.content) and finish == r.choices[0].finish_reason
    for raw in ("\n", "\r", "\x1b", "\u2028"):  # nothing a client wrote can start a line of its own
        assert raw not in line
    assert not any(line.startswith(FORGED) for line in on.logs().splitlines())
    # --max-log-len cuts the logged output
    r = c.chat.completions.create(model="dsv4", messages=USER, max_tokens=400,
                                  extra_body=script("x</think>" + "word " * 100))
    (line,) = generated_lines(on, r.id, 1)
    assert logged_output(line)[0] == repr(r.choices[0].message.content[:300])


def test_tool_calls_are_logged_as_calls(on):
    call = (f"<{D}tool_calls>\n<{D}invoke name=\"get_weather\">\n<{D}parameter name=\"city\" string=\"true\">Rome"
            f"</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>")
    r = client(on).chat.completions.create(model="dsv4", messages=USER, max_tokens=200, tools=TOOLS,
                                           extra_body=script("x</think>" + call))
    assert r.choices[0].message.tool_calls
    args = r.choices[0].message.tool_calls[0].function.arguments
    (line,) = generated_lines(on, r.id, 1)
    assert logged_output(line) == (repr(f"[tool_calls: get_weather({args})]"), "tool_calls")


def test_streams_log_each_delta_then_the_whole_text(on):
    stream = client(on).chat.completions.create(model="dsv4", messages=USER, max_tokens=8, stream=True,
                                               extra_body=script("x</think>one two three four five six"))
    chunks = list(stream)
    rid = chunks[0].id
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    lines = generated_lines(on, rid, 3)
    deltas = [line for line in lines if f"{rid} (streaming delta)" in line]
    (complete,) = [line for line in lines if f"{rid} (streaming complete)" in line]
    assert deltas and lines[-1] == complete  # the whole text after the last delta
    logged = [logged_output(line) for line in deltas]
    assert logged[-1][1] == "length" and all(f == "None" for _, f in logged[:-1])
    pieces = [eval(out) for out, _ in logged]  # noqa: S307 (Python string literals, as logged)
    reasoning = "".join(p[len("[reasoning: "):-1] for p in pieces if p.startswith("[reasoning: "))
    assert reasoning == "x" and "".join(p for p in pieces if not p.startswith("[reasoning: ")) == content
    # the complete line: the raw text, reasoning markup included (vLLM logs what it decoded)
    assert logged_output(complete) == (repr("x</think>" + content), "streaming_complete")


def test_completions_and_messages(on):
    r = client(on).completions.create(model="dsv4", prompt="hi", max_tokens=3)
    m = anthropic.Anthropic(base_url=on.base_url, api_key="x", max_retries=0, timeout=30).messages.create(
        model="dsv4", max_tokens=20, messages=USER, extra_body=script("x</think>Hello there."))
    # Messages are logged (vLLM serves them through its chat code), completions are not (vLLM's
    # completion serving has no output log).
    (line,) = generated_lines(on, m.id, 1)
    assert logged_output(line) == (repr("Hello there."), "stop")
    assert f"Generated response {r.id}" not in on.logs()
    with anthropic.Anthropic(base_url=on.base_url, api_key="x", max_retries=0, timeout=30).messages.stream(
            model="dsv4", max_tokens=20, messages=USER, extra_body=script("x</think>Streamed.")) as stream:
        mid = stream.get_final_message().id
    lines = generated_lines(on, mid, 2)
    assert logged_output(lines[-1]) == (repr("x</think>Streamed."), "streaming_complete")
    pieces = [eval(logged_output(line)[0]) for line in lines[:-1]]  # noqa: S307 (string literals)
    assert "".join(p for p in pieces if not p.startswith("[reasoning: ")) == "Streamed."


def test_responses_log_their_final_output(on):
    c = client(on)
    r = c.responses.create(model="dsv4", input="hi", max_output_tokens=50,
                           extra_body=script("x</think>Final words."))
    (line,) = generated_lines(on, r.id, 1)
    assert logged_output(line) == (repr("x</think>Final words."), "stop")  # the raw text, once
    stream = c.responses.create(model="dsv4", input="hi", max_output_tokens=3, stream=True)
    rid = [e for e in stream if e.type == "response.incomplete"][0].response.id
    (line,) = generated_lines(on, rid, 1)
    assert f"{rid} (streaming complete)" in line and logged_output(line)[1] == "length"


def test_no_deltas_logs_the_complete_stream_only(no_deltas):
    stream = client(no_deltas).chat.completions.create(model="dsv4", messages=USER, max_tokens=5, stream=True,
                                                      extra_body=script("x</think>one two three four"))
    rid = [ch for ch in stream][0].id
    (line,) = generated_lines(no_deltas, rid, 1)
    assert f"{rid} (streaming complete)" in line
    assert "(streaming delta)" not in no_deltas.logs()


def test_without_the_flag_no_output_is_logged(off):
    c = client(off)
    r = c.chat.completions.create(model="dsv4", messages=USER, max_tokens=4)
    list(c.chat.completions.create(model="dsv4", messages=USER, max_tokens=4, stream=True))
    off.wait_for(lambda: off.logs().count('"path":"/v1/chat/completions"') >= 2, 30, "the request lines")
    assert "Generated response" not in off.logs() and r.id


def test_flag_checks_at_start(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--engine", "sim", "--enable-log-outputs", "m"])
    assert "--enable-log-outputs requires --enable-log-requests" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--engine", "sim", "--enable-per-request-metrics", "--disable-log-stats", "m"])
    assert "remove --disable-log-stats" in capsys.readouterr().err
    opts = parse_args(["--engine", "sim", "--enable-per-request-metrics", "--enable-log-requests",
                       "--enable-log-outputs", "--no-enable-log-deltas", "--anthropic-disabled-thinking-effort",
                       "max", "--h11-max-header-count", "9", "m"])
    p = opts.policy
    assert (p.enable_per_request_metrics, p.enable_log_outputs, p.enable_log_deltas) == (True, True, False)
    assert (p.anthropic_disabled_thinking_effort, p.h11_max_header_count) == ("max", 9)
    assert opts.engine_args == []  # the frontend's flags, none of the engine's


def test_dropin_takes_the_same_flags():
    from vllm_pyfrontend.config import WorkerPolicy

    p = WorkerPolicy.from_mapping({"enable_per_request_metrics": True, "enable_log_outputs": True,
                                   "enable_log_deltas": False, "anthropic_disabled_thinking_effort": "low",
                                   "h11_max_incomplete_event_size": 1000, "h11_max_header_count": 10})
    assert (p.enable_per_request_metrics, p.enable_log_outputs, p.enable_log_deltas) == (True, True, False)
    assert (p.anthropic_disabled_thinking_effort, p.h11_max_incomplete_event_size, p.h11_max_header_count) == (
        "low", 1000, 10)


# -- --anthropic-disabled-thinking-effort ------------------------------------------------------


def test_disabled_thinking_takes_the_configured_effort(on, off):
    def ask(stack: InProcessStack):
        a = anthropic.Anthropic(base_url=stack.base_url, api_key="x", max_retries=0, timeout=30)
        r = a.messages.create(model="dsv4", max_tokens=50, messages=USER, thinking={"type": "disabled"},
                              extra_body=script("Thought.</think>Answer."))
        return [b.type for b in r.content]
    # The demo model's template renders effort "none" apart from every thinking effort: "auto"
    # probes it (once, logged) and takes "none": thinking off, the whole output is text.
    assert ask(off) == ["text"]
    off.wait_for(lambda: "thinking.type=disabled maps to reasoning_effort='none'" in off.logs(), 30,
                 "the probe's answer")
    # "low": thinking on (vLLM's reasoning_effort turns enable_thinking on), and the reasoning
    # parser finds the thinking.
    assert ask(on) == ["thinking", "text"]
    assert "maps to reasoning_effort" not in on.logs()  # nothing probed


# -- --h11-max-incomplete-event-size, --h11-max-header-count ----------------------------------


def exchange(stack: InProcessStack, *parts: bytes) -> bytes:
    """Send the parts (each its own write), then read the answer until the server closes."""
    with socket.create_connection(("127.0.0.1", stack.port), timeout=10) as s:
        for part in parts:
            s.sendall(part)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk


HEAD = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"


def test_request_heads_past_the_bounds_are_400(on, off):
    # more header lines than --h11-max-header-count (24)
    many = HEAD + b"".join(b"X-H%d: v\r\n" % i for i in range(30)) + b"\r\n"
    answer = exchange(on, many)
    assert answer.startswith(b"HTTP/1.0 400 ") or answer.startswith(b"HTTP/1.1 400 "), answer[:80]
    assert exchange(on, HEAD + b"".join(b"X-H%d: v\r\n" % i for i in range(20)) + b"\r\n").startswith(b"HTTP/1.1 200")
    # a head still incomplete past --h11-max-incomplete-event-size (3000 bytes): uvicorn's answer
    # to h11's error, and the connection closed
    lines = [b"X-Slow-%d: %s\r\n" % (i, b"a" * 400) for i in range(8)]
    answer = exchange(on, HEAD, *lines)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n") and answer.endswith(b"\r\n\r\nInvalid HTTP request received.")
    # the defaults (4 MiB, 256 lines) take what aiohttp's own limits (8190-byte lines, 128
    # headers) refused, as vLLM's server does
    assert exchange(off, HEAD + b"X-Big: " + b"a" * 20000 + b"\r\n\r\n").startswith(b"HTTP/1.1 200")
    assert exchange(off, HEAD + b"".join(b"X-H%d: v\r\n" % i for i in range(200)) + b"\r\n").startswith(b"HTTP/1.1 200")
    assert exchange(off, HEAD, *lines, b"\r\n").startswith(b"HTTP/1.1 200")


def test_tokens_only_serves_the_token_routes_without_text(on, off):
    body = {"model": "dsv4", "token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 4, "temperature": 0},
            "output_mode": "tokens"}
    with httpx.Client(timeout=30) as h:
        assert h.post(off.base_url + "/inference/v1/generate", json=body).status_code == 403
        assert h.post(off.base_url + "/abort_requests", json={"request_ids": ["x"]}).status_code == 404
        r = h.post(on.base_url + "/inference/v1/generate", json=body)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert len(choice["token_ids"]) == 4 and not choice.get("text")
        # Text output and stop strings need the detokenizer that tokens-only mode turns off.
        r = h.post(on.base_url + "/inference/v1/generate", json={**body, "output_mode": "text"})
        assert r.status_code == 400 and "--tokens-only" in r.json()["error"]["message"]
        stop = {**body, "sampling_params": {**body["sampling_params"], "stop": ["x"]}}
        r = h.post(on.base_url + "/inference/v1/generate", json=stop)
        assert r.status_code == 400 and "stop strings are not supported" in r.json()["error"]["message"]
        # vLLM's legacy abort path is served beside /inference/v1/abort_requests.
        assert h.post(on.base_url + "/abort_requests", json={"request_ids": ["x"]}).status_code == 200
        assert h.post(on.base_url + "/v1/completions/render",
                      json={"model": "dsv4", "prompt": "hi"}).status_code == 200


def test_tokenizer_backend_encodes_prompts_with_the_chosen_library(on, off) -> None:
    """`--tokenizer-backend tokenizers` encodes with the tokenizers library (the worker says
    so), the default with fastokens; both count the same prompt tokens for the same messages."""
    on.wait_for(lambda: "tokenizer backend: tokenizers" in on.logs(), 30, "the worker's backend line")
    off.wait_for(lambda: "tokenizer backend: fastokens" in off.logs(), 30, "the worker's backend line")
    for text in ("hi", "Grüße aus Köln, 東京 and 12345 spaces   here\n\tend", "x" * 300 + " ok"):
        counts = [client(s).chat.completions.create(model="dsv4", messages=[{"role": "user", "content": text}],
                                                   max_tokens=1).usage.prompt_tokens for s in (on, off)]
        assert counts[0] == counts[1] > 0, (text, counts)
