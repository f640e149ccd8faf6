"""Speech-to-text through this frontend and through vLLM's own Python server, each in front of
its own real EngineCore on CPU with a tiny random-weight Whisper (tests/e2e/tiny_whisper.py):
the official `openai` SDK's `audio.transcriptions.create` / `audio.translations.create` give
the same text and JSON (json, text, verbose_json; a language given or detected by the model;
audio past Whisper's 30 s clip split into chunks as vLLM splits it), streaming gives the same
events and joined text, and bad uploads (not audio, empty, over the size limit, an unsupported
language or format) get the same 4xx as vLLM's, after which the worker serves on. A text-only
model has no such routes on either server.
"""

from __future__ import annotations

import io
import json

import httpx
import numpy as np
import openai
import pytest

from tests.e2e.tiny_whisper import SAMPLE_RATE, build_tiny_whisper
from tests.e2e.vllm_pair import MODEL, start_pair

pytestmark = pytest.mark.real_engine

MAX_TOKENS = 6


def _wav(seconds: float, seed: int = 0, rate: int = SAMPLE_RATE) -> bytes:
    import soundfile as sf

    n = int(seconds * rate)
    audio = 0.3 * np.random.default_rng(seed).standard_normal(n)
    if seconds > 30:  # a quiet stretch near the 30 s mark: where vLLM's splitter cuts
        audio[int(28.5 * rate):int(29.5 * rate)] *= 0.01
    buf = io.BytesIO()
    sf.write(buf, audio.astype(np.float32), rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.fixture(scope="module")
def stt():
    model = build_tiny_whisper()
    args = [
        "--served-model-name", MODEL, "--max-model-len", "448", "--dtype", "float32",
        "--kv-cache-memory-bytes", str(32 << 20), "--max-num-seqs", "4", "--enforce-eager", "--block-size", "32",
    ]  # fmt: skip
    # A 2 MB upload limit on both sides (vLLM's VLLM_MAX_AUDIO_CLIP_FILESIZE_MB).
    with start_pair(model, args=args, workers=1, env={"VLLM_MAX_AUDIO_CLIP_FILESIZE_MB": "2"}) as pair:
        yield pair


def _clients(pair):
    return [openai.OpenAI(base_url=base + "/v1", api_key="x", timeout=120, max_retries=0)
            for base in (pair.ours, pair.vllm)]


EXTRA = {"max_completion_tokens": MAX_TOKENS}


def test_sdk_transcription_and_translation_same_as_vllm(stt):
    ours, theirs = _clients(stt)
    wav = _wav(1.0)
    for kw in ({"language": "en"}, {}, {"language": "de", "prompt": "hi", "temperature": 0.0}):
        a = ours.audio.transcriptions.create(model=MODEL, file=("a.wav", wav), extra_body=EXTRA, **kw)
        b = theirs.audio.transcriptions.create(model=MODEL, file=("a.wav", wav), extra_body=EXTRA, **kw)
        assert a.model_dump() == b.model_dump(), kw
        assert a.text and a.usage.seconds == 1
    # response_format="text": vLLM answers with its JSON body all the same.
    a = ours.audio.transcriptions.create(model=MODEL, file=("a.wav", wav), response_format="text",
                                         language="en", extra_body=EXTRA)
    b = theirs.audio.transcriptions.create(model=MODEL, file=("a.wav", wav), response_format="text",
                                           language="en", extra_body=EXTRA)
    assert a == b and json.loads(a)["text"]
    # Whisper translates (to English); no usage in vLLM's translation response.
    a = ours.audio.translations.create(model=MODEL, file=("a.wav", _wav(1.0, seed=1)), extra_body=EXTRA)
    b = theirs.audio.translations.create(model=MODEL, file=("a.wav", _wav(1.0, seed=1)), extra_body=EXTRA)
    assert a.model_dump() == b.model_dump() and a.text


def test_verbose_json_and_long_audio_same_as_vllm(stt):
    ours, theirs = _clients(stt)
    # verbose_json: segments between timestamp tokens, logprob averages, compression ratios.
    kw = {"model": MODEL, "file": ("a.wav", _wav(1.0)), "language": "en", "response_format": "verbose_json",
          "timestamp_granularities": ["segment"], "extra_body": {"max_completion_tokens": 16}}
    a = ours.audio.transcriptions.create(**kw)
    b = theirs.audio.transcriptions.create(**kw)
    assert a.model_dump() == b.model_dump()
    assert a.duration == 1.0 and a.language == "en" and a.segments and a.segments[0].tokens
    # 34 s: past Whisper's 30 s clip, two chunks split at the quiet stretch, texts joined.
    long = _wav(34.0, seed=2)
    kw = {"model": MODEL, "file": ("long.wav", long), "language": "en", "extra_body": {"max_completion_tokens": 3}}
    a = ours.audio.transcriptions.create(**kw)
    b = theirs.audio.transcriptions.create(**kw)
    assert a.model_dump() == b.model_dump()
    assert a.usage.seconds == 34 and " " in a.text  # two chunks' texts joined by a space


def _sse(base: str, path: str, data: dict, wav: bytes) -> list[dict]:
    events = []
    with httpx.stream("POST", base + path, files={"file": ("a.wav", wav)}, data=data, timeout=120) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
    return events


def _strip(events):
    # The ids and timestamps are each server's own.
    return [e if isinstance(e, str) else {k: v for k, v in e.items() if k not in ("id", "created")} for e in events]


def test_streaming_same_events_and_text_as_vllm(stt):
    ours, theirs = _clients(stt)
    wav = _wav(1.0)
    texts = []
    for client in (ours, theirs):
        stream = client.audio.transcriptions.create(model=MODEL, file=("a.wav", wav), language="en", stream=True,
                                                    extra_body=EXTRA)
        # vLLM's events are chat-chunk style (`choices[].delta.content`), not OpenAI's.
        texts.append("".join(c["delta"].get("content") or "" for ev in stream for c in ev.choices))
    plain = ours.audio.transcriptions.create(model=MODEL, file=("a.wav", wav), language="en", extra_body=EXTRA)
    assert texts[0] == texts[1] == plain.text and plain.text

    data = {"model": MODEL, "language": "en", "stream": "true", "stream_include_usage": "true",
            "stream_continuous_usage_stats": "true", "max_completion_tokens": str(MAX_TOKENS)}
    for path in ("/v1/audio/transcriptions", "/v1/audio/translations"):
        a, b = _sse(stt.ours, path, data, wav), _sse(stt.vllm, path, data, wav)
        # How many tokens one event carries is timing (vLLM's output handler merges the
        # deltas a slow reader has not taken yet): compare the joined text, the finish of the
        # last content event and the usage event, field for field.
        assert _text(a) == _text(b) and _text(a), path
        assert _strip(a[-2:]) == _strip(b[-2:]), path
        last_a, last_b = a[-3]["choices"][0], b[-3]["choices"][0]
        assert (last_a["finish_reason"], last_a["stop_reason"]) == (last_b["finish_reason"], last_b["stop_reason"])
        assert a[-1] == "[DONE]" and a[-2]["usage"]["completion_tokens"] == MAX_TOKENS
        assert all(e["object"] == ("transcription.chunk" if "transcr" in path else "translation.chunk")
                   and set(e) == set(f) for e, f in zip(a[:-1], [b[0]] * (len(a) - 1)))
        for e in a[:-2]:  # continuous usage on every content event
            assert e["usage"]["total_tokens"] == e["usage"]["prompt_tokens"] + e["usage"]["completion_tokens"]


def _text(events):
    return "".join(c["delta"].get("content") or "" for e in events if isinstance(e, dict) for c in e["choices"])


def test_bad_uploads_same_status_as_vllm_and_the_worker_serves_on(stt):
    wav = _wav(1.0)
    big = wav[:44] + bytes(int(2.2 * 1024 * 1024))  # over the 2 MB limit
    cases = [
        ({"file": ("a.wav", b"this is not audio")}, {}),
        ({"file": ("a.wav", b"")}, {}),
        ({"file": ("a.wav", big)}, {}),
        ({"file": ("a.wav", b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(range(40)))}, {}),  # a broken header
        ({"file": ("a.wav", wav)}, {"language": "xx"}),
        ({"file": ("a.wav", wav)}, {"response_format": "srt"}),
        ({"file": ("a.wav", wav)}, {"response_format": "bogus"}),
        ({"file": ("a.wav", wav)}, {"response_format": "verbose_json", "stream": "true"}),
        ({"file": ("a.wav", wav)}, {"temperature": "warm"}),
        ({"file": ("a.wav", wav)}, {"stream_include_usage": "true"}),
        ({"file": ("a.wav", wav)}, {"model": "nope"}),
        (None, {}),  # no file
    ]
    for files, data in cases:
        form = {"model": MODEL, "language": "en", "max_completion_tokens": "2", **data}
        a = httpx.post(stt.ours + "/v1/audio/transcriptions", files=files, data=form, timeout=60)
        b = httpx.post(stt.vllm + "/v1/audio/transcriptions", files=files, data=form, timeout=60)
        assert a.status_code == b.status_code and 400 <= a.status_code < 500, (data, a.text, b.text)
        assert a.json()["error"]["code"] == a.status_code
        if a.status_code == 400 and "validation error" not in b.text:
            assert a.json()["error"]["message"] == b.json()["error"]["message"], (data, a.text, b.text)
    r = openai.OpenAI(base_url=stt.ours + "/v1", api_key="x", max_retries=0).audio.transcriptions.create(
        model=MODEL, file=("a.wav", wav), language="en", extra_body=EXTRA)
    assert r.text


def test_text_only_model_has_no_speech_routes(tiny_pair):
    wav = _wav(0.5)
    for path in ("/v1/audio/transcriptions", "/v1/audio/translations"):
        a = httpx.post(tiny_pair.ours + path, files={"file": ("a.wav", wav)}, data={"model": MODEL}, timeout=30)
        b = httpx.post(tiny_pair.vllm + path, files={"file": ("a.wav", wav)}, data={"model": MODEL}, timeout=30)
        assert a.status_code == b.status_code == 404, (a.text, b.text)
