"""Server-sent-event chunks for chat completions, written straight to the transport.

The handler prepares an aiohttp StreamResponse with chunked transfer encoding; from then on
every event is framed here (`<hex len>\\r\\n<data>\\r\\n`) and handed to `transport.write`
synchronously from the engine-output callback: no await, queue or task per token. Events
produced before the response is prepared are held and flushed on `attach`. Chunk JSON is
built from a per-request prefix and msgspec-encoded fields; key order and fields follow
vLLM's `model_dump_json(exclude_unset=True)` output.
"""

from __future__ import annotations

import asyncio
from time import monotonic
from typing import Callable

import msgspec

from vllm_pyfrontend import environment

_enc = msgspec.json.encode
DONE = b"data: [DONE]\n\n"
KEEP_ALIVE = b": keep-alive\n\n"  # an SSE comment: clients skip it, idle-timeout proxies see bytes


# Backpressure (a client that reads slower than the engine writes). Above a writer's soft limit
# (bytes in the transport's write buffer), events are held here and written as one chunk once the
# buffer drains (coalesced: one frame instead of hundreds). Past its hard limit (held + buffered)
# the stream is aborted: the connection is dropped and `alive` turns false, which cancels the
# request in the engine. So a stream costs at most about its hard limit in worker memory. Both
# are read from the environment when the writer is made (VLLM_PYFRONTEND_SSE_SOFT_LIMIT, 256 KiB;
# VLLM_PYFRONTEND_SSE_HARD_LIMIT, 8 MiB: vllm_pyfrontend.environment).
_RETRY_S = 0.05  # how often held events retry while the writer waits for the client


class StreamDrain:
    """Writes made while the engine client processes one drain of its output socket are gathered
    per stream and written at the drain's end: one write per stream per drain. A drain is usually
    one engine step, so nothing changes while the worker keeps up; when it falls behind (several
    steps queued), a stream gets one write for all of them instead of one per step, and the
    `send()` per token that dominates the worker's time shrinks just when it is overloaded (the
    first burst of 1024 streams, a slow moment).

    One per worker (`ServerState.drain`), registered with its engine client's drain hooks
    (`EngineClient.drain_hooks`, which call `begin` and `end` around each drain); each stream's
    writer holds it (`SSEWriter.drain`, set when its request is submitted)."""

    __slots__ = ("active", "dirty")

    def __init__(self) -> None:
        self.active = False
        self.dirty: list[SSEWriter] = []  # the writers that gathered something in this drain

    @property
    def hooks(self) -> tuple[Callable[[], None], Callable[[], None]]:
        """(begin, end), as `EngineClient.drain_hooks` takes them."""
        return self.begin, self.end

    def begin(self) -> None:
        self.active = True

    def end(self) -> None:
        self.active = False
        dirty = self.dirty
        if not dirty:
            return
        self.dirty = []
        now = monotonic()
        for w in dirty:
            if w.ending:
                continue  # its stream ended in this drain: these events go with its end (last_frame)
            text = w.text
            if text is not None:
                if not w.out:  # nothing but this drain's content (the common case): one chunk
                    w.text = w.out = None
                    w._write_content_now(text, now)
                    continue
                w._frame_text()
            out, w.out = w.out, None
            if out:
                w._write_now(out, now)


# The drain of a writer that no engine client's drain gathers for (never active): it writes at once.
_NO_DRAIN = StreamDrain()


# The end of a plain content chunk (after the JSON string of the content), see content_chunk_bytes.
_CONTENT_TAIL = b'},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
# A writer registered in this drain with nothing framed yet (`out`); falsy like an empty buffer.
_NOTHING = b""
_CONTENT_TAIL_LEN = len(_CONTENT_TAIL)


class SSEWriter:
    # What ends the stream and what a silent stream writes; another API style's writer (a
    # subclass) sets its own.
    done_frame = DONE
    keep_alive_frame = KEEP_ALIVE

    __slots__ = ("prefix", "transport", "pending", "alive", "usage_prefix", "usage_suffix", "held", "_retry",
                 "out", "text", "last_write", "_keep_alive", "_content_head", "ending", "drain",
                 "soft_limit", "hard_limit")

    def __init__(self, response_id: str, model: str, created: int, object_name: str = "chat.completion.chunk",
                 limits: tuple[int, int] | None = None):
        head = b'{"id":' + _enc(response_id) + b',"object":' + _enc(object_name) + b',"created":' + str(created).encode()
        head += b',"model":' + _enc(model)
        self.prefix = b"data: " + head + b',"choices":['
        self.usage_prefix = b"data: " + head + b',"choices":[],"usage":'
        self.usage_suffix = b"}\n\n"  # set_fingerprint() adds the system fingerprint
        self.transport = None
        self.pending: list[bytes] | None = []
        self.alive = True
        self.held: bytearray | None = None  # coalesced events waiting for a slow client
        self._retry: asyncio.TimerHandle | None = None
        self.out: bytearray | None = None  # this drain's events, written at its end
        # Plain content of choice 0 gathered in this drain, framed as one chunk when anything
        # else is written or the drain ends (see write_content).
        self.text: str | None = None
        self.last_write = 0.0  # monotonic time of the last write to the transport
        self._keep_alive: asyncio.TimerHandle | None = None
        self._content_head = self.prefix + b'{"index":0,"delta":{"content":'  # choice 0's
        # The stream's last events are written: what the current drain gathered for it waits
        # for `last_frame`, which the handler writes with the end of the body (one write).
        self.ending = False
        # The drain that gathers this stream's writes (`StreamDrain`); by default none does.
        self.drain = _NO_DRAIN
        # Backpressure bounds in bytes (see above): the worker's (`ServerState.sse_limits`, read
        # once at start), else the environment's now.
        self.soft_limit, self.hard_limit = limits or (environment.sse_soft_limit(), environment.sse_hard_limit())

    def take_pending(self) -> bytes:
        """The events written so far, before `attach`: they go out with the response's headers
        (serving/responder.py); what is written from here to `attach` goes out on `attach`."""
        pending = self.pending
        if not pending:
            return b""
        self.pending = []
        return b"".join(pending)

    def attach(self, transport, first_chunk: bytes) -> None:
        """The response headers are out: write the role chunk, then anything held."""
        self.transport = transport
        pending, self.pending = self.pending, None
        if first_chunk:  # an empty chunk would end the chunked body
            self.write(first_chunk)
        for data in pending or ():
            self.write(data)

    def write(self, data: bytes) -> None:
        if self.pending is not None:
            self.pending.append(data)
            return
        drain = self.drain
        if drain.active:
            if self.text is not None:
                self._frame_text()  # (keeps the order: the gathered content goes first)
            out = self.out
            if out is None:
                self.out = bytearray(data)
                drain.dirty.append(self)
            elif out is _NOTHING:
                self.out = bytearray(data)
            else:
                out += data
            return
        self._write_now(data)

    def write_content(self, index: int, content: str) -> None:
        """`write(content_chunk_bytes(index, content))`: the per-token hot path.

        Within one drain of the engine's output (one engine step while the worker keeps up,
        several when it is behind), the plain content of choice 0 is gathered and goes out as
        ONE chunk when the drain ends: a worker that falls behind frames, encodes and writes a
        chunk per stream per drain instead of per token. vLLM's own server merges the same way
        when its stream consumer lags (its output collector joins the deltas not yet taken).
        Content of another choice is framed at once, in order."""
        drain = self.drain
        if drain.active and self.pending is None:
            if index == 0:
                text = self.text
                if text is None:
                    self.text = content
                    if self.out is None:
                        self.out = _NOTHING
                        drain.dirty.append(self)
                else:
                    self.text = text + content
                return
            self.write(self.prefix + b'{"index":%d,"delta":{"content":' % index + _enc(content) + _CONTENT_TAIL)
            return
        head = self._content_head if index == 0 else self.prefix + b'{"index":%d,"delta":{"content":' % index
        self.write(head + _enc(content) + _CONTENT_TAIL)

    def _frame_text(self) -> None:
        """The content gathered in this drain, as one chunk into the drain's buffer."""
        text, self.text = self.text, None
        out = self.out  # (set, and the writer registered, when the text began)
        if out is _NOTHING:
            out = self.out = bytearray()
        out += self._content_head
        out += _enc(text)
        out += _CONTENT_TAIL

    def _write_content_now(self, text: str, now: float) -> None:
        """`_frame_text` + `_write_now` when the chunk is all a drain has for the stream: the
        chunked frame built in one piece."""
        t = self.transport
        if t is not None and self.held is None and not t.is_closing() and t.get_write_buffer_size() <= self.soft_limit:
            head = self._content_head
            body = _enc(text)
            t.write(b"%x\r\n%b%b%b\r\n" % (len(head) + len(body) + _CONTENT_TAIL_LEN, head, body, _CONTENT_TAIL))
            self.last_write = now
            return
        self._write_now(self._content_head + _enc(text) + _CONTENT_TAIL, now)

    def _write_now(self, data: bytes | bytearray, now: float = 0.0) -> None:
        t = self.transport
        if t is None or t.is_closing():
            self._dead()
            return
        buffered = t.get_write_buffer_size()
        held = self.held
        if held is None and buffered <= self.soft_limit:
            t.write(b"%x\r\n%b\r\n" % (len(data), data))  # the hot path
            self.last_write = now or monotonic()
            return
        if held is None:
            held = self.held = bytearray()
        held += data
        if buffered + len(held) > self.hard_limit:
            self.abort()
        elif buffered <= self.soft_limit:
            self._flush()  # the client caught up: out it goes, as one frame
        elif self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(_RETRY_S, self._retry_flush)

    def keep_alive(self, interval: float) -> None:
        """Write a keep-alive comment whenever the stream has written nothing for `interval`
        seconds (--sse-keep-alive-interval), until `stop_keep_alive`."""
        self.last_write = monotonic()
        loop = asyncio.get_running_loop()

        def tick() -> None:
            self._keep_alive = None
            if not self.alive:
                return
            quiet = monotonic() - self.last_write
            if quiet >= interval and self.held is None:
                self._write_now(self.keep_alive_frame)  # (a slow client's held events say enough)
                quiet = 0.0
            if self.alive:
                self._keep_alive = loop.call_later(max(interval - quiet, 0.01), tick)

        self._keep_alive = loop.call_later(interval, tick)

    def stop_keep_alive(self) -> None:
        if self._keep_alive is not None:
            self._keep_alive.cancel()
            self._keep_alive = None

    def last_frame(self, before_done: bytes = b"") -> bytes:
        """The end of the stream, for `StreamResponse.write_eof(...)`: whatever is still held for
        a slow client, then `data: [DONE]`. aiohttp writes it together with the chunked
        terminator in one transport write, so a client never sees [DONE] without the end of the
        response body: HTTP clients that reuse the connection once they have read [DONE] would
        otherwise queue their next request behind a body that has not ended yet."""
        held, self.held = self.held, None
        if self.text is not None:
            self._frame_text()
        out, self.out = self.out, None  # (normally written already, at the end of the drain)
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        return bytes(held or b"") + bytes(out or b"") + before_done + self.done_frame

    def _flush(self) -> None:
        held, self.held = self.held, None
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        t = self.transport
        if held and t is not None and not t.is_closing():
            t.write(b"%x\r\n%b\r\n" % (len(held), held))

    def _retry_flush(self) -> None:
        self._retry = None
        t = self.transport
        if self.held is None:
            return
        if t is None or t.is_closing():
            self._dead()
        elif t.get_write_buffer_size() <= self.soft_limit:
            self._flush()
        else:
            self._retry = asyncio.get_running_loop().call_later(_RETRY_S, self._retry_flush)

    def _dead(self) -> None:
        self.alive = False
        self.held = None
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def abort(self) -> None:
        """Too far behind: drop the connection (freeing its buffers); the request is cancelled
        by whoever checks `alive` (and by aiohttp cancelling the handler on connection loss)."""
        self._dead()
        t = self.transport
        if t is not None and not t.is_closing():
            t.abort()

    def set_fingerprint(self, fingerprint: str | None) -> None:
        self.usage_suffix = b',"system_fingerprint":' + _enc(fingerprint) + b"}\n\n"

    def role_chunk(self, index: int, prompt_token_ids: list[int] | None = None, role: str = "assistant",
                   usage: dict | None = None) -> bytes:
        """A choice's first chunk; with `return_token_ids` it carries the prompt's token ids
        (vLLM: the first chunk of each choice, placeholders of media expanded), and with
        continuous usage stats the choice's usage (no completion tokens yet)."""
        return (
            self.prefix
            + b'{"index":%d,"delta":{"role":%b,"content":""},"logprobs":null,"finish_reason":null}],'
            b'"prompt_token_ids":%b,"prompt_text":null%b}\n\n' % (
                index, _enc(role), _enc(prompt_token_ids), b',"usage":' + _enc(usage) if usage else b"")
        )

    def content_chunk(self, index: int, content: str, usage: dict | None = None) -> None:
        self.write(self.content_chunk_bytes(index, content, usage))

    def content_chunk_bytes(self, index: int, content: str, usage: dict | None = None) -> bytes:
        data = self.prefix + b'{"index":%d,"delta":{"content":%b},"logprobs":null,"finish_reason":null,"token_ids":null}]' % (
            index,
            _enc(content),
        )
        return data + (b',"usage":' + _enc(usage) + b"}\n\n" if usage else b"}\n\n")

    def arguments_chunk_bytes(self, index: int, call: int, arguments: str, usage: dict | None = None) -> bytes:
        """The chunk of an open tool call's next argument text, as the formatter's general path
        writes it (`tool_calls: [{"index", "function": {"arguments"}}]`)."""
        data = self.prefix + (b'{"index":%d,"delta":{"tool_calls":[{"index":%d,"function":{"arguments":%b}}]},'
                              b'"logprobs":null,"finish_reason":null,"token_ids":null}]') % (
            index, call, _enc(arguments))
        return data + (b',"usage":' + _enc(usage) + b"}\n\n" if usage else b"}\n\n")

    def usage_chunk(self, usage: dict, metrics: dict | None = None) -> None:
        """The usage chunk; `metrics`: vLLM's per-request metrics, which ride on it."""
        if metrics is None:
            self.write(self.usage_prefix + _enc(usage) + self.usage_suffix)
        else:
            self.write(self.usage_prefix + _enc(usage) + b',"metrics":' + _enc(metrics) + self.usage_suffix)
