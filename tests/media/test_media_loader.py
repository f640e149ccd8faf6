"""frontend/media: media URLs to what vLLM's own MediaConnector gives (same mode, size and
pixels; same waveform and rate; same frames; same tensor), and bad media refused with a clear
MediaError and the right status, from a real local HTTP server. No engine."""

from __future__ import annotations

import asyncio
import base64
import io
import math
import struct
import subprocess
import sys
import wave
import zlib

import pytest

from tests.media.media_server import MediaServer
from vllm_pyfrontend.media import MediaError, MediaLoader, MediaPolicy, check_item_counts

np = pytest.importorskip("numpy")
Image = pytest.importorskip("PIL.Image")
pytest.importorskip("vllm")


# -- test media ----------------------------------------------------------------------------------

def _png(image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


def _noise(mode: str, size=(37, 23), seed=0):
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    arr = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    return Image.fromarray(arr[..., 0] if channels == 1 else arr, mode)


def _rgba_png() -> bytes:  # converted to RGB on white, as vLLM does
    return _png(_noise("RGBA"))


def _jpeg_rotated() -> bytes:  # EXIF orientation 6: vLLM turns the pixels upright
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    _noise("RGB", seed=1).save(buf, "JPEG", exif=exif.tobytes())
    return buf.getvalue()


def _palette_png() -> bytes:  # P mode with a transparent index
    image = _noise("RGB", seed=2).convert("P")
    buf = io.BytesIO()
    image.save(buf, "PNG", transparency=0)
    return buf.getvalue()


def _bomb_png(width=20000, height=20000) -> bytes:
    """A tiny file whose header claims width x height pixels (a decompression bomb)."""
    data = bytearray(_png(Image.new("L", (1, 1))))
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def _wav(rate=16000, seconds=0.25, channels=1) -> bytes:
    n = int(rate * seconds)
    frames = bytearray()
    for i in range(n):
        v = int(12000 * math.sin(2 * math.pi * 440 * i / rate))
        frames += struct.pack("<h", v) * channels
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(frames))
    return buf.getvalue()


def _avi(frames=6, size=(32, 24)) -> bytes:
    """A small MJPEG AVI clip (OpenCV, which vLLM's default video loader reads with)."""
    import os
    import tempfile

    cv2 = pytest.importorskip("cv2")
    fd, path = tempfile.mkstemp(suffix=".avi")
    os.close(fd)
    try:
        writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 4, size)
        rng = np.random.default_rng(5)
        for _ in range(frames):
            writer.write(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
        writer.release()
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)


def _data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


FILES = {
    "rgba.png": (_rgba_png(), "image/png"),
    "rotated.jpg": (_jpeg_rotated(), "image/jpeg"),
    "palette.png": (_palette_png(), "image/png"),
    "text.png": (b"this is not an image, whatever its name says\n" * 20, "image/png"),
    "truncated.png": (_png(_noise("RGB", (64, 64), seed=3))[:2000], "image/png"),
    "bomb.png": (_bomb_png(), "image/png"),
    "tone.wav": (_wav(), "audio/wav"),
    "stereo.wav": (_wav(rate=22050, channels=2), "audio/wav"),
    "clip.avi": (_avi(), "video/x-msvideo"),
}


@pytest.fixture(scope="module")
def server():
    with MediaServer(FILES) as s:
        yield s


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("media")
    allowed = root / "allowed"
    allowed.mkdir()
    for name, (body, _) in FILES.items():
        (allowed / name).write_bytes(body)
    (root / "secret.png").write_bytes(FILES["rgba.png"][0])
    (allowed / "escape.png").symlink_to(root / "secret.png")
    return root


def _policy(media_dir=None, **kw) -> MediaPolicy:
    kw.setdefault("allowed_private_networks", ["127.0.0.1/32"])  # the local test server
    if media_dir is not None:
        kw.setdefault("allowed_local_media_path", str(media_dir / "allowed"))
    return MediaPolicy.from_env(**kw)


@pytest.fixture
async def loader(media_dir):
    ld = MediaLoader(_policy(media_dir))
    yield ld
    await ld.close()


@pytest.fixture
async def vllm_connector(media_dir, monkeypatch):
    """vLLM's own MediaConnector, with a fresh HTTP client on this test's loop."""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    from vllm.connections import HTTPConnection
    from vllm.multimodal.media import MediaConnector

    conn = HTTPConnection()
    yield lambda **kw: MediaConnector(connection=conn, allowed_local_media_path=str(media_dir / "allowed"), **kw)
    if conn._async_client is not None:
        await conn._async_client.close()


def _urls(server, media_dir, name: str) -> list[str]:
    body, mime = FILES[name]
    return [_data_url(body, mime), f"{server.base}/files/{name}", f"file://{media_dir / 'allowed' / name}"]


def _same_image(ours, theirs) -> None:
    assert type(ours).__name__ == type(theirs).__name__ == "MediaWithBytes"
    assert ours.media.mode == theirs.media.mode
    assert ours.media.size == theirs.media.size
    assert ours.media.tobytes() == theirs.media.tobytes()
    assert ours.original_bytes == theirs.original_bytes
    assert ours.io_config == theirs.io_config


# -- same objects as vLLM's MediaConnector ----------------------------------------------------------

@pytest.mark.parametrize("name", ["rgba.png", "rotated.jpg", "palette.png"])
async def test_images_are_vllms(server, media_dir, loader, vllm_connector, name):
    connector = vllm_connector()
    for url in _urls(server, media_dir, name):
        ours = await loader.fetch_image(url)
        _same_image(ours, await connector.fetch_image_async(url))
        plain = await loader.load_image(url)
        assert isinstance(plain, Image.Image) and plain.mode == "RGB"
    upright = await loader.load_image(_urls(server, media_dir, "rotated.jpg")[0])
    assert upright.size == (23, 37)  # EXIF orientation applied, as vLLM does


async def test_image_mode_from_media_io_kwargs_is_vllms(server, media_dir, vllm_connector):
    kwargs = {"image": {"image_mode": None}}
    ld = MediaLoader(_policy(media_dir, media_io_kwargs=kwargs))
    try:
        url = _urls(server, media_dir, "rgba.png")[1]
        ours = await ld.fetch_image(url)
        assert ours.media.mode == "RGBA"
        _same_image(ours, await vllm_connector(media_io_kwargs=kwargs).fetch_image_async(url))
        # a request's own media_io_kwargs win over the flag's, as in vLLM
        over = await ld.load_image(url, io_kwargs={"image": {"image_mode": "L"}})
        assert over.mode == "L"
    finally:
        await ld.close()


@pytest.mark.parametrize("name", ["tone.wav", "stereo.wav"])
async def test_audio_is_vllms(server, media_dir, loader, vllm_connector, name):
    pytest.importorskip("soundfile")
    connector = vllm_connector()
    for url in _urls(server, media_dir, name):
        wave_, rate = await loader.load_audio(url)
        ref_wave, ref_rate = await connector.fetch_audio_async(url)
        assert rate == ref_rate
        assert wave_.dtype == ref_wave.dtype and wave_.shape == ref_wave.shape
        assert np.array_equal(wave_, ref_wave)
    assert rate == (16000 if name == "tone.wav" else 22050) and wave_.ndim == 1
    body = FILES[name][0]
    same, _ = await loader.load_input_audio(base64.b64encode(body).decode(), "wav")
    assert np.array_equal(same, wave_)


async def test_jpeg_frame_video_is_vllms(media_dir, vllm_connector):
    frames = []
    for seed in range(3):
        buf = io.BytesIO()
        _noise("RGB", (16, 12), seed=seed).save(buf, "JPEG")
        frames.append(base64.b64encode(buf.getvalue()).decode())
    url = "data:video/jpeg;base64," + ",".join(frames)
    kwargs = {"video": {"num_frames": 2}}
    ld = MediaLoader(_policy(media_dir, media_io_kwargs=kwargs))
    try:
        ours = await ld.fetch_video(url)
        theirs = await vllm_connector(media_io_kwargs=kwargs).fetch_video_async(url)
        (f1, m1), (f2, m2) = ours.media, theirs.media
        assert f1.shape == f2.shape == (2, 12, 16, 3) and np.array_equal(f1, f2)
        assert m1 == m2
        assert ours.original_bytes == theirs.original_bytes
    finally:
        await ld.close()


async def test_video_is_vllms(server, media_dir, vllm_connector):
    kwargs = {"video": {"num_frames": 4}}
    ld = MediaLoader(_policy(media_dir, media_io_kwargs=kwargs))
    connector = vllm_connector(media_io_kwargs=kwargs)
    try:
        for url in _urls(server, media_dir, "clip.avi"):
            ours = await ld.fetch_video(url)
            theirs = await connector.fetch_video_async(url)
            (f1, m1), (f2, m2) = ours.media, theirs.media
            assert f1.shape == f2.shape == (4, 24, 32, 3) and np.array_equal(f1, f2)
            assert m1 == m2 and m1["total_num_frames"] == 6
            assert ours.original_bytes == theirs.original_bytes
        frames, meta = await ld.load_video(url, io_kwargs={"video": {"num_frames": 2}})  # a request's own
        assert frames.shape[0] == 2 and meta["frames_indices"] == [0, 5]
        await _refused(ld, _data_url(b"not a video at all", "video/mp4"), 400, "video", load=ld.load_video)
    finally:
        await ld.close()


async def test_image_embeds_are_vllms(loader, vllm_connector):
    torch = pytest.importorskip("torch")
    tensor = torch.arange(24, dtype=torch.float16).reshape(2, 3, 4)
    buf = io.BytesIO()
    torch.save(tensor, buf)
    b64 = base64.b64encode(buf.getvalue()).decode()
    ours = await loader.load_image_embeds(b64)
    theirs = await vllm_connector().fetch_image_embedding_async(b64)
    assert ours.dtype == theirs.dtype and torch.equal(ours, theirs)
    npy = io.BytesIO()
    np.save(npy, np.ones((2, 5), dtype=np.float32))
    assert (await loader.load_image_embeds(base64.b64encode(npy.getvalue()).decode())).shape == (2, 5)
    with pytest.raises(MediaError) as e:
        await loader.load_image_embeds(base64.b64encode(b"not a tensor").decode())
    assert e.value.status == 400 and "image_embeds" in e.value.message


# -- bad media ----------------------------------------------------------------------------------

async def _refused(loader: MediaLoader, url: str, status: int, *words: str, load=None) -> MediaError:
    with pytest.raises(MediaError) as e:
        await (load or loader.load_image)(url)
    err = e.value
    assert err.status == status, err.message
    for w in words:
        assert w in err.message, err.message
    return err


async def test_not_an_image_truncated_and_a_bomb(server, media_dir, loader):
    for url in _urls(server, media_dir, "text.png"):
        await _refused(loader, url, 415, "not an image")
    for url in _urls(server, media_dir, "truncated.png"):
        await _refused(loader, url, 400, "truncated")
    for url in _urls(server, media_dir, "bomb.png"):
        await _refused(loader, url, 413, "400000000 pixels", "decompression bomb")
    small = MediaLoader(_policy(media_dir, max_image_pixels=500))  # our own limit, not PIL's
    try:
        await _refused(small, f"{server.base}/files/rgba.png", 413, "37x23 (851 pixels)", "maximum of 500")
    finally:
        await small.close()
    await _refused(loader, _data_url(b"RIFF....WAVEjunk", "audio/wav"), 400, "audio", load=loader.load_audio)


async def test_private_and_link_local_addresses_are_refused_unless_allowed(server, media_dir):
    port = server.port
    strict = MediaLoader(_policy(media_dir, allowed_private_networks=[]))
    open_ = MediaLoader(_policy(media_dir, allowed_private_networks=[], allow_private_addresses=True,
                                fetch_timeout_s=0.5))
    try:
        for url in (f"http://127.0.0.1:{port}/files/rgba.png", f"http://localhost:{port}/files/rgba.png",
                    "http://169.254.169.254/latest/meta-data/", "http://[::1]/x.png", "http://10.1.2.3/x.png",
                    "http://[::ffff:127.0.0.1]/x.png", "http://0.0.0.0/x.png", "http://[2002:7f00:1::]/x.png",
                    "http://[64:ff9b::a9fe:a9fe]/x.png", "http://224.0.0.1/x.png"):
            await _refused(strict, url, 403, "not allowed")
        await _refused(strict, f"http://2130706433:{port}/files/rgba.png", 403, "(127.0.0.1)")  # never fetched
        assert (await open_.load_image(f"http://127.0.0.1:{port}/files/rgba.png")).size == (37, 23)
        assert strict.policy.address_allowed("93.184.215.14") and strict.policy.address_allowed("2606:4700::1111")
        with pytest.raises(MediaError) as e:  # allowed: tried (and fails to connect or times out)
            await open_.load_image("http://169.254.169.254/latest/meta-data/")
        assert e.value.status == 400
    finally:
        await strict.close()
        await open_.close()


async def test_domains_and_redirects(server, media_dir, loader):
    base = server.base
    only = MediaLoader(_policy(media_dir, allowed_media_domains=["images.example.com"]))
    try:
        await _refused(only, f"{base}/files/rgba.png", 403, "allowed domains", "127.0.0.1")
    finally:
        await only.close()
    await _refused(loader, f"{base}/loop", 400, "redirect")
    # a redirect to another server is checked like the first URL (address and domain)
    for target in ("http://169.254.169.254/latest/meta-data/", "http://127.0.0.2/x.png", "http://10.0.0.1/x.png"):
        await _refused(loader, f"{base}/redirect?to={target}", 403, "not allowed")
    await _refused(loader, f"{base}/redirect?to=file:///etc/passwd", 403, "only http and https")
    # a redirect inside the allowed server is followed
    ok = await loader.load_image(f"{base}/redirect?to=/files/rgba.png")
    assert ok.size == (37, 23)
    no_redirects = MediaLoader(_policy(media_dir, max_redirects=0))
    try:
        await _refused(no_redirects, f"{base}/redirect?to=/files/rgba.png", 400, "not followed")
    finally:
        await no_redirects.close()
    await _refused(loader, f"{base}/missing", 400, "HTTP 404")


async def test_time_and_size_limits_and_the_loop_keeps_serving(server, media_dir):
    ld = MediaLoader(_policy(media_dir, fetch_timeout_s=2.0, max_bytes=4096))
    try:
        await ld.load_image(_data_url(FILES["rgba.png"][0], "image/png"))  # decoders imported
        hanging = asyncio.ensure_future(ld.load_image(f"{server.base}/hang"))
        # while one fetch hangs, others are served (nothing blocks the event loop)
        quick = await ld.load_image(_data_url(FILES["rgba.png"][0], "image/png"))
        assert quick.size == (37, 23) and not hanging.done()
        with pytest.raises(MediaError) as e:
            await hanging
        assert e.value.status == 400 and "Timed out" in e.value.message
        big = _png(_noise("RGB", (128, 128), seed=4))
        assert len(big) > 4096
        server.files["big.png"] = (big, "image/png")
        await _refused(ld, f"{server.base}/files/big.png", 413, "too large", "4096")  # Content-Length
        await _refused(ld, f"{server.base}/endless", 413, "too large")  # chunked, no length
        await _refused(ld, _data_url(big, "image/png"), 413, "too large")
        (media_dir / "allowed" / "big.png").write_bytes(big)
        await _refused(ld, f"file://{media_dir / 'allowed' / 'big.png'}", 413, "too large")
        # and after all that, the loader still works
        assert (await ld.load_image(f"{server.base}/files/rgba.png")).size == (37, 23)
    finally:
        await ld.close()


async def test_local_files_only_under_the_allowed_path(server, media_dir, loader):
    await _refused(loader, f"file://{media_dir / 'secret.png'}", 403, "allowed-local-media-path")
    await _refused(loader, f"file://{media_dir / 'allowed' / '..' / 'secret.png'}", 403, "subpath")
    await _refused(loader, f"file://{media_dir / 'allowed' / 'escape.png'}", 403, "subpath")  # symlink out
    await _refused(loader, f"file://{media_dir / 'allowed' / 'nope.png'}", 400, "does not exist")
    nopath = MediaLoader(_policy(None))
    try:
        await _refused(nopath, f"file://{media_dir / 'allowed' / 'rgba.png'}", 403,
                       "without `--allowed-local-media-path`")
    finally:
        await nopath.close()


async def test_malformed_urls(loader):
    await _refused(loader, "data:image/png;base64", 400, "missing ','")
    await _refused(loader, "data:image/png,plain", 400, "Only base64")
    await _refused(loader, "data:image/png;base64,!!!not-base64!!!", 400, "not valid base64")
    await _refused(loader, "ftp://example.com/x.png", 400, "HTTP, data or file")
    await _refused(loader, "", 400, "non-empty")


def test_item_counts_use_vllms_words():
    check_item_counts({"image": 2, "video": 0}, {"image": 2})
    check_item_counts({"audio": 999}, {})  # a modality not named: 999
    with pytest.raises(MediaError) as e:
        check_item_counts({"image": 3}, {"image": 2})
    assert e.value.status == 400
    assert e.value.message == ("At most 2 image(s) may be provided in one prompt. "
                               "Set `--limit-mm-per-prompt` to increase this limit.")
    with pytest.raises(MediaError) as e:  # more than the model itself takes: no hint
        check_item_counts({"image": 2}, {}, supported={"image": 1})
    assert e.value.message == "At most 1 image(s) may be provided in one prompt."
    with pytest.raises(MediaError) as e:
        check_item_counts({"video": 1}, {"video": 0})
    assert "At most 0 video(s)" in e.value.message


def test_flags_reach_the_policy(tmp_path):
    from vllm_pyfrontend.supervisor.cli import parse_args

    opts = parse_args(["--engine", "sim", "--limit-mm-per-prompt", '{"image": 2, "video": {"count": 0}}',
                       "--media-io-kwargs", '{"video": {"num_frames": 8}}', "--allowed-media-domains",
                       "a.example", "b.example", "--allowed-local-media-path", str(tmp_path),
                       "--mm-workers", "3", "--allowed-private-media-networks", "10.0.0.0/8", str(tmp_path)])
    # vLLM's flags reach the engine too (its profiling and encoder cache use the limits)
    assert "--limit-mm-per-prompt" in opts.engine_args and "--media-io-kwargs" in opts.engine_args
    assert "--mm-workers" not in opts.engine_args
    policy = MediaPolicy.from_config(opts.policy)
    assert policy.limit_mm_per_prompt == {"image": 2, "video": 0}
    assert policy.media_io_kwargs == {"video": {"num_frames": 8}}
    assert policy.allowed_media_domains == ["a.example", "b.example"]
    assert policy.allowed_local_media_path == str(tmp_path) and policy.mm_workers == 3
    assert policy.address_allowed("10.9.8.7") and not policy.address_allowed("192.168.1.1")
    assert policy.max_image_pixels == 178_956_970 and policy.timeout_for("video") == 30
    # the drop-in path: vLLM's jsonified serve args, under the same names
    from vllm_pyfrontend.config import WorkerPolicy

    dropin = MediaPolicy.from_config(WorkerPolicy.from_mapping({
        "limit_mm_per_prompt": {"image": {"count": 3, "width": 64}}, "media_io_kwargs": {},
        "allowed_media_domains": None, "allowed_local_media_path": ""}))
    assert dropin.limit_mm_per_prompt == {"image": 3} and dropin.allowed_local_media_path is None
    assert dropin.allowed_media_domains is None and dropin.media_io_kwargs == {}
    for bad in (["--limit-mm-per-prompt", "{bad"], ["--limit-mm-per-prompt", '{"image": -1}'],
                ["--allowed-local-media-path", str(tmp_path / "none")]):
        with pytest.raises(SystemExit):
            parse_args(["--engine", "sim", *bad, str(tmp_path)])


def test_text_only_workers_do_not_import_heavy_libraries():
    code = ("import sys\nfrom vllm_pyfrontend.media import MediaLoader, MediaPolicy\n"
            "MediaLoader(MediaPolicy.from_env())\n"
            "print(sorted(m for m in ('torch', 'transformers', 'PIL', 'numpy', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


async def test_where_vllm_raises_a_server_error_we_answer_4xx(server, media_dir, loader, vllm_connector):
    """vLLM's MediaConnector raises PIL's DecompressionBombError and a RuntimeError (neither a
    ValueError, so not a 400 there) for a bomb and for file:// without an allowed path; it
    fetches from link-local addresses. Here: 413, 403, 403."""
    bomb = _data_url(FILES["bomb.png"][0], "image/png")
    with pytest.raises(Image.DecompressionBombError):
        await vllm_connector().fetch_image_async(bomb)
    await _refused(loader, bomb, 413, "decompression bomb")
    from vllm.multimodal.media import MediaConnector

    local = f"file://{media_dir / 'allowed' / 'rgba.png'}"
    with pytest.raises(RuntimeError):
        await MediaConnector().fetch_image_async(local)
    nopath = MediaLoader(_policy(None))
    try:
        await _refused(nopath, local, 403, "allowed-local-media-path")
        # vLLM has no address check at all (its allow-list is by domain name only)
        await _refused(nopath, "http://169.254.169.254/latest/meta-data/", 403, "not allowed")
    finally:
        await nopath.close()
