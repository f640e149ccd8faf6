"""An HTTP/1.1 response as aiohttp writes it (status line, headers, a body with a
Content-Length, chunked, or running to the end), read back incrementally as ASGI messages: what
asgi_capture.py turns a handler's captured output into."""

from __future__ import annotations

from typing import Any

# Hop-by-hop headers: the real connection sets its own.
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding"})


class ResponseReader:
    """An HTTP/1.1 response as aiohttp writes it, read incrementally: `feed(data)` gives the
    ASGI `http.response.start` message once the head is complete, and the body bytes so far
    without their chunked framing."""

    def __init__(self, no_body: bool):
        self.started = False
        self._no_body = no_body
        self._buf = bytearray()
        self._chunked = False
        self._left: int | None = None  # body bytes still to come (None: until the end)
        self._chunk_left = 0  # bytes of the current chunk still to come; -1: its CRLF
        self._done = False

    def feed(self, data: bytes) -> tuple[dict[str, Any] | None, bytes]:
        start = None
        if not self.started:
            self._buf += data
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return None, b""
            start = self._head(bytes(self._buf[:end]))
            data = bytes(self._buf[end + 4:])
            self._buf = bytearray()
            self.started = True
        if self._done or not data:
            return start, b""
        if self._chunked:
            return start, self._dechunk(data)
        if self._left is not None:
            data = data[: self._left]
            self._left -= len(data)
        return start, data

    def _head(self, head: bytes) -> dict[str, Any]:
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers = []
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            value = value.strip()
            if name == b"transfer-encoding" and b"chunked" in value.lower():
                self._chunked = True
            elif name == b"content-length":
                self._left = int(value)
            if name not in _HOP_BY_HOP:
                headers.append((name, value))
        if self._no_body or status in (204, 304) or status < 200:
            self._done = True
        return {"type": "http.response.start", "status": status, "headers": headers}

    def _dechunk(self, data: bytes) -> bytes:
        buf = self._buf
        buf += data
        out = bytearray()
        while buf and not self._done:
            if self._chunk_left > 0:
                take = min(self._chunk_left, len(buf))
                out += buf[:take]
                del buf[:take]
                self._chunk_left -= take
                if self._chunk_left == 0:
                    self._chunk_left = -1
            elif self._chunk_left < 0:
                if len(buf) < 2:
                    break
                del buf[:2]
                self._chunk_left = 0
            else:
                end = buf.find(b"\r\n")
                if end < 0:
                    break
                size = int(bytes(buf[:end]).split(b";", 1)[0], 16)
                del buf[: end + 2]
                if size == 0:
                    self._done = True
                    buf.clear()
                self._chunk_left = size
        return bytes(out)
