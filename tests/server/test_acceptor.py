"""The worker's listening socket is served by `Acceptor`: every pending connection is taken
each time the socket is readable, also while the event loop is busy. uvloop's own server takes
one per loop iteration, so a burst of connections waited for as many iterations of a worker
that streams (10 ms and more each): seconds of time to first token (bench/README.md)."""

from __future__ import annotations

import asyncio
import socket
import time

import uvloop

from vllm_pyfrontend.server.connections import Acceptor

BURST = 300


def _burst_iterations(serve) -> list[int]:
    """Open BURST connections (the kernel completes their handshakes) before a loop whose every
    iteration takes 5 ms serves the socket with `serve(loop, sock, factory)`; returns the loop
    iteration in which each connection was made."""

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        made: list[int] = []
        iteration = [0]

        class Protocol(asyncio.Protocol):
            def connection_made(self, transport) -> None:
                made.append(iteration[0])

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(4096)
        server = await serve(loop, sock, Protocol)
        clients = [socket.create_connection(sock.getsockname()) for _ in range(BURST)]

        def busy() -> None:  # one loop iteration of a worker that streams
            iteration[0] += 1
            t = time.monotonic()
            while time.monotonic() - t < 0.005:
                pass
            if len(made) < BURST:
                loop.call_soon(busy)

        loop.call_soon(busy)
        deadline = time.monotonic() + 60
        while len(made) < BURST and time.monotonic() < deadline:
            await asyncio.sleep(0)
        server.close()
        for c in clients:
            c.close()
        return made

    return uvloop.run(main())


def test_every_pending_connection_is_taken_at_once():
    async def serve(loop, sock, factory):
        return Acceptor(loop, sock, factory, None)

    made = _burst_iterations(serve)
    assert len(made) == BURST
    assert max(made) - min(made) <= 2, (min(made), max(made))


def test_uvloops_server_takes_one_connection_per_iteration():
    """Why Acceptor exists; should uvloop change, this fails and Acceptor can go."""

    async def serve(loop, sock, factory):
        return await loop.create_server(factory, sock=sock, backlog=4096)

    made = _burst_iterations(serve)
    assert len(made) == BURST
    assert max(made) - min(made) >= BURST // 2, (min(made), max(made))


def test_a_closed_acceptor_refuses_and_frees_the_port():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        addr = sock.getsockname()
        acceptor = Acceptor(loop, sock, asyncio.Protocol, None)
        assert acceptor.is_serving() and acceptor.sockets == (sock,)
        acceptor.close()
        await acceptor.wait_closed()
        assert not acceptor.is_serving() and acceptor.sockets == ()
        try:
            socket.create_connection(addr, timeout=2).close()
        except ConnectionRefusedError:
            return
        raise AssertionError("a closed acceptor still takes connections")

    uvloop.run(main())


def test_a_shared_socket_is_taken_a_few_at_a_time():
    """A listening socket every worker shares: each pass takes SHARED_BATCH connections, so the
    other workers get their share of a burst."""

    async def serve(loop, sock, factory):
        return Acceptor(loop, sock, factory, None, shared=True)

    made = _burst_iterations(serve)
    assert len(made) == BURST
    passes = -(-BURST // Acceptor.SHARED_BATCH)
    assert passes - 2 <= max(made) - min(made) <= passes + 2, (min(made), max(made))
