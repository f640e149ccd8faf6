"""Bounded reading of `multipart/form-data` and `application/x-www-form-urlencoded` bodies.

A form is structure the client chooses: how many parts, how large each part's headers and
data, whether a part nests another multipart body. Everything here is bounded before it is
kept, with the limits and words of the parser vLLM's server uses (Starlette's
`MultiPartParser`/`FormParser` as FastAPI calls them: at most 1,000 fields and 1,000 files, a
non-file part at most 1 MiB, answered 400 "Too many fields. Maximum number of fields is
1000."). The whole body is also bounded (`max_body`: 413, as every route's body).

Speed matters as much as the bounds: the reader is a single pass over the body with
`bytes.find` (no per-line reads, no per-part decoder objects), so even a body made only of
tiny parts is refused within a few milliseconds of the 1,001st part, and it yields to the
event loop every `_YIELD_EVERY` parts so other requests on the worker never wait behind it.

Use:

    reader = MultipartReader.from_request(request, FormLimits(max_body=...))
    while (part := await reader.next()) is not None:
        if part.is_file:
            async for chunk in part.chunks():   # bounded by max_file_size, if set
                ...
        else:
            value = await part.text()           # bounded by max_part_size

or `await read_form(request, limits)` for the whole form as `(name, str | UploadedFile)`
pairs. Errors are `APIError`s (400 with vLLM's messages; 413 past `max_body`).
"""

from __future__ import annotations

import asyncio
import codecs
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote_plus

from vllm_pyfrontend.errors import APIError

_MiB = 1024 * 1024
_READ = 64 * 1024
_YIELD_EVERY = 64  # parts between two yields to the event loop
_CRLF = b"\r\n"


@dataclass(frozen=True)
class FormLimits:
    """Bounds on one form body. The defaults are Starlette's (vLLM's form routes)."""

    max_fields: int = 1000  # non-file parts (or urlencoded pairs)
    max_files: int = 1000  # parts with a filename
    max_part_size: int = _MiB  # bytes of one non-file part (name + value when urlencoded)
    max_file_size: int | None = None  # bytes of one file part (None: only max_body bounds it)
    max_header_size: int = 16 * 1024  # one part's header block
    max_body: int | None = None  # every byte read (413 past it)


class ByteStream(Protocol):
    async def readany(self) -> bytes: ...


def _bad(message: str) -> APIError:
    # vLLM: Starlette's HTTPException(400) through its http_exception_handler.
    return APIError(400, message, None, "Bad Request")


def media_type(content_type: str | None) -> str:
    """`multipart/form-data` of `multipart/form-data; boundary=x`, lower-cased."""
    return (content_type or "").split(";", 1)[0].strip().lower()


_PARAM = re.compile(r';[ \t]*([^=;\s]+)[ \t]*=[ \t]*("(?:[^"\\]|\\.)*"|[^;]*)')
_UNESCAPE = re.compile(r'\\([\\"])')  # only \\ and \", as Starlette


def header_params(value: str) -> tuple[str, dict[str, str]]:
    """A header's value and its `; key=value` parameters (keys lower-cased, quoted values
    unquoted with their backslash escapes). RFC 7578 forbids the RFC 2231 `key*=` forms in
    form data; they are skipped, as Starlette skips them."""
    head, sep, _ = value.partition(";")
    params: dict[str, str] = {}
    if sep:
        for m in _PARAM.finditer(value, len(head)):
            key, val = m.group(1).lower(), m.group(2)
            if "*" in key:
                continue
            if val[:1] == '"':
                val = val[1:-1]
                if "\\" in val:
                    val = _UNESCAPE.sub(r"\1", val)
            else:
                val = val.strip()
            params[key] = val
    return head.strip().lower(), params


def _decode(data: bytes, charset: str) -> str:
    # Starlette's _user_safe_decode: the form's charset, else latin-1 (never an error).
    try:
        return data.decode(charset)
    except (UnicodeDecodeError, LookupError):
        return data.decode("latin-1")


def _charset(content_type: str) -> str:
    charset = header_params(content_type)[1].get("charset", "utf-8")
    try:
        return codecs.lookup(charset).name
    except LookupError:
        return "latin-1"


@dataclass
class UploadedFile:
    """A file part read whole by `read_form`."""

    filename: str
    content_type: str | None
    data: bytes


class Part:
    """One part of a multipart body. Read its data (`chunks`, `read`, `text`) before asking
    the reader for the next part; a part not read is skipped (still counted and bounded)."""

    __slots__ = ("name", "filename", "content_type", "headers", "_reader", "_done", "_size")

    def __init__(self, reader: "MultipartReader", name: str, filename: str | None, content_type: str | None,
                 headers: list[tuple[str, str]]):
        self.name = name
        self.filename = filename
        self.content_type = content_type
        self.headers = headers
        self._reader = reader
        self._done = False
        self._size = 0

    @property
    def is_file(self) -> bool:
        return self.filename is not None

    @property
    def size(self) -> int:
        """Bytes of data read so far."""
        return self._size

    def _limit(self) -> tuple[int | None, str]:
        lim = self._reader.limits
        if self.is_file:
            return lim.max_file_size, f"File exceeded maximum size of {lim.max_file_size} bytes."
        return lim.max_part_size, f"Part exceeded maximum size of {int(lim.max_part_size / 1024)}KB."

    async def _next_chunk(self, limit: int | None, message: str) -> bytes | None:
        """The part's next chunk of data, within the part's limit; None at its end."""
        if self._done:
            return None
        chunk = await self._reader._data_chunk()
        if chunk is None:
            self._done = True
            return None
        self._size += len(chunk)
        if limit is not None and self._size > limit:
            raise _bad(message)
        return chunk

    async def chunks(self) -> AsyncIterator[bytes]:
        """The part's data in chunks, as they arrive, bounded by the part's limit."""
        limit, message = self._limit()
        while (chunk := await self._next_chunk(limit, message)) is not None:
            if chunk:
                yield chunk

    async def read(self) -> bytes:
        """The part's whole data, bounded by the part's limit. (A loop, not `chunks()`: an
        async generator per part costs more than parsing a small part.)"""
        limit, message = self._limit()
        out = b""
        while (chunk := await self._next_chunk(limit, message)) is not None:
            out = chunk if not out else out + chunk
        return out

    async def text(self) -> str:
        """A field's value, decoded with the form's charset (latin-1 where it does not decode)."""
        return _decode(await self.read(), self._reader.charset)

    async def drain(self) -> None:
        """Skip the rest of the part's data (still bounded: a skipped part is no way around
        the limits)."""
        limit, message = self._limit()
        while await self._next_chunk(limit, message) is not None:
            pass


class MultipartReader:
    """A `multipart/form-data` body, part by part, within `limits`."""

    def __init__(self, stream: ByteStream, content_type: str, limits: FormLimits | None = None):
        if media_type(content_type) != "multipart/form-data":
            raise _bad("The body is not multipart/form-data.")
        params = header_params(content_type)[1]
        boundary = params.get("boundary")
        if not boundary:
            raise _bad("Missing boundary in multipart.")
        if len(boundary) > 200:
            raise _bad("The multipart boundary is longer than 200 characters.")
        self.limits = limits or FormLimits()
        self.charset = _charset(content_type)
        self._stream = stream
        self._dash_boundary = b"--" + boundary.encode("latin-1")
        self._delimiter = _CRLF + self._dash_boundary  # what ends a part's data
        self._buf = bytearray()
        self._pos = 0
        self._read_total = 0
        self._eof = False
        self._started = False
        self._finished = False
        self._fields = 0
        self._files = 0
        self._parts = 0
        self._current: Part | None = None
        self._part_ended = False

    @classmethod
    def from_request(cls, request: Any, limits: FormLimits | None = None) -> "MultipartReader":
        """The body of an aiohttp request (its `content` stream, never read whole)."""
        return cls(request.content, request.headers.get("Content-Type", ""), limits)

    # -- the buffer ------------------------------------------------------------------------

    async def _fill(self) -> bool:
        """More bytes into the buffer; False at the end of the body."""
        if self._eof:
            return False
        chunk = await self._stream.readany()
        if not chunk:
            self._eof = True
            return False
        self._read_total += len(chunk)
        limit = self.limits.max_body
        if limit is not None and self._read_total > limit:
            raise APIError(413, f"Request body exceeds the limit of {limit} bytes.")
        if self._pos > 0 and self._pos >= len(self._buf) // 2:  # drop what was consumed
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += chunk
        return True

    async def _data_chunk(self) -> bytes | None:
        """The current part's next data bytes (maybe b""), None once its closing delimiter is
        reached (consumed up to the delimiter's dashes)."""
        if self._part_ended:
            self._part_ended = False
            return None
        delim = self._delimiter
        while True:
            buf = self._buf
            at = buf.find(delim, self._pos)
            if at >= 0:
                data = bytes(buf[self._pos:at])
                self._pos = at + len(_CRLF)  # leave `--boundary` for `next`
                if data:
                    self._part_ended = True  # the next call says so
                    return data
                return None
            # No delimiter yet: give out what cannot be the start of one.
            safe = len(buf) - len(delim) + 1
            if safe > self._pos:
                data = bytes(buf[self._pos:safe])
                self._pos = safe
                return data
            if not await self._fill():
                raise _bad("Invalid multipart data: the body ended inside a part.")

    # -- parts ----------------------------------------------------------------------------

    async def next(self) -> Part | None:
        """The next part (its headers read and checked), None after the closing boundary."""
        if self._finished:
            return None
        if self._current is not None:
            await self._current.drain()
            self._current = None
        if not self._started:
            await self._skip_preamble()
            self._started = True
        # At `--boundary`: then `--` (the end) or transport padding and CRLF.
        if not await self._at_least(len(self._dash_boundary) + 2):
            raise _bad("Invalid multipart data: the body ended at a boundary.")
        buf, pos = self._buf, self._pos
        if buf[pos:pos + len(self._dash_boundary)] != self._dash_boundary:
            raise _bad("Invalid multipart data: a part does not end at the boundary.")
        pos += len(self._dash_boundary)
        if buf[pos:pos + 2] == b"--":
            self._finished = True
            return None
        while True:
            eol = buf.find(_CRLF, pos)
            if eol >= 0:
                break
            if len(buf) - pos > 256 or not await self._fill():
                raise _bad("Invalid multipart data: no line end after the boundary.")
            buf, pos = self._buf, self._pos + len(self._dash_boundary)
        if buf[pos:eol].strip(b" \t"):
            raise _bad("Invalid multipart data: text after the boundary.")
        self._pos = eol + 2
        part = await self._headers()
        self._parts += 1
        if self._parts % _YIELD_EVERY == 0:
            await asyncio.sleep(0)  # let the worker's other requests run
        self._current = part
        return part

    async def _at_least(self, n: int) -> bool:
        while len(self._buf) - self._pos < n:
            if not await self._fill():
                return False
        return True

    async def _skip_preamble(self) -> None:
        # RFC 2046: text before the first boundary is ignored; the boundary starts a line.
        first = self._dash_boundary
        while True:
            buf = self._buf
            if buf.startswith(first, self._pos):
                return
            at = buf.find(_CRLF + first, self._pos)
            if at >= 0:
                self._pos = at + 2
                return
            keep = max(self._pos, len(buf) - len(first) - 2)
            self._pos = keep
            if not await self._fill():
                raise _bad("Invalid multipart data: no boundary in the body.")

    async def _headers(self) -> Part:
        limit = self.limits.max_header_size
        scanned = 0  # bytes past `_pos` already searched (a body sent a byte at a time is not rescanned)
        while True:
            if self._buf.startswith(_CRLF, self._pos):  # no headers at all
                block = b""
                self._pos += 2
                break
            end = self._buf.find(b"\r\n\r\n", self._pos + max(0, scanned - 3))
            if end >= 0:
                block = bytes(self._buf[self._pos:end])
                self._pos = end + 4
                break
            scanned = len(self._buf) - self._pos
            if len(self._buf) - self._pos > limit or not await self._fill():
                if len(self._buf) - self._pos > limit:
                    raise _bad(f"A part's headers exceed {limit} bytes.")
                raise _bad("Invalid multipart data: the body ended inside a part's headers.")
        if len(block) > limit:
            raise _bad(f"A part's headers exceed {limit} bytes.")
        headers: list[tuple[str, str]] = []
        disposition = ctype = None
        for raw in block.split(_CRLF) if block else ():
            name, sep, value = raw.partition(b":")
            if not sep:
                raise _bad("Invalid multipart data: a part header without a colon.")
            key = name.strip().decode("latin-1").lower()
            val = value.strip().decode("latin-1")
            headers.append((key, val))
            if key == "content-disposition":
                disposition = val
            elif key == "content-type":
                ctype = val
        if ctype is not None and media_type(ctype).startswith("multipart/"):
            raise _bad("Nested multipart parts are not supported.")
        params = header_params(disposition)[1] if disposition is not None else {}
        if "name" not in params:
            raise _bad('The Content-Disposition header field "name" must be provided.')
        name = _decode(params["name"].encode("latin-1"), self.charset)
        filename = params.get("filename")
        if filename is not None:
            self._files += 1
            if self._files > self.limits.max_files:
                raise _bad(f"Too many files. Maximum number of files is {self.limits.max_files}.")
            filename = _decode(filename.encode("latin-1"), self.charset)
            if filename[1:3] == ":\\" or filename[:2] == "\\\\":  # a browser's full Windows path
                filename = filename.split("\\")[-1]
        else:
            self._fields += 1
            if self._fields > self.limits.max_fields:
                raise _bad(f"Too many fields. Maximum number of fields is {self.limits.max_fields}.")
        return Part(self, name, filename, ctype, headers)


async def read_form(request: Any, limits: FormLimits | None = None) -> list[tuple[str, str | UploadedFile]]:
    """The whole form of a request (multipart or urlencoded) within `limits`: fields as
    strings, files as `UploadedFile`s (bounded by `max_file_size`, so set it). Any other
    content type is an empty form (as Starlette's)."""
    limits = limits or FormLimits()
    ctype = request.headers.get("Content-Type", "")
    kind = media_type(ctype)
    if kind == "multipart/form-data":
        reader = MultipartReader.from_request(request, limits)
        out: list[tuple[str, str | UploadedFile]] = []
        while (part := await reader.next()) is not None:
            if part.is_file:
                out.append((part.name, UploadedFile(part.filename or "", part.content_type, await part.read())))
            else:
                out.append((part.name, await part.text()))
        return out
    if kind == "application/x-www-form-urlencoded":
        return list(await read_urlencoded(request.content, limits))
    return []


async def read_urlencoded(stream: ByteStream, limits: FormLimits | None = None) -> list[tuple[str, str]]:
    """An `application/x-www-form-urlencoded` body as (name, value) pairs, as Starlette's
    FormParser reads it (latin-1, then percent-decoding; `+` is a space; empty pairs
    skipped), at most `max_fields` pairs of at most `max_part_size` bytes."""
    limits = limits or FormLimits()
    body = bytearray()
    while chunk := await stream.readany():
        body += chunk
        if limits.max_body is not None and len(body) > limits.max_body:
            raise APIError(413, f"Request body exceeds the limit of {limits.max_body} bytes.")
    if body.count(b"&") >= limits.max_fields and sum(1 for p in body.split(b"&") if p) > limits.max_fields:
        raise _bad(f"Too many fields. Maximum number of fields is {limits.max_fields}.")
    out: list[tuple[str, str]] = []
    for pair in bytes(body).split(b"&"):
        if not pair:
            continue
        if len(pair) - (1 if b"=" in pair else 0) > limits.max_part_size:
            raise _bad(f"Field exceeded maximum size of {int(limits.max_part_size / 1024)}KB.")
        name, _, value = pair.partition(b"=")
        out.append((unquote_plus(name.decode("latin-1")), unquote_plus(value.decode("latin-1"))))
    return out
