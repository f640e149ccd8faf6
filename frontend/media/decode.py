"""Decoding of fetched media bytes into what vLLM's MediaConnector returns, in the media pool
(never on the event loop). Every function here is a top-level function of plain arguments, so a
process pool can run it as well as a thread pool.

The decoders are vLLM's own (`vllm.multimodal.image` helpers, `AudioMediaIO`, `VideoMediaIO`,
`ImageEmbeddingMediaIO`), imported here on first use: a worker of a text-only model never
imports them (nor torch, PIL or numpy). What is ours: the limits (bytes, pixels) taken from the
MediaPolicy rather than from vLLM's environment, and the errors, as MediaError with a status.
"""

from __future__ import annotations

import binascii
from typing import Any

from vllm_pyfrontend.errors import MediaError

# A payload is the bytes of a fetched item, or a data URL's (media type, base64 text).
Payload = bytes | tuple[str, str]

_DEFAULT_IMAGE_KWARGS = {"image_mode": "RGB"}


def _merged(modality: str, defaults: dict[str, Any] | None, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """--media-io-kwargs of one modality merged with a request's, as vLLM merges them."""
    if not overrides:
        return dict(defaults or {})
    from vllm.multimodal.media.connector import MODALITY_IO_MAP
    from vllm.multimodal.media.base import MediaIO

    return MODALITY_IO_MAP.get(modality, MediaIO).merge_kwargs(defaults, overrides)


def b64_bytes(text: str, max_bytes: int, what: str) -> bytes:
    """Strict base64 (vLLM: `pybase64.b64decode(data, validate=True)`), size-checked first."""
    if max_bytes > 0 and len(text) * 3 // 4 > max_bytes + 2:
        raise MediaError(413, f"The {what} is too large: about {len(text) * 3 // 4} bytes, more than the "
                              f"limit of {max_bytes} bytes.")
    import pybase64

    try:
        return pybase64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise MediaError(400, f"The {what} is not valid base64: {e}.") from None


def _payload_bytes(payload: Payload, max_bytes: int, what: str) -> bytes:
    if isinstance(payload, tuple):
        return b64_bytes(payload[1], max_bytes, what)
    return payload


def _image_settings(kwargs: dict[str, Any]):
    """vLLM's ImageMediaIO for these kwargs (it validates them: rgba_background_color ...)."""
    from vllm.multimodal.media.image import ImageMediaIO

    try:
        return ImageMediaIO(**(_DEFAULT_IMAGE_KWARGS | kwargs))
    except (TypeError, ValueError) as e:
        raise MediaError(400, f"Invalid media_io_kwargs for images: {e}") from None


def decode_image(payload: Payload, max_bytes: int, max_pixels: int,
                 io_kwargs: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None):
    """The image as vLLM's `MediaConnector.fetch_image_async` gives it: a `MediaWithBytes`
    holding the PIL image (EXIF orientation applied, converted to the configured mode, RGB by
    default, RGBA composed on the background colour) and the encoded bytes (vLLM's processor
    hashes those)."""
    data = _payload_bytes(payload, max_bytes, "image")
    io = _image_settings(_merged("image", io_kwargs, overrides))
    from io import BytesIO

    from PIL import Image
    from vllm.multimodal.image import convert_image_mode, normalize_image, open_image, rgba_to_rgb
    from vllm.multimodal.media.base import MediaWithBytes

    try:
        image = open_image(BytesIO(data))
    except Image.DecompressionBombError as e:
        raise MediaError(413, f"The image is too large (a decompression bomb?): {e}") from None
    except Image.UnidentifiedImageError:
        raise MediaError(415, "The image could not be decoded: the data is not an image in a supported "
                              "format (PNG, JPEG, WEBP, GIF, BMP, TIFF, ...).") from None
    except OSError as e:
        raise MediaError(400, f"Failed to load image: {e}") from None
    w, h = image.size
    if max_pixels > 0 and w * h > max_pixels:
        raise MediaError(413, f"Image dimensions {w}x{h} ({w * h} pixels) exceed the maximum of "
                              f"{max_pixels} pixels.")
    try:
        image = normalize_image(image)
        image.load()
        if io.image_mode is None or image.mode == io.image_mode:
            converted = image
        elif image.mode == "RGBA" and io.image_mode == "RGB":
            converted = rgba_to_rgb(image, io.rgba_background_color)
        else:
            converted = convert_image_mode(image, io.image_mode, io.rgba_background_color)
    except Image.DecompressionBombError as e:
        raise MediaError(413, f"The image is too large (a decompression bomb?): {e}") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise MediaError(400, f"Failed to load image: {e}") from None
    io_config = None
    if converted is not image:
        io_config = {"image_mode": io.image_mode, "rgba_background_color": io.rgba_background_color}
    return MediaWithBytes(converted, data, io_config)


def decode_audio(payload: Payload, max_bytes: int, io_kwargs: dict[str, Any] | None = None,
                 overrides: dict[str, Any] | None = None):
    """(waveform, sample rate) as vLLM's `MediaConnector.fetch_audio_async` gives them: its
    AudioMediaIO decodes (torchcodec, else soundfile, else PyAV; native rate, mono float32;
    resampling is the model processor's business)."""
    data = _payload_bytes(payload, max_bytes, "audio")
    try:
        from vllm.multimodal.media.audio import AudioMediaIO

        io = AudioMediaIO(**_merged("audio", io_kwargs, overrides))
    except ValueError as e:
        raise MediaError(400, f"Invalid media_io_kwargs for audio: {e}") from None
    try:
        return io.load_bytes(data)
    except ImportError as e:
        raise MediaError(500, f"This server cannot decode audio (install soundfile or av): {e}") from None
    except ValueError as e:
        text = str(e)
        if "Maximum file size" in text:
            raise MediaError(413, f"The audio is too large: {text}") from None
        raise MediaError(400, f"Failed to load audio: {text}") from None
    except RuntimeError as e:  # a decoder's own failure on corrupt data
        raise MediaError(400, f"Failed to load audio: {e}") from None


def decode_video(payload: Payload, max_bytes: int, image_kwargs: dict[str, Any] | None = None,
                 video_kwargs: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None):
    """(frames, metadata) in a `MediaWithBytes`, as vLLM's `MediaConnector.fetch_video_async`
    gives them (its VideoMediaIO: the configured video backend, num_frames ...; a
    `data:video/jpeg;base64,<frame>,<frame>...` URL is a sequence of JPEG frames)."""
    image_io = _image_settings(_merged("image", image_kwargs, (overrides or {}).get("image")))
    try:
        from vllm.multimodal.media.video import VideoMediaIO

        io = VideoMediaIO(image_io, **_merged("video", video_kwargs, (overrides or {}).get("video")))
    except (TypeError, ValueError, KeyError) as e:
        raise MediaError(400, f"Invalid media_io_kwargs for video: {e}") from None
    try:
        if isinstance(payload, tuple):
            media_type, text = payload
            if max_bytes > 0 and len(text) * 3 // 4 > max_bytes + 2:
                raise MediaError(413, f"The video is too large: more than the limit of {max_bytes} bytes.")
            return io.load_base64(media_type, text)
        return io.load_bytes(payload)
    except MediaError:
        raise
    except ImportError as e:
        raise MediaError(500, f"This server cannot decode video: {e}") from None
    except binascii.Error as e:
        raise MediaError(400, f"The video is not valid base64: {e}.") from None
    except (ValueError, OSError, RuntimeError) as e:
        raise MediaError(400, f"Failed to load video: {e}") from None


def decode_embeds(modality: str, text: str, max_bytes: int):
    """A base64 tensor (`torch.save` or `.npy`) as vLLM's `fetch_<modality>_embedding` loads it
    (weights only; sparse tensors checked, then made dense)."""
    data = b64_bytes(text, max_bytes, f"{modality}_embeds")
    from vllm.multimodal.media.audio import AudioEmbeddingMediaIO
    from vllm.multimodal.media.image import ImageEmbeddingMediaIO
    from vllm.multimodal.media.video import VideoEmbeddingMediaIO

    io = {"image": ImageEmbeddingMediaIO, "audio": AudioEmbeddingMediaIO, "video": VideoEmbeddingMediaIO}[modality]()
    try:
        return io.load_bytes(data)
    except Exception as e:  # torch.load's errors are of many types (UnpicklingError, RuntimeError ...)
        raise MediaError(400, f"Invalid {modality}_embeds: {type(e).__name__}: {e}") from None


def read_local_file(path: str, allowed_dir: str | None, max_bytes: int) -> bytes:
    """A file:// URL's bytes, only from under the allowed directory (symlinks resolved)."""
    from pathlib import Path

    if not allowed_dir:
        raise MediaError(403, "Cannot load local files without `--allowed-local-media-path`.")
    if "\x00" in path:  # os calls raise ValueError on it
        raise MediaError(400, "The file path contains a NUL byte.")
    root = Path(allowed_dir).resolve()
    filepath = Path(path)
    try:
        resolved = filepath.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop (RuntimeError before Python 3.13)
        raise MediaError(400, f"Cannot resolve the file path {filepath}: {e}.") from None
    if root not in resolved.parents:
        raise MediaError(403, f"The file path {filepath} must be a subpath of `--allowed-local-media-path "
                              f"{root}`.")
    try:
        with open(resolved, "rb") as f:
            size = f.seek(0, 2)
            if max_bytes > 0 and size > max_bytes:
                raise MediaError(413, f"The file {filepath} is too large: {size} bytes, more than the limit "
                                      f"of {max_bytes} bytes.")
            f.seek(0)
            return f.read()
    except FileNotFoundError:
        raise MediaError(400, f"The file {filepath} does not exist.") from None
    except IsADirectoryError:
        raise MediaError(400, f"The path {filepath} is a directory, not a file.") from None
    except OSError as e:
        raise MediaError(400, f"Cannot read the file {filepath}: {e.strerror or e}.") from None
