"""Images through this frontend and through vLLM's own Python server, each in front of its own
real EngineCore on CPU with a tiny random-weight Idefics3 model (tests/e2e/tiny_idefics3.py):
the same prompt token ids (placeholders expanded by vLLM's processor), the same greedy tokens
and logprobs (the pixel values reached the engine intact), for one and several images from a
data: URL, a file under --allowed-local-media-path and an http URL of a local server,
streaming and not. The second request with an image hits the engine's prefix cache (its
blocks are keyed by the image's hash), and with one frontend worker the image goes by hash
only (vLLM's key-replicated processor cache). Bad media: a clear 4xx, then the worker serves on.
"""

from __future__ import annotations

import base64
import functools
import http.server
import io
import json
import re
import threading
from pathlib import Path

import httpx
import pytest

from tests.e2e.tiny_idefics3 import IMAGE_TOKENS, build_tiny_idefics3
from tests.e2e.tiny_model import free_port
from tests.e2e.vllm_pair import MODEL, start_pair

pytestmark = pytest.mark.real_engine

LIMIT = 2


def _png(color, size) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def mm(tmp_path_factory):
    model = build_tiny_idefics3()
    media = tmp_path_factory.mktemp("media")
    red, green, blue = _png((200, 20, 20), (40, 30)), _png((20, 200, 20), (24, 36)), _png((20, 20, 220), (32, 32))
    (media / "green.png").write_bytes(green)
    (media / "blue.png").write_bytes(blue)
    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(_Quiet, directory=str(media)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    args = [
        "--served-model-name", MODEL, "--max-model-len", "2048", "--dtype", "bfloat16",
        "--kv-cache-memory-bytes", str(64 << 20), "--max-num-seqs", "8", "--enforce-eager",
        "--block-size", "32", "--limit-mm-per-prompt", json.dumps({"image": LIMIT}),
        "--allowed-local-media-path", str(media),
    ]  # fmt: skip
    try:
        # One frontend worker: the engine's only sender, so vLLM's key-replicated processor
        # cache applies (an image sent before goes by hash only); see multimodal/model.py.
        # Our media loader refuses loopback addresses unless allowed (vLLM has no such check).
        with start_pair(model, args=args, our_args=["--allow-private-media-addresses"], workers=1) as pair:
            yield pair, {
                "data": "data:image/png;base64," + base64.b64encode(red).decode(),
                "file": (media / "green.png").as_uri(),
                "http": f"http://127.0.0.1:{port}/blue.png",
                "image_token_id": json.loads((Path(model) / "config.json").read_text())["image_token_id"],
            }
    finally:
        server.shutdown()


def _body(parts, **kw):
    return {"model": MODEL, "messages": [{"role": "user", "content": parts}], "max_tokens": 6,
            "temperature": 0, "logprobs": True, "top_logprobs": 2, "return_token_ids": True, **kw}


def _image(url):
    return {"type": "image_url", "image_url": {"url": url}}


def _post(base, body):
    return httpx.post(base + "/v1/chat/completions", json=body, timeout=120)


def _stream(base, body):
    tokens, text, lps, prompt_ids = [], "", [], []
    with httpx.stream("POST", base + "/v1/chat/completions", json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("prompt_token_ids") is not None:  # the first chunk (return_token_ids)
                prompt_ids.append(chunk["prompt_token_ids"])
            for c in chunk.get("choices") or ():
                tokens += c.get("token_ids") or []
                text += (c.get("delta") or {}).get("content") or ""
                lps += [(t["token"], t["logprob"]) for t in ((c.get("logprobs") or {}).get("content") or [])]
    return tokens, text, lps, prompt_ids


def _logprobs(choice):
    return [(t["token"], t["logprob"], [(a["token"], a["logprob"]) for a in t["top_logprobs"]])
            for t in choice["logprobs"]["content"]]


CASES = {
    "one data: image": lambda u: [_image(u["data"]), {"type": "text", "text": "What is in this image?"}],
    "file and http images": lambda u: [{"type": "text", "text": "Compare the two pictures."},
                                       _image(u["file"]), _image(u["http"])],
    "data: and file images": lambda u: [_image(u["data"]), {"type": "text", "text": "and"}, _image(u["file"])],
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_prompt_ids_tokens_and_logprobs_as_vllm(mm, case):
    pair, urls = mm
    body = _body(CASES[case](urls))
    ours, theirs = _post(pair.ours, body), _post(pair.vllm, body)
    assert ours.status_code == theirs.status_code == 200, (ours.text, theirs.text)
    a, b = ours.json(), theirs.json()
    assert a["prompt_token_ids"] == b["prompt_token_ids"]
    n_images = len([p for p in body["messages"][0]["content"] if p["type"] == "image_url"])
    # Placeholders expanded: 4 <image> tokens per image (IMAGE_TOKENS).
    assert a["prompt_token_ids"].count(urls["image_token_id"]) == IMAGE_TOKENS * n_images
    assert a["usage"] == b["usage"]
    ca, cb = a["choices"][0], b["choices"][0]
    assert ca["token_ids"] == cb["token_ids"]
    assert ca["message"]["content"] == cb["message"]["content"]
    assert ca["finish_reason"] == cb["finish_reason"]
    assert _logprobs(ca) == _logprobs(cb)

    # Streaming: the same tokens, text and logprobs, and the expanded prompt ids in the first
    # chunk only (return_token_ids), as vLLM's.
    streamed = _stream(pair.ours, body)
    assert streamed == _stream(pair.vllm, body)
    assert streamed[3] == [a["prompt_token_ids"]]


def test_different_images_give_different_logprobs(mm):
    """The pixels matter: the engine saw each image, not a placeholder of zeros."""
    pair, urls = mm
    text = {"type": "text", "text": "Describe it."}
    red = _post(pair.ours, _body([_image(urls["data"]), text])).json()
    blue = _post(pair.ours, _body([_image(urls["http"]), text])).json()
    assert red["prompt_token_ids"] == blue["prompt_token_ids"]  # same size in tokens ...
    assert _logprobs(red["choices"][0]) != _logprobs(blue["choices"][0])  # ... other pixels


def _prefix_hits(base) -> float:
    m = re.search(r"^vllm:prefix_cache_hits_total\{[^}]*\} ([0-9.e+]+)$", httpx.get(base + "/metrics").text, re.M)
    assert m, "no prefix cache metric"
    return float(m.group(1))


def test_second_request_with_the_same_image_hits_the_engine_cache(mm):
    pair, urls = mm
    # A fresh image (new hash): the first request computes it, the second finds its blocks.
    fresh = "data:image/png;base64," + base64.b64encode(_png((90, 60, 30), (20, 20))).decode()
    body = _body([_image(fresh), {"type": "text", "text": "A long question about this picture, long enough "
                                  "to fill at least two blocks of thirty-two tokens each in the cache of the engine, so that "
                                  "the second request finds the first blocks, the image in them."}])
    for base in (pair.ours, pair.vllm):
        first = _post(base, body)
        assert first.status_code == 200, first.text
        before = _prefix_hits(base)
        second = _post(base, body)
        assert second.status_code == 200, second.text
        assert second.json()["choices"][0]["token_ids"] == first.json()["choices"][0]["token_ids"]
        # Every full block before the last prompt token is a hit, the image's included.
        assert _prefix_hits(base) - before >= 32, base


def test_bad_media_get_a_clear_4xx_and_the_worker_keeps_serving(mm):
    pair, urls = mm
    text = {"type": "text", "text": "What is this?"}
    not_an_image = "data:image/png;base64," + base64.b64encode(b"this is not a png" * 8).decode()
    r = _post(pair.ours, _body([_image(not_an_image), text]))
    assert 400 <= r.status_code < 500, r.text
    assert r.json()["error"]["message"]

    too_many = [_image(urls["data"])] * (LIMIT + 1) + [text]
    ours, theirs = _post(pair.ours, _body(too_many)), _post(pair.vllm, _body(too_many))
    assert ours.status_code == theirs.status_code == 400, (ours.text, theirs.text)
    assert f"At most {LIMIT} image" in ours.json()["error"]["message"]

    outside = _post(pair.ours, _body([_image("file:///etc/hostname"), text]))
    assert outside.status_code == 403, outside.text

    # The worker serves on: images and text.
    ok = _post(pair.ours, _body([_image(urls["data"]), text]))
    assert ok.status_code == 200, ok.text
    plain = _post(pair.ours, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert plain.status_code == 200, plain.text


def test_responses_and_messages_images_as_vllm(mm):
    """The Responses API's input_image and an Anthropic image block reach the same processor:
    same prompt length and greedy text as vLLM's server for the same image."""
    pair, urls = mm
    b64 = urls["data"].split(",", 1)[1]
    chat = _post(pair.ours, _body([_image(urls["data"]), {"type": "text", "text": "What is this?"}]))
    chat_prompt = chat.json()["usage"]["prompt_tokens"]
    text_only = _post(pair.ours, _body([{"type": "text", "text": "What is this?"}])).json()["usage"]["prompt_tokens"]
    assert chat_prompt >= text_only + IMAGE_TOKENS  # the image's tokens are in
    responses = {"model": MODEL, "max_output_tokens": 6, "temperature": 0, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": urls["data"]}, {"type": "input_text", "text": "What is this?"}]}]}
    got = [httpx.post(base + "/v1/responses", json=responses, timeout=120) for base in (pair.ours, pair.vllm)]
    assert [g.status_code for g in got] == [200, 200], [g.text for g in got]
    ours, theirs = (g.json() for g in got)
    assert ours["usage"]["input_tokens"] == theirs["usage"]["input_tokens"] == chat_prompt
    assert ours["output"][-1]["content"][0]["text"] == theirs["output"][-1]["content"][0]["text"]

    messages = {"model": MODEL, "max_tokens": 6, "temperature": 0, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
        {"type": "text", "text": "What is this?"}]}]}
    got = [httpx.post(base + "/v1/messages", json=messages, timeout=120) for base in (pair.ours, pair.vllm)]
    assert [g.status_code for g in got] == [200, 200], [g.text for g in got]
    ours, theirs = (g.json() for g in got)
    assert ours["usage"]["input_tokens"] == theirs["usage"]["input_tokens"] == chat_prompt
    assert [b.get("text") for b in ours["content"]] == [b.get("text") for b in theirs["content"]]
