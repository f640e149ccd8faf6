"""Server-sent-event chunks for chat completions, written straight to the transport.

The handler prepares an aiohttp StreamResponse with chunked transfer encoding; from then on
every event is framed here (`<hex len>\\r\\n<data>\\r\\n`) and handed to `transport.write`
synchronously from the engine-output callback: no await, queue or task per token. Events
produced before the response is prepared are held and flushed on `attach`. Chunk JSON is
built from a per-request prefix and msgspec-encoded fields; key order and fields follow
vLLM's `model_dump_json(exclude_unset=True)` output.
"""

from __future__ import annotations

from typing import Any

import msgspec

_enc = msgspec.json.encode
DONE = b"data: [DONE]\n\n"


class SSEWriter:
    __slots__ = ("prefix", "transport", "pending", "alive", "usage_prefix")

    def __init__(self, response_id: str, model: str, created: int, object_name: str = "chat.completion.chunk"):
        head = b'{"id":' + _enc(response_id) + b',"object":' + _enc(object_name) + b',"created":' + str(created).encode()
        head += b',"model":' + _enc(model)
        self.prefix = b"data: " + head + b',"choices":['
        self.usage_prefix = b"data: " + head + b',"choices":[],"usage":'
        self.transport = None
        self.pending: list[bytes] | None = []
        self.alive = True

    def attach(self, transport, first_chunk: bytes) -> None:
        """The response headers are out: write the role chunk, then anything held."""
        self.transport = transport
        pending, self.pending = self.pending, None
        self.write(first_chunk)
        for data in pending or ():
            self.write(data)

    def write(self, data: bytes) -> None:
        if self.pending is not None:
            self.pending.append(data)
            return
        t = self.transport
        if t is None or t.is_closing():
            self.alive = False
            return
        t.write(b"%x\r\n%b\r\n" % (len(data), data))

    def role_chunk(self, index: int) -> bytes:
        return (
            self.prefix
            + b'{"index":%d,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
            % index
        )

    def content_chunk(self, index: int, content: str, usage: dict | None = None) -> None:
        data = self.prefix + b'{"index":%d,"delta":{"content":%b},"logprobs":null,"finish_reason":null}]' % (
            index,
            _enc(content),
        )
        self.write(data + (b',"usage":' + _enc(usage) + b"}\n\n" if usage else b"}\n\n"))

    def delta_chunk(
        self,
        index: int,
        delta: dict[str, Any],
        finish_reason: str | None,
        stop_reason: int | str | None,
        final: bool,
        usage: dict | None = None,
    ) -> None:
        data = self.prefix + b'{"index":%d,"delta":%b,"logprobs":null,"finish_reason":%b' % (
            index,
            _enc(delta),
            _enc(finish_reason),
        )
        if final:
            data += b',"stop_reason":' + _enc(stop_reason)
        data += b"}]"
        if usage:
            data += b',"usage":' + _enc(usage)
        self.write(data + b"}\n\n")

    def usage_chunk(self, usage: dict) -> None:
        self.write(self.usage_prefix + _enc(usage) + b"}\n\n")
