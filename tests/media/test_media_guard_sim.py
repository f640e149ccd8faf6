"""Media URLs in chat requests against a worker (the in-process tier, tests/inprocess.py: the
real worker and the simulated engine serving the tiny Idefics3 of tests/e2e/tiny_idefics3.py,
over loopback HTTP): a file:// URL with a NUL byte is a 400 (not a 500), and an image URL whose
host is a loopback address in a legacy or embedded form, first or after a redirect, is a 403 that
never reaches the server it names."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.tiny_idefics3 import build_tiny_idefics3
from tests.inprocess import InProcessStack
from tests.media.media_server import MediaServer

MODEL = "vision"
FILES = {"x.png": (b"\x89PNG\r\n\x1a\n not really", "image/png")}


@pytest.fixture(scope="module")
def target():
    with MediaServer(FILES) as s:
        yield s


@pytest.fixture(scope="module")
def redirector():
    with MediaServer(FILES, host="127.0.0.2") as s:
        yield s


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    allowed = tmp_path_factory.mktemp("media")
    (allowed / "x.png").write_bytes(FILES["x.png"][0])
    s = InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "2048",
                        "--served-model-name", MODEL, "--shutdown-timeout", "5", "--allowed-local-media-path",
                        str(allowed), "--allowed-private-media-networks", "127.0.0.2/32", build_tiny_idefics3()],
                       ready_timeout=120)
    s.allowed = allowed
    yield s
    s.terminate()


def _chat(c: httpx.Client, url: str) -> httpx.Response:
    return c.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what is it?"}, {"type": "image_url", "image_url": {"url": url}}]}]})


def test_file_url_with_a_nul_byte_is_400(stack):
    with httpx.Client(base_url=stack.base_url, timeout=300) as c:
        for url in (f"file://{stack.allowed}/x%00.png", f"file://{stack.allowed}/x.png%00"):
            r = _chat(c, url)
            assert r.status_code == 400, r.text
            assert "NUL byte" in r.json()["error"]["message"]


def test_loopback_in_any_form_is_403_and_never_fetched(stack, target, redirector):
    p = target.port
    urls = [f"http://{h}:{p}/files/x.png" for h in ("2130706433", "127.1", "0177.0.0.1", "0x7f.1", "127.0.0.1.",
                                                    "%31%32%37.0.0.1", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]")]
    urls += [f"http://images.example.com@2130706433:{p}/files/x.png",
             f"{redirector.base}/redirect?to=http://2130706433:{p}/files/x.png",
             f"{redirector.base}/redirect?to=http://[::ffff:127.0.0.1]:{p}/files/x.png"]
    with httpx.Client(base_url=stack.base_url, timeout=300) as c:
        for url in urls:
            r = _chat(c, url)
            assert r.status_code == 403, (url, r.text)
            assert "not allowed" in r.json()["error"]["message"]
    assert target.hits == []
    assert len(redirector.hits) == 2
