"""MediaLoader: a media URL (data:, http(s)://, file://) to what vLLM's MediaConnector gives
for it, without blocking the event loop.

- `data:` URLs (RFC 2397, base64 only, as vLLM): decoded in the pool.
- `http(s)://`: aiohttp, one session per loader. Every hop (the URL and each redirect, followed
  here one by one, at most `max_redirects`) must be http(s), in --allowed-media-domains when set,
  and connect only to allowed addresses: an IP literal (in any form: `policy.host_address`) is
  checked before the request, a host name's resolved addresses by the connector's resolver (so
  the address checked is the address connected to: no DNS-rebinding window). The whole fetch
  (every hop and the body) has one deadline; the body is read in chunks against the size limit
  (Content-Length is checked first). Proxies from the environment are not used (the address
  check would be the proxy's). Unlike vLLM, no retries: a fetch fails after one time-out, not
  after three growing ones.
- `file://`: only under --allowed-local-media-path, read in the pool.

Decoding (decode.py) runs in `executor`: a thread pool of `mm_workers` threads unless one is
given. Errors are MediaError (status + message), never a raw exception.
"""

from __future__ import annotations

import asyncio
import functools
import socket
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from vllm_pyfrontend.media import decode
from vllm_pyfrontend.errors import MediaError
from vllm_pyfrontend.media.policy import MediaPolicy, default_mm_workers, host_address

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024


class _RefusedAddress(OSError):
    """Raised by the resolver for a host whose every address is refused (an OSError, so
    aiohttp's connector passes it on as the cause of its connection error)."""

    def __init__(self, host: str, address: str):
        super().__init__(f"{host} resolves to {address}")
        self.host = host
        self.address = address


def _refused_message(host: str, address: str) -> str:
    where = host if host == address else f"{host} ({address})"
    return (f"The media URL's host {where} is a private, loopback, link-local or reserved address; "
            "fetching from it is not allowed.")


def _guarded_resolver(policy: MediaPolicy):
    from aiohttp.abc import AbstractResolver
    from aiohttp.resolver import ThreadedResolver

    class GuardedResolver(AbstractResolver):
        """The default resolver, keeping only the addresses the policy allows."""

        def __init__(self) -> None:
            self._inner = ThreadedResolver()

        async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
            infos = await self._inner.resolve(host, port, family)
            allowed = [i for i in infos if policy.address_allowed(i["host"])]
            if not allowed:
                raise _RefusedAddress(host, infos[0]["host"] if infos else "?")
            return allowed

        async def close(self) -> None:
            await self._inner.close()

    return GuardedResolver()


def _find_refusal(exc: BaseException) -> _RefusedAddress | None:
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, _RefusedAddress):
            return exc
        inner = getattr(exc, "os_error", None)
        if isinstance(inner, _RefusedAddress):
            return inner
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


class MediaLoader:
    def __init__(self, policy: MediaPolicy, executor: Executor | None = None):
        self.policy = policy
        self._own_executor = executor is None
        self.executor = executor or ThreadPoolExecutor(
            max_workers=policy.mm_workers or default_mm_workers(), thread_name_prefix="media")
        self._session = None
        self._user_agent = "vllm-pyfrontend"

    @classmethod
    def from_config(cls, cfg: Any, executor: Executor | None = None) -> "MediaLoader":
        """The loader of a worker (`cfg`: its WorkerConfig or WorkerPolicy)."""
        return cls(MediaPolicy.from_config(cfg), executor)

    # -- public API: what vLLM's MediaConnector.fetch_*_async return ----------------------

    async def fetch_image(self, url: str, io_kwargs: dict[str, Any] | None = None):
        """vLLM's `MediaWithBytes` of the image (`.media` is the PIL image, `.original_bytes`
        the encoded bytes its processor hashes)."""
        p = self.policy
        max_bytes = p.max_bytes_for("image")
        payload = await self._payload(url, "image", max_bytes)
        return await self._run(decode.decode_image, payload, max_bytes, p.max_image_pixels,
                               p.media_io_kwargs.get("image"), (io_kwargs or {}).get("image"))

    async def load_image(self, url: str, io_kwargs: dict[str, Any] | None = None):
        """The PIL image (mode, size and pixels as vLLM's MediaConnector gives them)."""
        return (await self.fetch_image(url, io_kwargs)).media

    async def load_audio(self, url: str, io_kwargs: dict[str, Any] | None = None):
        """(float32 waveform ndarray, sample rate), as vLLM's `fetch_audio_async`."""
        p = self.policy
        max_bytes = p.max_bytes_for("audio")
        payload = await self._payload(url, "audio", max_bytes)
        return await self._run(decode.decode_audio, payload, max_bytes, p.media_io_kwargs.get("audio"),
                               (io_kwargs or {}).get("audio"))

    async def load_input_audio(self, data: str, audio_format: str, io_kwargs: dict[str, Any] | None = None):
        """A chat `input_audio` part ({"data": base64, "format": "wav"}), as vLLM: the data URL
        `data:audio/<format>;base64,<data>`."""
        return await self.load_audio(f"data:audio/{audio_format};base64,{data}", io_kwargs)

    async def fetch_video(self, url: str, io_kwargs: dict[str, Any] | None = None):
        """vLLM's `MediaWithBytes` of (frames ndarray, metadata dict)."""
        p = self.policy
        max_bytes = p.max_bytes_for("video")
        payload = await self._payload(url, "video", max_bytes)
        return await self._run(decode.decode_video, payload, max_bytes, p.media_io_kwargs.get("image"),
                               p.media_io_kwargs.get("video"), io_kwargs)

    async def load_video(self, url: str, io_kwargs: dict[str, Any] | None = None):
        """(frames ndarray, metadata dict), as vLLM's `fetch_video_async` (unwrapped)."""
        return (await self.fetch_video(url, io_kwargs)).media

    async def load_image_embeds(self, data: str):
        """A base64 `torch.save`/`.npy` tensor, as vLLM's `fetch_image_embedding_async`."""
        return await self.load_embeds("image", data)

    async def load_embeds(self, modality: str, data: str):
        if modality not in ("image", "audio", "video"):
            raise MediaError(400, f"Embeddings of modality {modality!r} are not supported.")
        if not isinstance(data, str):
            raise MediaError(400, f"{modality}_embeds must be a base64 string.")
        return await self._run(decode.decode_embeds, modality, data, self.policy.max_bytes)

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
        if self._own_executor:
            self.executor.shutdown(wait=False, cancel_futures=True)

    # -- sources -------------------------------------------------------------------------------

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.executor, functools.partial(fn, *args))

    async def _payload(self, url: str, modality: str, max_bytes: int) -> decode.Payload:
        """The item's bytes, or a data URL's (media type, base64 text) for the pool to decode."""
        if not isinstance(url, str) or not url:
            raise MediaError(400, f"The {modality} URL must be a non-empty string.")
        if url[:5].lower() == "data:":
            spec, sep, data = url[5:].partition(",")
            if not sep:
                raise MediaError(400, f"Invalid data URL {url[:32]!r}: missing ',' separator.")
            media_type, sep, encoding = spec.rpartition(";")
            if not sep or encoding.strip().lower() != "base64":
                raise MediaError(400, "Only base64 data URLs are supported (data:<media type>;base64,<data>).")
            return (media_type.partition(";")[0], data)
        try:
            parts = urlsplit(url)
        except ValueError as e:
            raise MediaError(400, f"Invalid {modality} URL: {e}.") from None
        scheme = parts.scheme.lower()
        if scheme in ("http", "https"):
            return await self._http_get(url, modality, max_bytes)
        if scheme == "file":
            path = url2pathname(parts.netloc + parts.path)
            if "\x00" in path:  # `%00`: no file has such a name, and os calls raise on it
                raise MediaError(400, f"Invalid {modality} URL: the file path contains a NUL byte.")
            return await self._run(decode.read_local_file, path, self.policy.allowed_local_media_path, max_bytes)
        raise MediaError(400, "The URL must be either a HTTP, data or file URL.")

    async def _get_session(self):
        if self._session is None:
            import aiohttp

            connector = aiohttp.TCPConnector(resolver=_guarded_resolver(self.policy), limit=64,
                                             ttl_dns_cache=10)
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False,
                                                  headers={"User-Agent": self._user_agent})
        return self._session

    def _check_target(self, url, modality: str) -> None:
        """One hop's URL (a yarl URL): scheme, domain allow-list, IP literal."""
        if url.scheme not in ("http", "https"):
            raise MediaError(403, f"The {modality} URL redirected to a {url.scheme or 'relative'} URL; only "
                                  "http and https are followed.")
        host = url.host
        if not host:
            raise MediaError(400, f"Invalid {modality} URL: no host.")
        if not self.policy.domain_allowed(host):
            raise MediaError(403, f"The URL must be from one of the allowed domains: "
                                  f"{self.policy.allowed_media_domains}. Input URL domain: {host}")
        # An IP literal in any form (2130706433, 127.1, 0x7f.1, [::ffff:127.0.0.1], with a
        # trailing dot or percent-encoded) is checked as the address it stands for, here and
        # not by the connector: aiohttp before 3.14.2 connects to the legacy numeric forms
        # without asking the resolver, and the guarded resolver is the only other check.
        for raw in (host,) if url.raw_host in (None, host) else (host, url.raw_host):
            try:
                address = host_address(raw)
            except ValueError as e:
                raise MediaError(400, f"Invalid {modality} URL: {e}.") from None
            if address is None:
                continue
            if not self.policy.address_allowed(str(address)):
                raise MediaError(403, _refused_message(raw, str(address)))
            if address.version == 4 and raw != str(address):
                raise MediaError(400, f"Invalid {modality} URL: the host {raw} is not a canonical "
                                      f"IPv4 address; write it as {address}.")

    async def _http_get(self, url: str, modality: str, max_bytes: int) -> bytes:
        import aiohttp
        from yarl import URL

        timeout = self.policy.timeout_for(modality)
        try:
            target = URL(url)
        except (ValueError, TypeError) as e:
            raise MediaError(400, f"Invalid {modality} URL: {e}.") from None
        host = target.host
        session = await self._get_session()
        try:
            async with asyncio.timeout(timeout if timeout and timeout > 0 else None):
                for _ in range(self.policy.max_redirects + 1):
                    self._check_target(target, modality)
                    host = target.host
                    async with session.get(target, allow_redirects=False) as resp:
                        if resp.status in _REDIRECTS:
                            location = resp.headers.get("Location")
                            if not location:
                                raise MediaError(400, f"Failed to fetch media from URL: HTTP {resp.status} "
                                                      "redirect without a Location.")
                            if self.policy.max_redirects == 0:
                                raise MediaError(400, f"Failed to fetch media from URL: HTTP {resp.status} "
                                                      "redirect, and redirects are not followed.")
                            target = resp.url.join(URL(location))
                            continue
                        if resp.status >= 400:
                            raise MediaError(400, f"Failed to fetch media from URL: HTTP {resp.status} error")
                        return await self._read_body(resp, max_bytes, modality)
                raise MediaError(400, f"Failed to fetch media from URL: more than {self.policy.max_redirects} "
                                      "redirects (a redirect loop?).")
        except MediaError:
            raise
        except TimeoutError:
            raise MediaError(400, f"Timed out fetching the {modality} from {host}: not complete after "
                                  f"{timeout:g} s.") from None
        except aiohttp.InvalidURL as e:
            raise MediaError(400, f"Failed to fetch media from URL: invalid URL {e}.") from None
        except (aiohttp.ClientError, OSError) as e:
            refused = _find_refusal(e)
            if refused is not None:
                raise MediaError(403, _refused_message(refused.host, refused.address)) from None
            raise MediaError(400, f"Failed to fetch media from URL ({host}): {type(e).__name__}: {e}") from None

    async def _read_body(self, resp, max_bytes: int, modality: str) -> bytes:
        def too_large(n: int) -> MediaError:
            return MediaError(413, f"The {modality} at the URL is too large: {n} bytes or more, more than the "
                                   f"limit of {max_bytes} bytes.")

        length = resp.content_length
        if max_bytes > 0 and length is not None and length > max_bytes:
            raise too_large(length)
        chunks: list[bytes] = []
        received = 0
        async for chunk in resp.content.iter_chunked(_CHUNK):
            received += len(chunk)
            if max_bytes > 0 and received > max_bytes:
                raise too_large(received)
            chunks.append(chunk)
        return b"".join(chunks)
