"""A streamed answer's headers wait for its first engine output (at most `FIRST_OUTPUT_WAIT_S`)
and go out with the role chunks and that output's events in one write: not one write for the
headers at `prepare`, another for the role chunk and a third for the first token. A one-token
answer is one write in all."""

from __future__ import annotations

import asyncio
import asyncio.selector_events as selector_events
import time
from types import SimpleNamespace

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from vllm_pyfrontend.chat.assistant import AssistantStream
from vllm_pyfrontend.serving.formatters import ChatFormatter
from vllm_pyfrontend.serving.request_pipeline import Choice, RequestRun
from vllm_pyfrontend.serving import responder
from vllm_pyfrontend.serving import sse as sse_mod
from vllm_pyfrontend.serving.responder import respond
from vllm_pyfrontend.serving.sse import SSEWriter
from vllm_pyfrontend.text.text_stream import TextStream


class _Detok:
    def feed(self, ids):
        return ""

    def flush(self, emit_incomplete=False):
        return ""


def _state() -> SimpleNamespace:
    return SimpleNamespace(
        system_fingerprint=None,
        config=SimpleNamespace(policy=SimpleNamespace(sse_keep_alive_interval=0)),
    )


async def _answer(request: web.Request) -> web.StreamResponse:
    choices = [Choice(i, TextStream(_Detok(), []), AssistantStream()) for i in range(2)]
    run = RequestRun(response_id="chatcmpl-t", model="m", created=0, choices=choices, num_prompt_tokens=3,
                     stream=True, include_usage=False, continuous_usage=False, formatter=ChatFormatter(str, 0))
    run.sse = SSEWriter("chatcmpl-t", "m", 0)
    run.done.set_result(None)  # nothing to wait for: the role chunks, then [DONE]
    return await respond(_state(), request, run, role_chunks=True)


def _count_writes(monkeypatch) -> list[bytes]:
    """Every transport write of the test server and client, in order."""
    writes: list[bytes] = []
    cls = selector_events._SelectorSocketTransport
    write, writelines = cls.write, cls.writelines

    def counting_write(self, data):
        writes.append(bytes(data))
        return write(self, data)

    def counting_writelines(self, lines):
        lines = [bytes(x) for x in lines]
        writes.append(b"".join(lines))
        return writelines(self, lines)

    monkeypatch.setattr(cls, "write", counting_write)
    monkeypatch.setattr(cls, "writelines", counting_writelines)
    return writes


async def test_a_run_ended_before_its_headers_is_one_write(monkeypatch):
    writes = _count_writes(monkeypatch)
    app = web.Application()
    app.router.add_post("/", _answer)
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        async with session.post(server.make_url("/"), json={}) as r:
            body = await r.read()
    assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
    assert body.count(b'"role":"assistant"') == 2 and body.endswith(b"data: [DONE]\n\n")
    answer = [w for w in writes if not w.startswith(b"POST ")]  # (the client's request)
    assert len(answer) == 1, answer
    assert answer[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer[0].count(b'"role":"assistant"') == 2  # with the headers
    assert answer[0].endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")


def _one_step_run() -> tuple[RequestRun, sse_mod.StreamDrain, SimpleNamespace]:
    choices = [Choice(0, TextStream(_Detok(), []), AssistantStream())]
    run = RequestRun(response_id="chatcmpl-t", model="m", created=0, choices=choices, num_prompt_tokens=3,
                     stream=True, include_usage=True, continuous_usage=False, formatter=ChatFormatter(str, 0))
    run.sse = SSEWriter("chatcmpl-t", "m", 0)
    run.sse.drain = drain = sse_mod.StreamDrain()
    gen = SimpleNamespace(index=0, num_output_tokens=1, finish_reason="length", stop_early=lambda *a: None)
    choices[0].gen = gen
    return run, drain, gen


async def _respond_while(request: web.Request, first_output: bool) -> web.StreamResponse:
    """One choice answered while its engine steps arrive in drains of the engine's output: with
    `first_output`, a first output (a token with no text of its own, then content written in
    the same drain) while the handler waits; then, once the headers are out, the last step (its
    finish)."""
    run, drain, gen = _one_step_run()

    async def steps() -> None:
        if first_output:
            await asyncio.sleep(0.05)
            drain.begin()
            run.step(run.choices[0]).on_delta(gen, [5], None, None, None)
            run.sse.content_chunk(0, "hello")
            drain.end()
        while not run.ends_with_last_frame:  # (the headers are out, the handler waits)
            await asyncio.sleep(0.001)
        drain.begin()
        run.on_delta(gen, [7], None, "length", None)
        drain.end()

    task = asyncio.ensure_future(steps())
    try:
        return await respond(_state(), request, run, role_chunks=True)
    finally:
        await task


async def _answer_first_output_later(request: web.Request) -> web.StreamResponse:
    return await _respond_while(request, first_output=True)


async def test_the_headers_go_out_with_the_first_output(monkeypatch):
    """Woken by the output, not by the end of the wait (30 s here)."""
    monkeypatch.setattr(responder, "FIRST_OUTPUT_WAIT_S", 30.0)
    writes = _count_writes(monkeypatch)
    app = web.Application()
    app.router.add_post("/", _answer_first_output_later)
    started = time.monotonic()
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        async with session.post(server.make_url("/"), json={}) as r:
            body = await r.read()
    assert time.monotonic() - started < 10
    events = [e for e in body.split(b"\n\n") if e]
    assert len(events) == 5, events  # role, hello, finish, usage, [DONE]
    answer = [w for w in writes if not w.startswith(b"POST ")]
    assert len(answer) == 2, answer
    first, last = answer
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and b'"role":"assistant"' in first
    assert first.index(b'"role":"assistant"') < first.index(b'"content":"hello"')
    assert b'"finish_reason":"length"' in last and last.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")


async def _answer_one_step(request: web.Request) -> web.StreamResponse:
    """No output before the headers (they go out when the wait for one ends), then the last."""
    return await _respond_while(request, first_output=False)


async def test_the_last_step_goes_out_with_the_end_of_the_body(monkeypatch):
    """The drain that ends a stream leaves its events (the finish chunk, the usage) to the
    handler, which writes them with [DONE] and the chunked terminator: one send() per request
    fewer. Before it, with no output in `FIRST_OUTPUT_WAIT_S`, the headers and the role chunk went
    out alone."""
    monkeypatch.setattr(responder, "FIRST_OUTPUT_WAIT_S", 0.05)
    writes = _count_writes(monkeypatch)
    app = web.Application()
    app.router.add_post("/", _answer_one_step)
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        async with session.post(server.make_url("/"), json={}) as r:
            body = await r.read()
    events = [e for e in body.split(b"\n\n") if e]
    assert len(events) == 4, events  # role, finish, usage, [DONE]
    assert b'"finish_reason":"length"' in events[1] and b'"usage":' in events[2]
    answer = [w for w in writes if not w.startswith(b"POST ")]
    assert len(answer) == 2, answer
    assert answer[0].startswith(b"HTTP/1.1 200 OK\r\n") and answer[0].endswith(b'"prompt_text":null}\n\n\r\n')
    last = answer[1]
    assert b'"finish_reason":"length"' in last and b'"usage":' in last
    assert last.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
