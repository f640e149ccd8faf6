"""PLACEHOLDER (branch issue12b): the minimal media loader the multimodal processing needs
until the real `frontend/media` package (issue 12, media fetching, decoding and safety) is
merged over it. Same API, a subset of it: data: URLs, file:// under
--allowed-local-media-path, plain http(s) GET with aiohttp; decoding with vLLM's own media IO
classes, in the executor. No address, size, redirect or time limits beyond aiohttp's defaults.
"""

from __future__ import annotations

import asyncio
import base64
import os
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse


class MediaError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def __reduce__(self):
        return (MediaError, (self.status, self.message, self.param))


def default_mm_workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


@dataclass
class MediaPolicy:
    allowed_local_media_path: str | None = None
    allowed_media_domains: list[str] | None = None
    media_io_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    limit_mm_per_prompt: dict[str, int] = field(default_factory=dict)
    mm_workers: int = 0


class MediaLoader:
    def __init__(self, policy: MediaPolicy, executor: Executor | None = None):
        self.policy = policy
        self.executor = executor or ThreadPoolExecutor(max_workers=policy.mm_workers or default_mm_workers(),
                                                       thread_name_prefix="media")
        self._session = None

    async def fetch_image(self, url: str, io_kwargs: dict[str, Any] | None = None):
        data = await self._bytes(url)

        def decode():
            from PIL import UnidentifiedImageError
            from vllm.multimodal.media import ImageMediaIO

            kw = {"image_mode": "RGB", **self.policy.media_io_kwargs.get("image", {})}
            try:
                return ImageMediaIO(**kw).load_bytes(data)
            except (UnidentifiedImageError, OSError, ValueError) as e:
                raise MediaError(400, f"Cannot decode the image: {e}", "image_url") from None

        return await self._run(decode)

    async def load_image(self, url: str, io_kwargs: dict[str, Any] | None = None):
        got = await self.fetch_image(url, io_kwargs)
        return getattr(got, "media", got)

    async def load_audio(self, url: str, io_kwargs: dict[str, Any] | None = None):
        data = await self._bytes(url)

        def decode():
            from vllm.multimodal.media import AudioMediaIO

            try:
                return AudioMediaIO(**self.policy.media_io_kwargs.get("audio", {})).load_bytes(data)
            except Exception as e:  # noqa: BLE001
                raise MediaError(400, f"Cannot decode the audio: {e}", "audio_url") from None

        return await self._run(decode)

    async def load_input_audio(self, data: str, audio_format: str, io_kwargs: dict[str, Any] | None = None):
        return await self.load_audio(f"data:audio/{audio_format};base64,{data}", io_kwargs)

    async def fetch_video(self, url: str, io_kwargs: dict[str, Any] | None = None):
        data = await self._bytes(url)

        def decode():
            from vllm.multimodal.media import ImageMediaIO, VideoMediaIO

            try:
                io = VideoMediaIO(ImageMediaIO(), **self.policy.media_io_kwargs.get("video", {}))
                return io.load_bytes(data)
            except Exception as e:  # noqa: BLE001
                raise MediaError(400, f"Cannot decode the video: {e}", "video_url") from None

        return await self._run(decode)

    async def load_video(self, url: str, io_kwargs: dict[str, Any] | None = None):
        got = await self.fetch_video(url, io_kwargs)
        return getattr(got, "media", got)

    async def load_image_embeds(self, data: str):
        def decode():
            from vllm.multimodal.media import ImageEmbeddingMediaIO

            try:
                return ImageEmbeddingMediaIO().load_base64("", data)
            except Exception as e:  # noqa: BLE001
                raise MediaError(400, f"Cannot decode image_embeds: {e}", "image_embeds") from None

        return await self._run(decode)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def _bytes(self, url: str) -> bytes:
        if not isinstance(url, str) or not url:
            raise MediaError(400, "A media URL must be a non-empty string.")
        parsed = urlparse(url)
        if parsed.scheme == "data":
            head, _, payload = url[5:].partition(",")
            if not head.endswith(";base64"):
                raise MediaError(400, "Only base64 data URLs are supported.")
            try:
                return base64.b64decode(payload, validate=True)
            except ValueError:
                raise MediaError(400, "Invalid base64 in the data URL.") from None
        if parsed.scheme == "file":
            root = self.policy.allowed_local_media_path
            if not root:
                raise MediaError(403, "Cannot load local files without `--allowed-local-media-path`.")
            path = os.path.realpath(unquote(parsed.path))
            root = os.path.realpath(root)
            if os.path.commonpath([path, root]) != root:
                raise MediaError(403, f"The file path {parsed.path} is not under --allowed-local-media-path.")
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as e:
                raise MediaError(400, f"Cannot read {parsed.path}: {e.strerror}") from None
        if parsed.scheme in ("http", "https"):
            domains = self.policy.allowed_media_domains
            if domains and parsed.hostname not in domains:
                raise MediaError(403, f"The domain {parsed.hostname} is not in --allowed-media-domains.")
            import aiohttp

            if self._session is None:
                self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
            try:
                async with self._session.get(url) as resp:
                    if resp.status >= 400:
                        raise MediaError(400, f"Fetching {url} failed with HTTP {resp.status}.")
                    return await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                raise MediaError(400, f"Fetching {url} failed: {e}") from None
        raise MediaError(400, f"Unsupported media URL scheme {parsed.scheme!r}.")


__all__ = ["MediaError", "MediaLoader", "MediaPolicy", "default_mm_workers"]
