"""A streamed answer's headers go out with its first events, in one write (not one write for
the headers at `prepare` and another for the role chunk: a send() per request fewer)."""

from __future__ import annotations

import asyncio.selector_events as selector_events
from types import SimpleNamespace

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from vllm_pyfrontend.chat.assistant import AssistantStream
from vllm_pyfrontend.server.formatters import ChatFormatter
from vllm_pyfrontend.server.request_pipeline import Choice, RequestRun
from vllm_pyfrontend.server.responder import respond
from vllm_pyfrontend.server.sse import SSEWriter
from vllm_pyfrontend.text.text_stream import TextStream


class _Detok:
    def feed(self, ids):
        return ""

    def flush(self, emit_incomplete=False):
        return ""


def _state() -> SimpleNamespace:
    return SimpleNamespace(
        system_fingerprint=None, tracer=None, request_started=lambda: None, request_finished=lambda: None,
        config=SimpleNamespace(policy=SimpleNamespace(sse_keep_alive_interval=0)),
    )


async def _answer(request: web.Request) -> web.StreamResponse:
    choices = [Choice(i, TextStream(_Detok(), []), AssistantStream()) for i in range(2)]
    run = RequestRun(response_id="chatcmpl-t", model="m", created=0, choices=choices, num_prompt_tokens=3,
                     stream=True, include_usage=False, continuous_usage=False, formatter=ChatFormatter(str, 0))
    run.sse = SSEWriter("chatcmpl-t", "m", 0)
    run.done.set_result(None)  # nothing to wait for: the role chunks, then [DONE]
    return await respond(_state(), request, run, SimpleNamespace(requests=[]), role_chunks=True)


async def test_headers_and_role_chunks_go_out_in_one_write(monkeypatch):
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
    app = web.Application()
    app.router.add_post("/", _answer)
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        async with session.post(server.make_url("/"), json={}) as r:
            body = await r.read()
    assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
    assert body.count(b'"role":"assistant"') == 2 and body.endswith(b"data: [DONE]\n\n")
    answer = [w for w in writes if not w.startswith(b"POST ")]  # (the client's request)
    assert answer[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer[0].count(b'"role":"assistant"') == 2  # with the headers
    assert answer[-1].endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    assert len(answer) == 2
