"""serving/multipart.py against the parser vLLM's form routes use (Starlette's MultiPartParser on
python-multipart): the same fields and files for the same bodies however the body is split
into chunks, the same refusals at the same bounds, and a body of many tiny parts refused
within milliseconds of the bound."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.multipart import FormLimits, MultipartReader, header_params, read_urlencoded

starlette_formparsers = pytest.importorskip("starlette.formparsers")


class _Stream:
    def __init__(self, data: bytes, sizes: list[int]):
        self.data, self.sizes, self.at = data, sizes, 0

    async def readany(self) -> bytes:
        n = self.sizes[self.at % len(self.sizes)] if self.sizes else len(self.data)
        chunk = self.data[:n]
        self.data = self.data[n:]
        self.at += 1
        return chunk


async def _ours(body: bytes, ctype: str, sizes: list[int], limits: FormLimits | None = None):
    reader = MultipartReader(_Stream(body, sizes), ctype, limits)
    out = []
    while (part := await reader.next()) is not None:
        if part.is_file:
            out.append((part.name, part.filename, await part.read()))
        else:
            out.append((part.name, await part.text()))
    return out


async def _starlettes(body: bytes, ctype: str, **limits):
    from starlette.datastructures import Headers, UploadFile

    async def stream():
        yield body

    form = await starlette_formparsers.MultiPartParser(Headers({"content-type": ctype}), stream(), **limits).parse()
    out = []
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            out.append((name, value.filename, await value.read()))
        else:
            out.append((name, value))
    return out


def _random_body(rng: random.Random, boundary: bytes) -> bytes:
    parts = []
    for i in range(rng.randint(0, 6)):
        data = bytes(rng.choice(b"ab\r\n-") for _ in range(rng.randint(0, 40)))
        data = data.replace(b"\r\n--" + boundary, b"")
        if rng.random() < 0.4:
            head = b'Content-Disposition: form-data; name="f%d"; filename="n %d.wav"\r\nContent-Type: audio/wav' % (i, i)
        else:
            head = b'Content-Disposition: form-data; name="k\xc3\xa9%d"' % i
        parts.append(b"--" + boundary + b"\r\n" + head + b"\r\n\r\n" + data + b"\r\n")
    return b"".join(parts) + b"--" + boundary + b"--\r\n"


@pytest.mark.parametrize("seed", range(40))
def test_same_form_as_starlette_in_any_chunking(seed):
    rng = random.Random(seed)
    boundary = rng.choice([b"xyz", b"----WebKitFormBoundary7MA4YWxkTrZu0gW", b"a-b"])
    body = _random_body(rng, boundary)
    ctype = f"multipart/form-data; boundary={boundary.decode()}"
    expected = asyncio.run(_starlettes(body, ctype))
    for sizes in ([], [1], [2, 3], [rng.randint(1, 17) for _ in range(5)]):
        assert asyncio.run(_ours(body, ctype, sizes)) == expected, (sizes, body)


@pytest.mark.parametrize("limit, parts, message", [
    ({"max_fields": 3}, [b'name="a"'] * 4, "Too many fields. Maximum number of fields is 3."),
    ({"max_files": 2}, [b'name="a"; filename="x"'] * 3, "Too many files. Maximum number of files is 2."),
])
def test_same_bounds_as_starlette(limit, parts, message):
    body = b"".join(b"--b\r\nContent-Disposition: form-data; " + p + b"\r\n\r\nv\r\n" for p in parts) + b"--b--\r\n"
    ctype = "multipart/form-data; boundary=b"
    with pytest.raises(starlette_formparsers.MultiPartException) as theirs:
        asyncio.run(_starlettes(body, ctype, **limit))
    with pytest.raises(APIError) as ours:
        asyncio.run(_ours(body, ctype, [], FormLimits(**limit)))
    assert ours.value.message == theirs.value.message == message
    assert (ours.value.status, ours.value.err_type) == (400, "Bad Request")


def test_part_size_body_size_headers_and_nesting():
    ctype = "multipart/form-data; boundary=b"
    big = b'--b\r\nContent-Disposition: form-data; name="a"\r\n\r\n' + b"x" * 2049 + b"\r\n--b--\r\n"
    with pytest.raises(APIError, match="Part exceeded maximum size of 2KB"):
        asyncio.run(_ours(big, ctype, [100], FormLimits(max_part_size=2048)))
    with pytest.raises(APIError) as e:
        asyncio.run(_ours(big, ctype, [100], FormLimits(max_body=1000)))
    assert e.value.status == 413
    long_headers = b"--b\r\nX: " + b"h" * 20000 + b"\r\n\r\nv\r\n--b--\r\n"
    with pytest.raises(APIError, match="headers exceed"):
        asyncio.run(_ours(long_headers, ctype, [1000]))
    nested = b'--b\r\nContent-Disposition: form-data; name="a"\r\nContent-Type: Multipart/Mixed; boundary=c\r\n\r\n--c--\r\n--b--\r\n'
    with pytest.raises(APIError, match="Nested multipart"):
        asyncio.run(_ours(nested, ctype, []))
    for bad in (b"no boundary at all", b"--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nunterminated"):
        with pytest.raises(APIError) as e:
            asyncio.run(_ours(bad, ctype, [7]))
        assert e.value.status == 400
    # a preamble before the first boundary is skipped (RFC 2046)
    assert asyncio.run(_ours(b"preamble\r\n--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nv\r\n--b--",
                             ctype, [3])) == [("a", "v")]


def test_header_params():
    assert header_params('form-data; name="a;b"; filename="C:\\\\x\\\\y.wav"') == (
        "form-data", {"name": "a;b", "filename": "C:\\x\\y.wav"})
    assert header_params("Form-Data;NAME=a; filename*=utf-8''z") == ("form-data", {"name": "a"})


def test_many_tiny_parts_are_refused_at_the_bound_quickly():
    body = b"".join(b'--b\r\nContent-Disposition: form-data; name="f%d"\r\n\r\nv\r\n' % i for i in range(50_000))
    t0 = time.perf_counter()
    with pytest.raises(APIError, match="Too many fields"):
        asyncio.run(_ours(body + b"--b--\r\n", "multipart/form-data; boundary=b", [65536]))
    assert time.perf_counter() - t0 < 1.0


def test_urlencoded_as_starlette():
    async def ours(body: bytes, limits=None):
        return await read_urlencoded(_Stream(body, [5]), limits)

    assert asyncio.run(ours(b"a=1&b=x+y%21&&c&d=%C3%A9")) == [("a", "1"), ("b", "x y!"), ("c", ""), ("d", "é")]
    with pytest.raises(APIError, match="Too many fields. Maximum number of fields is 2."):
        asyncio.run(ours(b"a=1&b=2&c=3", FormLimits(max_fields=2)))
    with pytest.raises(APIError, match="Field exceeded maximum size of 1KB."):
        asyncio.run(ours(b"a=" + b"x" * 1024, FormLimits(max_part_size=1024)))
