"""SSEWriter.write_content (the per-token hot path) writes the bytes of content_chunk_bytes,
inside a drain (gathered into one write per stream) and outside one."""

from __future__ import annotations

from vllm_pyfrontend.server import sse


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data) -> None:
        self.writes.append(bytes(data))


def _framed(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def test_write_content_matches_content_chunk_bytes():
    w = sse.SSEWriter("chatcmpl-1", "m", 7)
    t = _Transport()
    w.attach(t, b"")
    for index in (0, 3):
        texts = ["plain", 'quote " and \\ slash', "é ✓ 𝄞", "\n"]
        before = len(t.writes)
        sse.begin_drain()
        for text in texts:
            w.write_content(index, text)
        assert len(t.writes) == before  # held until the drain ends
        sse.end_drain()
        assert t.writes[-1] == _framed(b"".join(w.content_chunk_bytes(index, x) for x in texts))
        w.write_content(index, "alone")
        assert t.writes[-1] == _framed(w.content_chunk_bytes(index, "alone"))


def test_write_content_before_attach_is_held_in_order():
    w = sse.SSEWriter("chatcmpl-2", "m", 7)
    w.write_content(0, "a")
    w.write_content(0, "b")
    t = _Transport()
    w.attach(t, b"role")
    assert t.writes == [_framed(b"role"), _framed(w.content_chunk_bytes(0, "a")),
                        _framed(w.content_chunk_bytes(0, "b"))]
