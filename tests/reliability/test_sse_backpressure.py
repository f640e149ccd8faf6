"""SSEWriter under a slow client: hot path while the transport keeps up, events coalesced into
one chunk while it lags, the connection aborted (and `alive` false) past the hard limit."""

from __future__ import annotations

import asyncio

import pytest

from vllm_pyfrontend.serving import sse
from vllm_pyfrontend.serving.sse import DONE, SSEWriter


class FakeTransport:
    """A transport whose write buffer only drains when the test says so."""

    def __init__(self) -> None:
        self.buffered = 0
        self.writes: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.buffered += len(data)

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True

    def drain(self) -> None:
        self.buffered = 0


def payloads(writes: list[bytes]) -> bytes:
    """Chunked framing removed: the SSE bytes the client reads, in order."""
    out = b""
    for w in writes:
        size, rest = w.split(b"\r\n", 1)
        assert len(rest) == int(size, 16) + 2 and rest.endswith(b"\r\n")
        out += rest[:-2]
    return out


@pytest.fixture
def limits(monkeypatch):
    """Small backpressure bounds for the writers made in the test (read when one is made)."""
    monkeypatch.setenv("VLLM_PYFRONTEND_SSE_SOFT_LIMIT", "1000")
    monkeypatch.setenv("VLLM_PYFRONTEND_SSE_HARD_LIMIT", "5000")


def event(i: int) -> bytes:
    return b"data: {\"n\":%d,\"pad\":\"%b\"}\n\n" % (i, b"x" * 80)


async def test_coalesced_while_behind_then_flushed(limits):
    t = FakeTransport()
    w = SSEWriter("chatcmpl-1", "m", 0)
    w.attach(t, event(0))
    for i in range(1, 12):  # ~100 bytes each: over the soft limit after ~10
        w.write(event(i))
    direct = len(t.writes)
    assert w.held is not None and direct < 12
    for i in range(12, 20):
        w.write(event(i))
    assert len(t.writes) == direct  # held, not written
    t.drain()
    await asyncio.sleep(sse._RETRY_S * 3)  # the retry timer flushes once the client caught up
    assert w.held is None and len(t.writes) == direct + 1  # one chunk for all the held events
    assert w.last_frame() == DONE  # nothing held any more
    assert payloads(t.writes) == b"".join(event(i) for i in range(20))
    assert w.alive and not t.aborted


async def test_last_frame_carries_what_is_held(limits):
    """The end of the stream takes the held events with [DONE] (the handler passes it to
    write_eof, which adds the chunked terminator in the same write), even when behind."""
    t = FakeTransport()
    w = SSEWriter("chatcmpl-1", "m", 0)
    w.attach(t, event(0))
    t.buffered = 2000  # over soft, under hard
    w.write(event(1))
    assert w.held is not None
    assert w.last_frame() == event(1) + DONE
    assert w.held is None and w._retry is None
    assert payloads(t.writes) == event(0)


async def test_aborted_past_the_hard_limit(limits):
    t = FakeTransport()
    w = SSEWriter("chatcmpl-1", "m", 0)
    w.attach(t, event(0))
    t.buffered = 4950
    w.write(event(1))
    assert t.aborted and not w.alive and w.held is None
    n = len(t.writes)
    w.write(event(2))  # after the abort: dropped, still not alive
    assert len(t.writes) == n and not w.alive


async def test_one_write_per_stream_per_drain(limits):
    """Inside an engine-output drain a stream's events are gathered and written once at its end
    (several engine steps queued -> one send); outside a drain they go out at once."""
    t1, t2 = FakeTransport(), FakeTransport()
    w1, w2 = SSEWriter("chatcmpl-1", "m", 0), SSEWriter("chatcmpl-2", "m", 0)
    w1.drain = w2.drain = drain = sse.StreamDrain()
    w1.attach(t1, event(0))
    w2.attach(t2, event(0))
    assert len(t1.writes) == len(t2.writes) == 1
    drain.begin()
    try:
        for i in (1, 2, 3):  # three engine steps in one drain
            w1.write(event(i))
            w2.write(event(i))
        assert len(t1.writes) == len(t2.writes) == 1  # nothing written yet
    finally:
        drain.end()
    assert len(t1.writes) == len(t2.writes) == 2  # one write each for the three events
    assert payloads(t1.writes) == payloads(t2.writes) == b"".join(event(i) for i in range(4))
    w1.write(event(4))  # outside a drain: written at once
    assert payloads(t1.writes).endswith(event(4)) and len(t1.writes) == 3


async def test_last_frame_takes_an_unflushed_drain(limits):
    t = FakeTransport()
    w = SSEWriter("chatcmpl-1", "m", 0)
    w.drain = drain = sse.StreamDrain()
    w.attach(t, event(0))
    drain.begin()
    try:
        w.write(event(1))
        assert w.last_frame() == event(1) + DONE
    finally:
        drain.end()
    assert payloads(t.writes) == event(0)  # not written twice
