"""This server's own aiohttp handler chain as an ASGI app (what `call_next` of an ASGI
middleware runs: frontend/server/asgi_middleware.py).

The handler runs on a copy of the aiohttp request whose method, URL and headers are the ASGI
scope's as the middleware left them, whose body is what the ASGI `receive` gives (a body the
middleware read or rewrote included), and whose connection is a `CapturedConnection`: whatever
the handler writes there, through aiohttp's response writer or straight to `request.transport`
(the SSE writers do), is the HTTP/1.1 response as it would go on the wire; it is read back
(status line, headers, body without its chunked framing) and sent as ASGI messages as it comes,
so a stream stays a stream. `get_write_buffer_size` is what the ASGI side has not taken yet,
which keeps the SSE writers' backpressure working through the middleware.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http_writer import StreamWriter
from aiohttp.streams import StreamReader
from multidict import CIMultiDict
from yarl import URL

from vllm_pyfrontend.server.http_response_reader import ResponseReader

Message = dict[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The scope key under which an ASGI request carries (its aiohttp request, the handler chain
# past the middleware, the headers as the scope was built with them): see asgi_bridge.py.
AIOHTTP_REQUEST = "vllm_pyfrontend.aiohttp"
_HIGH_WATER = 1 << 16  # bytes not yet taken by the ASGI side past which writers wait (drain)
_BODY_LIMIT = 1 << 16  # request body bytes buffered for the handler before `receive` waits


async def handler_app(scope: dict, receive: Receive, send: Send) -> None:
    """The ASGI app at the bottom of a middleware stack: the aiohttp handler chain the scope
    carries, run on the request as the scope and `receive` now describe it."""
    request, handler, _ = scope[AIOHTTP_REQUEST]
    loop = asyncio.get_running_loop()
    conn = CapturedConnection(loop, send, request.protocol, no_body=scope["method"] == "HEAD")
    body = StreamReader(conn, _BODY_LIMIT, loop=loop)
    feeding = loop.create_task(_feed_body(receive, body, conn))
    inner = _request_as_scoped(request, scope, conn, body)
    try:
        try:
            response = await handler(inner)
        except web.HTTPException as e:  # (a redirect: the error middleware answers the others)
            response = e
        await response.prepare(inner)
        await response.write_eof()
    except BaseException:
        conn.cancel()
        raise
    finally:
        feeding.cancel()
    await conn.finish()


def _request_as_scoped(request: web.Request, scope: dict, conn: "CapturedConnection",
                       body: StreamReader) -> web.Request:
    """A copy of `request` with the scope's method, URL and headers, reading `body` and
    writing to `conn`; it shares the original's per-request mapping (request ids, tenant,
    the request scope), which the middleware outside reads afterwards."""
    changes: dict[str, Any] = {}
    if scope["method"] != request.method:
        changes["method"] = scope["method"]
    query = scope["query_string"].decode("latin-1")
    if scope["path"] != request.path or query != request.query_string:
        changes["rel_url"] = URL.build(path=scope["path"], query_string=query)
    if scope["headers"] != scope[AIOHTTP_REQUEST][2]:
        changes["headers"] = CIMultiDict((k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"])
    inner = request.clone(**changes)
    # (aiohttp's own attributes of a request: where its body comes from and its response goes)
    inner._payload = body
    inner._protocol = conn
    inner._payload_writer = StreamWriter(conn, conn._loop)
    inner._state = request._state
    return inner


async def _feed_body(receive: Receive, body: StreamReader, conn: "CapturedConnection") -> None:
    """The ASGI request body into the handler's body stream, as the handler reads it."""
    try:
        while True:
            await conn.body_room.wait()
            message = await receive()
            if message["type"] != "http.request":  # http.disconnect
                body.set_exception(ConnectionResetError("the client disconnected"))
                return
            if message.get("body"):
                body.feed_data(message["body"])
            if not message.get("more_body", False):
                break
    except asyncio.CancelledError:  # the handler is done
        pass
    except Exception as e:  # noqa: BLE001 - the handler's read fails with it
        body.set_exception(e)
        return
    body.feed_eof()


class CapturedConnection(BaseProtocol):
    """The protocol and transport of the handler's copy of the request: what the handler
    writes, read back as an HTTP/1.1 response and sent as ASGI messages by one task."""

    def __init__(self, loop: asyncio.AbstractEventLoop, send: Send, real_protocol, *, no_body: bool):
        super().__init__(loop)
        self.transport = self  # (aiohttp writes to `protocol.transport`)
        self.body_room = asyncio.Event()
        self.body_room.set()
        self._send = send
        self._real_protocol = real_protocol
        self._real = real_protocol.transport if real_protocol is not None else None
        self._pending = bytearray()
        self._taking = 0  # bytes handed to the ASGI side and not yet taken
        self._wake = asyncio.Event()
        self._closing = False
        self._ended = False
        self._reader = ResponseReader(no_body)
        self._task = loop.create_task(self._forward())

    def __getattr__(self, name: str):
        """The real connection's other settings (the request parser's limits, which aiohttp's
        multipart reader takes from `request.protocol`)."""
        if name.startswith("__") or name == "_real_protocol":
            raise AttributeError(name)
        return getattr(self._real_protocol, name)

    # -- the transport side (asyncio.Transport's methods the handlers use)
    def write(self, data) -> None:
        if self._closing:
            return
        self._pending += data
        self._wake.set()
        if len(self._pending) > _HIGH_WATER and not self._paused:
            self.pause_writing()

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def is_closing(self) -> bool:
        return self._closing

    def get_write_buffer_size(self) -> int:
        return len(self._pending) + self._taking

    def get_extra_info(self, name: str, default=None):
        if name == "socket" or self._real is None:  # (no sendfile to a captured connection)
            return default
        return self._real.get_extra_info(name, default)

    def close(self) -> None:
        self._closing = True
        self._wake.set()

    def abort(self) -> None:
        """The handler gives up on the connection (a client too slow for an SSE stream): the
        real connection goes too (and with it the request, which aiohttp cancels)."""
        self._closing = True
        self._wake.set()
        if self._real is not None and not self._real.is_closing():
            self._real.abort()

    def cancel(self) -> None:
        """The handler failed: nothing more goes to the ASGI side."""
        self._closing = True
        self._task.cancel()

    # -- the protocol side: the request body's flow control (aiohttp's StreamReader calls these)
    def pause_reading(self, *_args, **_kwargs) -> None:
        self.body_room.clear()

    def resume_reading(self, *_args, **_kwargs) -> None:
        self.body_room.set()

    async def finish(self) -> None:
        """The handler is done: what it wrote goes out, then the end of the body."""
        self._ended = True
        self._wake.set()
        await self._task

    async def _forward(self) -> None:
        reader = self._reader
        try:
            while not self._closing:
                await self._wake.wait()
                self._wake.clear()
                data, self._pending = self._pending, bytearray()
                self._taking = len(data)
                start, body = reader.feed(bytes(data)) if data else (None, b"")
                if start is not None:
                    await self._send(start)
                if body and reader.started:
                    await self._send({"type": "http.response.body", "body": body, "more_body": True})
                self._taking = 0
                if self._paused and len(self._pending) <= _HIGH_WATER // 2:
                    self.resume_writing()
                if self._ended and not self._pending:
                    if not reader.started:
                        raise RuntimeError("the handler wrote no complete response head")
                    await self._send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
        finally:
            self._closing = True  # (writes from here on are dropped; drains wake up)
            if self._paused:
                self.resume_writing()
