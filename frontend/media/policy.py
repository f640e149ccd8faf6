"""MediaPolicy: where media may come from, how big it may be, how long a fetch may take, and
how many items one prompt may carry. Built once per worker from its config (`from_config`); the
defaults are vLLM's (its `VLLM_*` environment variables are read the same way)."""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_pyfrontend import environment
from vllm_pyfrontend.errors import MediaError

MiB = 1024 * 1024
# vLLM's default for a modality --limit-mm-per-prompt does not name.
DEFAULT_LIMIT_PER_PROMPT = 999
MODALITIES = ("image", "audio", "video")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def default_mm_workers() -> int:
    """Threads that fetch and decode media in one worker: the cores this process may use, at
    least 2 (a decode must not wait behind one slow fetch's read), at most 8 (vLLM's
    VLLM_MEDIA_LOADING_THREAD_COUNT)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(2, min(8, cores))


def parse_json_arg(text: str | Mapping[str, Any] | None, flag: str) -> dict[str, Any]:
    """A JSON object flag (`--media-io-kwargs`, `--limit-mm-per-prompt`): text or an already
    parsed mapping (vLLM's jsonified serve args); None or "" is empty."""
    if text is None or text == "":
        return {}
    if isinstance(text, Mapping):
        return dict(text)
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{flag} must be a JSON object: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag} must be a JSON object, got {text!r}")
    return value


def parse_limit_mm_per_prompt(value: str | Mapping[str, Any] | None) -> dict[str, int]:
    """vLLM's `--limit-mm-per-prompt` as counts per modality: `{"image": 2, "video": 0}`, or
    the object form of a modality (`{"video": {"count": 1, "num_frames": 32}}`, whose other keys
    size the engine's profiling and are the engine's business)."""
    raw = parse_json_arg(value, "--limit-mm-per-prompt")
    limits: dict[str, int] = {}
    for modality, v in raw.items():
        if isinstance(v, Mapping):
            v = v.get("count", DEFAULT_LIMIT_PER_PROMPT)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"--limit-mm-per-prompt: the limit of {modality!r} must be an integer >= 0, "
                             f"got {v!r}")
        limits[str(modality)] = v
    return limits


def check_item_counts(counts: Mapping[str, int], limits: Mapping[str, int] | None,
                      supported: Mapping[str, int | None] | None = None) -> None:
    """Refuse a prompt with more items of a modality than allowed, in vLLM's words
    (`InputProcessingContext.validate_num_items`): `limits` are --limit-mm-per-prompt's (999
    where a modality is not named), `supported` the model's own limits (None: unlimited; a
    modality the model does not take is 0)."""
    limits = limits or {}
    for modality, n in counts.items():
        if n <= 0:
            continue
        allowed = limits.get(modality, DEFAULT_LIMIT_PER_PROMPT)
        supported_limit: int | None = None  # unknown: the flag is the only limit
        if supported is not None:
            supported_limit = supported.get(modality, 0)
        limit = allowed if supported_limit is None else min(allowed, supported_limit)
        if n > limit:
            msg = f"At most {limit} {modality}(s) may be provided in one prompt."
            if supported_limit is None or n <= supported_limit:
                msg += " Set `--limit-mm-per-prompt` to increase this limit."
            raise MediaError(400, msg, modality)


# Full stops a URL parser (IDNA, WHATWG) maps to "." in a host name.
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


def _ipv4_number(part: str) -> int | None:
    """One part of an IPv4 literal as inet_aton and WHATWG's URL parser read it: `0x` hex,
    a leading `0` octal, else decimal; None when it is not a number."""
    if part[:2] in ("0x", "0X"):
        digits, base = part[2:], 16
        if digits == "":
            return 0
    elif len(part) > 1 and part[0] == "0":
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    if not digits.isascii() or not digits.isalnum():
        return None
    try:
        return int(digits, base)
    except ValueError:
        return None


def host_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address a URL's host stands for when it is an IP literal in any form that some
    URL parser or the C library accepts, None for a host name.

    IPv4 in the legacy forms `inet_aton` still maps onto an address (one to four parts, each
    decimal, octal with a leading 0, or hex with 0x: `2130706433`, `127.1`, `0177.0.0.1`,
    `0x7f.1`), with a trailing dot, percent-encoded (`%31%32%37.0.0.1`), in full-width digits
    or ideographic full stops; IPv6 with or without brackets and a zone id (`fe80::1%eth0`),
    IPv4-mapped and the other embedding forms (decided by `MediaPolicy.address_allowed`).
    A host that looks like an IPv6 literal but is none (`::ffff:127.1`) raises ValueError: no
    resolver should be asked what it means."""
    h = host.strip("[]")
    if ":" in h:
        address, _, _zone = h.partition("%")
        try:
            return ipaddress.IPv6Address(address)
        except ValueError:
            raise ValueError(f"{host!r} is not a valid IPv6 address") from None
    if "%" in h:
        from urllib.parse import unquote

        h = unquote(h, errors="replace")
    if not h.isascii():
        import unicodedata

        h = unicodedata.normalize("NFKC", h).translate(_DOTS)
    if h.endswith("."):
        h = h[:-1]
    parts = h.split(".")
    if not h or len(parts) > 4:
        return None
    numbers = [_ipv4_number(p) for p in parts] if all(parts) else [None]
    if any(n is None for n in numbers):
        return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (4 - len(head)):
        return None  # not an address inet_aton accepts: a name to the resolver, which fails
    value = last
    for i, n in enumerate(head):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


@dataclass
class MediaPolicy:
    # file:// URLs: only files under this directory (vLLM's --allowed-local-media-path).
    allowed_local_media_path: str | None = None
    # http(s) URLs: only these host names, every redirect hop included (None/empty: any).
    allowed_media_domains: list[str] | None = None
    # Loopback, private, link-local, multicast, reserved and unspecified addresses are refused
    # (the address every hop connects to) unless this is set ...
    allow_private_addresses: bool = False
    # ... or the address is in one of these networks (CIDR), e.g. an internal image store.
    allowed_private_networks: list[str] = field(default_factory=list)
    # Encoded bytes of one item (vLLM's VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB, 256 MiB) ...
    max_bytes: int = 256 * MiB
    # ... and of one audio clip (vLLM's VLLM_MAX_AUDIO_CLIP_FILESIZE_MB, 25 MiB).
    max_audio_bytes: int = 25 * MiB
    # Seconds one fetch may take, redirects and body included; None: vLLM's per modality
    # (VLLM_IMAGE_FETCH_TIMEOUT 5, VLLM_AUDIO_FETCH_TIMEOUT 10, VLLM_VIDEO_FETCH_TIMEOUT 30).
    fetch_timeout_s: float | None = None
    image_fetch_timeout_s: float = 5.0
    audio_fetch_timeout_s: float = 10.0
    video_fetch_timeout_s: float = 30.0
    # Redirects followed per fetch (0: none; vLLM's VLLM_MEDIA_URL_ALLOW_REDIRECTS=0).
    max_redirects: int = 10
    # vLLM's --media-io-kwargs: decoder settings per modality, e.g. {"video": {"num_frames": 8}}.
    media_io_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Decompression-bomb guard (vLLM's VLLM_MAX_IMAGE_PIXELS; 0: none).
    max_image_pixels: int = 178_956_970
    # vLLM's --limit-mm-per-prompt (counts; a modality not named: 999).
    limit_mm_per_prompt: dict[str, int] = field(default_factory=dict)
    # Threads fetching and decoding media in one worker (--mm-workers; 0: default_mm_workers()).
    mm_workers: int = 0

    def __post_init__(self) -> None:
        self._networks = [ipaddress.ip_network(n, strict=False) for n in self.allowed_private_networks]
        if self.allowed_media_domains:
            self.allowed_media_domains = [d.lower().rstrip(".") for d in self.allowed_media_domains]

    def timeout_for(self, modality: str) -> float:
        if self.fetch_timeout_s is not None:
            return self.fetch_timeout_s
        return {"image": self.image_fetch_timeout_s, "audio": self.audio_fetch_timeout_s,
                "video": self.video_fetch_timeout_s}.get(modality, self.image_fetch_timeout_s)

    def max_bytes_for(self, modality: str) -> int:
        if modality == "audio" and self.max_audio_bytes > 0:
            return min(self.max_bytes, self.max_audio_bytes) if self.max_bytes > 0 else self.max_audio_bytes
        return self.max_bytes

    def address_allowed(self, address: str) -> bool:
        """Whether a connection to this IP address may be made."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return False
        if self.allow_private_addresses:
            return True
        if isinstance(ip, ipaddress.IPv6Address):
            # IPv6 forms that carry an IPv4 address (mapped, 6to4, NAT64): the IPv4 one decides
            embedded = ip.ipv4_mapped or ip.sixtofour
            if embedded is None and ip in _NAT64:
                embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
            if embedded is not None:
                return self.address_allowed(str(embedded))
        if any(ip in net for net in self._networks):
            return True
        return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_loopback or ip.is_link_local
                                     or ip.is_private or ip.is_unspecified)

    def domain_allowed(self, host: str) -> bool:
        if not self.allowed_media_domains:
            return True
        return host.lower().rstrip(".") in self.allowed_media_domains

    @classmethod
    def from_env(cls, **overrides: Any) -> "MediaPolicy":
        """Defaults from vLLM's environment variables, then `overrides`."""
        values: dict[str, Any] = dict(
            max_bytes=max(0, environment.max_media_download_size_mb()) * MiB,
            max_audio_bytes=max(0, int(environment.max_audio_clip_filesize_mb())) * MiB,
            image_fetch_timeout_s=float(environment.image_fetch_timeout()),
            audio_fetch_timeout_s=float(environment.audio_fetch_timeout()),
            video_fetch_timeout_s=float(environment.video_fetch_timeout()),
            max_redirects=10 if environment.media_url_allow_redirects() else 0,
            max_image_pixels=environment.max_image_pixels(),
        )
        values.update(overrides)
        return cls(**values)

    @classmethod
    def from_config(cls, cfg: Any) -> "MediaPolicy":
        """The policy of a worker: `cfg` is its WorkerConfig or WorkerPolicy (the flags
        --allowed-local-media-path, --allowed-media-domains, --allow-private-media-addresses,
        --allowed-private-media-networks, --media-io-kwargs, --limit-mm-per-prompt,
        --mm-workers), over vLLM's environment defaults."""
        policy = getattr(cfg, "policy", cfg)
        return cls.from_env(
            allowed_local_media_path=getattr(policy, "allowed_local_media_path", None) or None,
            allowed_media_domains=list(getattr(policy, "allowed_media_domains", None) or []) or None,
            allow_private_addresses=bool(getattr(policy, "allow_private_media_addresses", False)),
            allowed_private_networks=list(getattr(policy, "allowed_private_media_networks", None) or []),
            media_io_kwargs=parse_json_arg(getattr(policy, "media_io_kwargs", None), "--media-io-kwargs"),
            limit_mm_per_prompt=parse_limit_mm_per_prompt(getattr(policy, "limit_mm_per_prompt", None)),
            mm_workers=int(getattr(policy, "mm_workers", 0) or 0),
        )
