"""Connection hygiene and TLS for a worker's HTTP server.

aiohttp closes a connection that stays idle for `keepalive_timeout` (`--http-timeout-keep-alive`)
but has no bound on how long a request head may take to arrive, and no cap on open connections.
`GuardedRequestHandler` adds both at the protocol level; nothing here runs per token:

- header-read timeout (`--http-header-timeout`): a connection must send a complete request head
  within N seconds of its start, and each later keep-alive request within N seconds of its first
  byte. Once the first bytes of a head arrive, aiohttp's idle timer gives way to this one (so a
  generous header timeout is not cut short by a short keep-alive timeout), and aiohttp re-arms
  its idle timer after the response. A timed-out connection is closed.
- connection cap (`--max-connections-per-worker`): past it, a new connection is answered with a
  503 in the OpenAI error shape and closed; refusals are logged at most every 10 seconds.
- request head size (`--h11-max-incomplete-event-size`, vLLM's flag for its h11 parser): a
  head still incomplete after that many bytes is answered as uvicorn answers h11's error, 400
  "Invalid HTTP request received.", and the connection closed. (aiohttp's own per-line limits
  are raised to the same size, and its header count limit, a 400 too, is
  `--h11-max-header-count`: server/worker.py.)

This leans on three aiohttp internals (`Server._kwargs`, `RequestHandler._waiter` and
`_keepalive_handle`); tests/ops/test_connection_hygiene.py exercises each of them.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import time
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from vllm_pyfrontend.errors import APIError

log = logging.getLogger(__name__)

REFUSAL_LOG_INTERVAL_S = 10.0
REFUSED_LINGER_S = 2.0  # how long a refused connection may take to read its 503 and leave


class ConnectionGuard:
    """The limits and counters one worker's connections share."""

    def __init__(self, header_timeout: float = 0.0, max_connections: int = 0, max_head_bytes: int = 0):
        self.header_timeout = header_timeout
        self.max_connections = max_connections
        self.max_head_bytes = max_head_bytes  # 0: no bound on an incomplete head
        self.open = 0
        self.refused = 0  # since the last log line
        self.refused_total = 0
        self._last_log = 0.0
        body = APIError(503, "Too many open connections to this server; retry later.").to_bytes()
        self.refusal = (
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%b" % (len(body), body)
        )

    def admit(self) -> bool:
        if not self.max_connections or self.open < self.max_connections:
            self.open += 1
            return True
        self.refused += 1
        self.refused_total += 1
        now = time.monotonic()
        if now - self._last_log >= REFUSAL_LOG_INTERVAL_S:
            log.warning("refused %d connection(s) since the last report: %d open, the cap "
                        "(--max-connections-per-worker)", self.refused, self.open)
            self.refused = 0
            self._last_log = now
        return False


# uvicorn's answer to a request h11 cannot parse (its `send_400_response`), as bytes.
HEAD_TOO_LARGE = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                  b"Content-Length: 30\r\nConnection: close\r\n\r\nInvalid HTTP request received.")


class GuardedRequestHandler(RequestHandler):
    __slots__ = ("_guard", "_head_timer", "_refused", "_head_bytes")

    def __init__(self, guard: ConnectionGuard, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._guard = guard
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused: asyncio.Transport | None = None
        self._head_bytes = 0  # bytes of the head that is arriving, so far

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        guard = self._guard
        if not guard.admit():
            self._refuse(transport)  # type: ignore[arg-type]
            return
        super().connection_made(transport)
        if guard.header_timeout > 0:
            self._head_timer = self._loop.call_later(guard.header_timeout, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
        if self._refused is not None:  # answered 503 already: what it sends is discarded
            return
        waiter = self._waiter
        # A new connection's bytes can arrive before aiohttp's handler task has run and begun
        # to wait for a head (no waiter yet, no request so far): that is waiting for a head too.
        fresh = waiter is None and self._request_count == 0
        if not fresh and (waiter is None or waiter.done()):  # a request (its body) is being handled
            super().data_received(data)
            return
        # Waiting for a request head: its bytes are arriving.
        idle = self._keepalive_handle
        if idle is not None:  # not idle any more: the header timeout applies from here
            idle.cancel()
            self._keepalive_handle = None
        timeout = self._guard.header_timeout
        if self._head_timer is None and timeout > 0:
            self._head_timer = self._loop.call_later(timeout, self._head_timed_out)
        heads = self._request_count
        super().data_received(data)
        if self._request_count > heads:  # the head is complete
            self._head_bytes = 0
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            return
        limit = self._guard.max_head_bytes
        if limit:
            self._head_bytes += len(data)
            if self._head_bytes > limit and self.transport is not None:
                self.transport.write(HEAD_TOO_LARGE)
                self.force_close()  # (the transport sends what it holds before it closes)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._refused is not None:
            self._refused = None
            return
        self._guard.open -= 1
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        waiter = self._waiter
        if waiter is not None and not waiter.done():  # still no complete head
            self.force_close()

    def _refuse(self, transport: asyncio.Transport) -> None:
        """Answer 503 at once, discard what the client sends (closing with unread data would
        reset the connection before the client reads the answer) and close once it leaves."""
        self._refused = transport
        transport.write(self._guard.refusal)
        self._loop.call_later(REFUSED_LINGER_S, transport.close)
        if transport.can_write_eof():
            transport.write_eof()


class GuardedSite(web.SockSite):
    """`web.SockSite` whose connections are `GuardedRequestHandler`s."""

    __slots__ = ("_guard", "_shared")

    def __init__(self, runner: web.BaseRunner, sock: Any, guard: ConnectionGuard, *, shared: bool = False,
                 **kwargs: Any):
        super().__init__(runner, sock, **kwargs)
        self._guard = guard
        self._shared = shared  # the socket's queue is every worker's (see Acceptor.SHARED_BATCH)

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        kwargs = server._kwargs  # the runner's handler settings (keepalive_timeout, ...)

        def protocol() -> GuardedRequestHandler:
            return GuardedRequestHandler(self._guard, server, loop=loop, **kwargs)

        self._sock.listen(self._backlog)
        self._server = Acceptor(loop, self._sock, protocol, self._ssl_context,  # type: ignore[assignment]
                                shared=self._shared)


class Acceptor:
    """Serves a listening socket: each time it is readable, every pending connection is taken.

    uvloop's own server (`loop.create_server`) takes one connection per event-loop iteration. A
    worker that is streaming runs iterations of 10 ms or more (an output drain is one), so a
    burst of 1000 connections whose TCP handshakes had all completed waited in the listen queue
    for ~10 s, and their time to first token with them. Here the whole queue is taken at once,
    in arrival order, and each connection gets its protocol (and TLS handshake) as on
    `create_server`. Stands in for the `asyncio.Server` that aiohttp's site keeps (`close`,
    `wait_closed`, `sockets`, `is_serving`)."""

    BATCH = 1024  # connections taken per readiness; a longer queue is taken on the next pass
    # A listening socket that all workers share (a Unix socket, or the one vLLM's launcher hands
    # over) has one queue: taking it whole would give a burst to whichever worker woke first,
    # so a worker takes this many per pass and the others take theirs meanwhile.
    SHARED_BATCH = 16
    PAUSE_S = 1.0  # out of file descriptors (or memory): stop accepting this long, as asyncio does

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: Any, protocol_factory: Any,
                 ssl_context: ssl.SSLContext | None, *, shared: bool = False):
        self._batch = self.SHARED_BATCH if shared else self.BATCH
        self._loop = loop
        self._sock = sock
        self._factory = protocol_factory
        self._ssl = ssl_context
        self._tcp = sock.family in (socket.AF_INET, socket.AF_INET6)
        self._serving = True
        self._paused: asyncio.TimerHandle | None = None
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._accept_all)

    @property
    def sockets(self) -> tuple[Any, ...]:
        return (self._sock,) if self._serving else ()

    def is_serving(self) -> bool:
        return self._serving

    def close(self) -> None:
        if not self._serving:
            return
        self._serving = False
        if self._paused is not None:
            self._paused.cancel()
            self._paused = None
        else:
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()

    async def wait_closed(self) -> None:
        return None

    def _accept_all(self) -> None:
        sock = self._sock
        for _ in range(self._batch):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # the client left while queued
                continue
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("cannot accept connections (%s): paused for %.0f s", e, self.PAUSE_S)
                    self._loop.remove_reader(sock.fileno())
                    self._paused = self._loop.call_later(self.PAUSE_S, self._resume)
                else:
                    log.error("accept failed: %s", e)
                return
            conn.setblocking(False)
            if self._tcp:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._loop.create_task(self._connect(conn))

    def _resume(self) -> None:
        self._paused = None
        if self._serving:
            self._loop.add_reader(self._sock.fileno(), self._accept_all)

    async def _connect(self, conn: Any) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, sock=conn, ssl=self._ssl)
        except Exception as e:  # a TLS handshake that failed, a client that reset at once
            log.debug("connection dropped before it started: %s", e)
            conn.close()
