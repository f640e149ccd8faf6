"""The speech routes' form parsing (vLLM's TranscriptionRequest / TranslationRequest fields and
checks), the bounded multipart read, and the audio chunking (vLLM's split points and offsets)."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
from aiohttp import FormData, web
from aiohttp.test_utils import TestClient, TestServer

from vllm_pyfrontend.api.speech.form import FormError, check_request, parse_form
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.api.speech.routes import read_form

WAV = ("a.wav", b"RIFF....")


def test_fields_and_defaults():
    req = parse_form("transcribe", [("file", WAV), ("model", "m"), ("language", "en"), ("temperature", "0.5"),
                                    ("stream", "true"), ("stream_include_usage", "1"), ("top_k", "5"),
                                    ("max_completion_tokens", "7"), ("timestamp_granularities[]", "segment"),
                                    ("timestamp_granularities[]", "word"), ("vllm_xargs", '{"a": 1}'),
                                    ("prompt", ""), ("seed", ""), ("unknown_field", "x")])
    assert (req.file, req.filename, req.model, req.language) == (b"RIFF....", "a.wav", "m", "en")
    assert req.temperature == 0.5 and req.stream and req.stream_include_usage and req.top_k == 5
    assert req.max_completion_tokens == 7 and req.timestamp_granularities == ["segment", "word"]
    assert req.vllm_xargs == {"a": 1}
    assert req.prompt == "" and req.seed is None  # empty fields take the default
    d = parse_form("translate", [("file", WAV)])
    assert (d.response_format, d.temperature, d.stream, d.language, d.frequency_penalty) == ("json", 0.0, False, None, 0.0)
    # translations have no timestamp_granularities: ignored like any unknown field
    assert parse_form("translate", [("file", WAV), ("timestamp_granularities[]", "bogus")]).timestamp_granularities == []


@pytest.mark.parametrize("fields, param", [
    ([], "body.file"),
    ([("file", "just a string")], "file"),
    ([("file", WAV), ("temperature", "warm")], "body.temperature"),
    ([("file", WAV), ("stream", "maybe")], "body.stream"),
    ([("file", WAV), ("top_k", "1.5")], "body.top_k"),
    ([("file", WAV), ("response_format", "xml")], "body.response_format"),
    ([("file", WAV), ("timestamp_granularities[]", "char")], "body.0"),
    ([("file", WAV), ("vllm_xargs", "{bad")], "vllm_xargs"),
    ([("file", WAV), ("stream_include_usage", "true")], "stream_include_usage"),
    ([("file", WAV), ("stream_continuous_usage_stats", "true"), ("stream", "false")], "stream_continuous_usage_stats"),
])
def test_refused_fields(fields, param):
    with pytest.raises(FormError) as e:
        parse_form("transcribe", fields)
    assert e.value.param == param


def test_response_format_per_task_and_checks():
    assert parse_form("transcribe", [("file", WAV), ("response_format", "diarized_json")]).response_format == "diarized_json"
    with pytest.raises(FormError):
        parse_form("translate", [("file", WAV), ("response_format", "diarized_json")])
    kw = {"supports_verbose": True, "supports_diarized": False, "model": "m"}
    check_request(parse_form("transcribe", [("file", WAV), ("response_format", "verbose_json")]), **kw)
    for fields, message in [
        ([("response_format", "srt")], "Currently only support response_format"),
        ([("response_format", "diarized_json")], "Currently do not support diarized_json for m"),
        ([("response_format", "verbose_json"), ("stream", "true")], "verbose_json format doesn't support streaming"),
        ([("stream", "true"), ("use_beam_search", "true")], "Streaming is not currently supported with beam search"),
    ]:
        with pytest.raises(FormError, match=message):
            check_request(parse_form("transcribe", [("file", WAV), *fields]), **kw)
    with pytest.raises(FormError, match="verbose_json for m"):
        check_request(parse_form("transcribe", [("file", WAV), ("response_format", "verbose_json")]),
                      supports_verbose=False, supports_diarized=False, model="m")


async def test_multipart_read_is_bounded():
    got = {}

    async def handler(request):
        try:
            got["fields"] = await read_form(request, limit=1000, body_limit=4000)
        except APIError as e:
            got["fields"] = (e.status, e.message, e.param)
        return web.Response()

    app = web.Application()
    app.router.add_post("/", handler)
    async with TestClient(TestServer(app)) as client:
        form = FormData()
        form.add_field("model", "m")
        form.add_field("file", b"x" * 999, filename="a.wav")
        form.add_field("language", "en")
        assert (await client.post("/", data=form)).status == 200
        assert got["fields"] == [("model", "m"), ("file", ("a.wav", b"x" * 999)), ("language", "en")]
        # past the file limit: vLLM's 400 as soon as it is past
        form = FormData()
        form.add_field("file", b"x" * 1500, filename="a.wav")
        assert (await client.post("/", data=form)).status == 200
        assert got["fields"] == (400, f"Maximum file size exceeded (parameter=audio_filesize_mb, value={1500 / 2**20})",
                                 "audio_filesize_mb")
        # past the body limit in small fields
        form = FormData(default_to_multipart=True)
        for i in range(10):
            form.add_field(f"f{i}", "y" * 500)
        assert (await client.post("/", data=form)).status == 200
        assert got["fields"][0] == 413
        # not multipart: no fields (then "file: Field required", as vLLM)
        assert (await client.post("/", json={"file": "x"})).status == 200
        assert got["fields"] == []


def test_speech_modules_import_no_heavy_libraries():
    code = (
        "import sys\n"
        "import vllm_pyfrontend.server.app, vllm_pyfrontend.api.speech.routes, vllm_pyfrontend.api.speech.openapi\n"
        "print(sorted(m for m in ('torch', 'transformers', 'vllm', 'soundfile') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _wav(seconds: float, rate: int = 16000) -> bytes:
    import soundfile as sf

    audio = 0.3 * np.random.default_rng(0).standard_normal(int(seconds * rate))
    audio[int(3.4 * rate):int(3.6 * rate)] *= 0.001  # a quiet spot for the splitter
    buf = io.BytesIO()
    sf.write(buf, audio.astype(np.float32), rate, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def test_chunking_as_vllm():
    from vllm.config.speech_to_text import SpeechToTextConfig
    from vllm.multimodal.audio import split_audio

    from vllm_pyfrontend.api.speech.model import SpeechModel

    sm = SpeechModel(mm=None)
    cfg = SpeechToTextConfig(sample_rate=16000, max_audio_clip_s=4, overlap_chunk_second=1)
    sm._configs["transcribe"] = cfg
    data = _wav(9.0)
    chunks, duration = sm.decode_and_chunk(data, "transcribe")
    assert duration == 9.0
    import soundfile as sf

    y, _ = sf.read(io.BytesIO(data), dtype="float32")
    expected = split_audio(audio_data=y, sample_rate=16000, max_clip_duration_s=4, overlap_duration_s=1,
                           min_energy_window_size=cfg.min_energy_split_window_size)
    assert len(chunks) == len(expected) >= 3
    for a, b in zip(chunks, expected):
        np.testing.assert_array_equal(a, b)
    offsets = sm.chunk_offsets(chunks, "transcribe")
    assert offsets[0] == 0.0 and offsets[1] == len(chunks[0]) / 16000
    assert all(b > a for a, b in zip(offsets, offsets[1:]))
    # short audio: one chunk; no chunking when the clip length is unset
    assert len(sm.decode_and_chunk(_wav(3.0), "transcribe")[0]) == 1
    sm._configs["transcribe"] = SpeechToTextConfig(sample_rate=16000, max_audio_clip_s=None)
    assert len(sm.decode_and_chunk(data, "transcribe")[0]) == 1
    for bad in (b"", b"not audio at all"):
        with pytest.raises(ValueError, match="Invalid or unsupported audio file"):
            sm.decode_and_chunk(bad, "transcribe")
