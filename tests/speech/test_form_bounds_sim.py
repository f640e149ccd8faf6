"""The speech routes' multipart form against a worker (the in-process tier, tests/inprocess.py:
the real worker and the simulated engine serving the tiny Whisper of tests/e2e/tiny_whisper.py,
over loopback HTTP): the form is read with vLLM's bounds (Starlette's: 1,000 fields, 1,000 files,
1 MiB per field), so a body of 50,000 tiny parts is a fast 400 "Too many fields" and the worker's
event loop keeps serving others meanwhile; a nested multipart part and a part without a name are
400s, not 500s; the official `openai` SDK's uploads are served as before. (The form is read in
the worker's request handling: nothing here needs the supervisor's processes.)"""

from __future__ import annotations

import io
import threading
import time

import httpx
import numpy as np
import openai
import pytest

from tests.e2e.tiny_whisper import SAMPLE_RATE, build_tiny_whisper
from tests.inprocess import InProcessStack

MODEL = "whisper"
B = b"speechboundary"
CTYPE = {"Content-Type": f"multipart/form-data; boundary={B.decode()}"}


def _wav(seconds: float = 1.0) -> bytes:
    import soundfile as sf

    audio = 0.3 * np.random.default_rng(0).standard_normal(int(seconds * SAMPLE_RATE))
    buf = io.BytesIO()
    sf.write(buf, audio.astype(np.float32), SAMPLE_RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue()


WAV = _wav()


def _field(name: str, value: str) -> bytes:
    return b"--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (B, name.encode(), value.encode())


def _file(name: str = "file", data: bytes = WAV, filename: str = "a.wav") -> bytes:
    return (b"--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\nContent-Type: audio/wav\r\n\r\n"
            % (B, name.encode(), filename.encode())) + data + b"\r\n"


def _body(*parts: bytes) -> bytes:
    return b"".join(parts) + b"--%s--\r\n" % B


BASIC = (_field("model", MODEL), _field("language", "en"), _field("max_completion_tokens", "3"))


@pytest.fixture(scope="module")
def stack():
    model = build_tiny_whisper()
    s = InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "448",
                        "--served-model-name", MODEL, "--shutdown-timeout", "5", model], ready_timeout=120)
    yield s
    s.terminate()


def _pinned_clients(stack: InProcessStack) -> tuple[httpx.Client, httpx.Client, int]:
    """Two clients, each holding one keep-alive connection, both accepted by the same worker
    (/load names it; with several workers, SO_REUSEPORT picks one per connection)."""
    seen: dict[int, httpx.Client] = {}
    for _ in range(64):
        c = httpx.Client(base_url=stack.base_url, timeout=120,
                         limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))
        worker = c.get("/load").json()["worker"]
        if worker in seen:
            for other in (k for k in seen if k != worker):
                seen[other].close()
            return seen[worker], c, worker
        seen[worker] = c
    raise AssertionError("64 connections and no two on one worker")


def _post(client: httpx.Client, body: bytes, headers=CTYPE) -> httpx.Response:
    return client.post("/v1/audio/transcriptions", content=body, headers=headers)


def _error(r: httpx.Response, status: int, message: str) -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"] == message and err["code"] == status, err


def test_sdk_upload_and_a_thousand_fields_are_served(stack):
    probe, other, worker = _pinned_clients(stack)
    try:
        sdk = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="x", http_client=probe, max_retries=0)
        out = sdk.audio.transcriptions.create(model=MODEL, file=("a.wav", WAV), language="en",
                                              extra_body={"max_completion_tokens": 3})
        assert out.text and out.usage.seconds == 1
        # vLLM's bound is 1,000 fields: exactly that many is a form like any other
        extra = [_field(f"x{i}", "v") for i in range(1000 - len(BASIC))]
        r = _post(other, _body(*BASIC, *extra, _file()))
        assert r.status_code == 200, r.text
        assert r.json()["text"]
    finally:
        probe.close()
        other.close()


def test_fifty_thousand_tiny_parts_are_a_fast_400_and_the_loop_keeps_serving(stack):
    probe, attacker, worker = _pinned_clients(stack)
    try:
        # the worker's speech model is loaded before the clock starts
        assert _post(probe, _body(*BASIC, _file())).status_code == 200
        body = _body(*BASIC, *(_field(f"f{i}", "v") for i in range(50_000)), _file())
        got: dict = {}

        def upload() -> None:
            t0 = time.monotonic()
            got["response"] = _post(attacker, body)
            got["elapsed"] = time.monotonic() - t0

        t = threading.Thread(target=upload)
        t.start()
        latencies = []
        while t.is_alive() or not latencies:
            t0 = time.monotonic()
            r = probe.get("/load")
            latencies.append(time.monotonic() - t0)
            assert r.status_code == 200 and r.json()["worker"] == worker
        t.join()
        _error(got["response"], 400, "Too many fields. Maximum number of fields is 1000.")
        assert got["elapsed"] < 2.0, got["elapsed"]
        assert max(latencies) < 1.0, latencies
        # and the same worker transcribes right after
        assert _post(probe, _body(*BASIC, _file())).status_code == 200
    finally:
        probe.close()
        attacker.close()


def test_too_many_files_a_field_too_large_and_no_name(stack):
    with httpx.Client(base_url=stack.base_url, timeout=120) as c:
        _error(_post(c, _body(*BASIC, *(_file(f"f{i}") for i in range(1001)))), 400,
               "Too many files. Maximum number of files is 1000.")
        _error(_post(c, _body(*BASIC, _field("prompt", "x" * (1024 * 1024 + 1)), _file())), 400,
               "Part exceeded maximum size of 1024KB.")
        nameless = b"--%s\r\nContent-Disposition: form-data\r\n\r\nv\r\n" % B
        _error(_post(c, _body(*BASIC, nameless, _file())), 400,
               'The Content-Disposition header field "name" must be provided.')
        _error(_post(c, _body(*BASIC, _file()), {"Content-Type": "multipart/form-data"}), 400,
               "Missing boundary in multipart.")
        _error(_post(c, b"--%s\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhis" % B), 400,
               "Invalid multipart data: the body ended inside a part.")


def test_nested_multipart_part_is_400(stack):
    inner = b"--inner\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n" + WAV + b"\r\n--inner--\r\n"
    nested = (b"--%s\r\nContent-Disposition: form-data; name=\"file\"\r\nContent-Type: multipart/mixed; boundary=inner"
              b"\r\n\r\n" % B) + inner + b"\r\n"
    with httpx.Client(base_url=stack.base_url, timeout=120) as c:
        for _ in range(2):  # whichever worker answers
            _error(_post(c, _body(*BASIC, nested)), 400, "Nested multipart parts are not supported.")


def test_urlencoded_form_is_bounded_too(stack):
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    with httpx.Client(base_url=stack.base_url, timeout=120) as c:
        body = "&".join(f"f{i}=v" for i in range(1001)).encode()
        _error(_post(c, body, headers), 400, "Too many fields. Maximum number of fields is 1000.")
        # within the bounds: vLLM's answer for a form without a file part
        r = _post(c, b"model=whisper&language=en", headers)
        assert r.status_code == 400 and "file" in r.json()["error"]["param"]


def test_no_worker_restarted(stack):
    # In process there is no supervisor to restart a worker: the worker's event loop thread
    # must still be the one that started, and serve.
    assert "restarting worker" not in stack.logs()
    assert stack.thread is not None and stack.thread.is_alive()
    with httpx.Client(base_url=stack.base_url, timeout=120) as c:
        for _ in range(4):
            assert _post(c, _body(*BASIC, _file())).status_code == 200
