"""Every environment variable the frontend and its supervisor read, named in one place.

The product reads its environment only through the functions here. Each reads when it is
called, never at import: a value is the environment's when it is used (a worker's, a test's
`monkeypatch.setenv`). Each takes an optional `environ` mapping instead of `os.environ` (what
a caller or a test hands it). Building a child's environment (copying `os.environ`, setting
variables for it: supervisor/workers.py) is not reading it and stays where it happens.

vLLM's variables, read as vLLM reads them (same names, same defaults):

- `VLLM_API_KEY`: the API key when no `--api-key` is given (both launchers).
- `VLLM_LOGGING_LEVEL`: the drop-in launcher's log level (default info).
- `VLLM_HTTP_TIMEOUT_KEEP_ALIVE`: the default of `--http-timeout-keep-alive` (seconds, 5).
- `VLLM_SERVER_DEV_MODE`: 1 mounts the development routes (api/admin; default 0).
- `VLLM_USE_RUST_FRONTEND`: set by vLLM's launcher when it starts this frontend in place of its
  Rust one (1 or true): `/version` then also reports `rust_frontend_version`.
- `VLLM_ALLOW_RUNTIME_LORA_UPDATING`: 1 or true allows loading and unloading LoRA adapters
  at run time (serving/lora.py; default off).
- `VLLM_ENABLE_RESPONSES_API_STORE`: 0 turns the Responses store off when no
  `--response-store` is given (an integer; here the store is on by default).
- `VLLM_MAX_STOP_STRINGS`: the most stop strings a request may give (default 4).
- `VLLM_MAX_N_SEQUENCES`: the most generate responses, and choices per response, a derender
  takes (api/openai/derender_routes.py; default 16384).
- `VLLM_MSGPACK_ZERO_COPY_THRESHOLD`: tensors of at least this many bytes travel to the
  engine as frames of their own, smaller ones inline (multimodal/encode.py; default 256).
- `VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB` (256), `VLLM_MAX_AUDIO_CLIP_FILESIZE_MB` (25),
  `VLLM_IMAGE_FETCH_TIMEOUT` (5 s), `VLLM_AUDIO_FETCH_TIMEOUT` (10 s),
  `VLLM_VIDEO_FETCH_TIMEOUT` (30 s), `VLLM_MEDIA_URL_ALLOW_REDIRECTS` (1),
  `VLLM_MAX_IMAGE_PIXELS` (178956970): the media loader's limits (media/policy.py); the audio
  clip size also bounds speech uploads (api/speech).
- `VLLM_NIXL_SIDE_CHANNEL_HOST` (localhost), `VLLM_NIXL_SIDE_CHANNEL_PORT` (5600, plus the
  data parallel rank): where a prefill engine's NixlConnector says its blocks are read from
  (the simulated engine's kv_transfer_params, supervisor/sim/kv_transfer.py).
- `VLLM_MAX_AUDIO_DECODE_DURATION_S` (600), `VLLM_MAX_AUDIO_DECODE_BYTES` (256 MiB): the
  longest audio the speech routes decode (api/speech/model.py).
- every `VLLM_*` variable whose name holds no "KEY": listed by `/server_info` (as vLLM does).

The frontend's own:

- `VLLM_PYFRONTEND_API_KEYS`: the API keys (a JSON list) from the supervisor to its workers
  and worker template, taken out of the environment once read (never on a command line).
- `VLLM_PYFRONTEND_TOKENIZER_BACKEND`: the prompt encoder's library where no
  `--tokenizer-backend` is given (the drop-in path has none): auto, fastokens or tokenizers.
- `VLLM_PYFRONTEND_WORKERS`: the drop-in launcher's worker processes (default: the cores).
- `VLLM_PYFRONTEND_WORKER_PRELOAD`: 0, false, no or off start each worker on its own instead
  of forking it from the worker template (default on).
- `VLLM_PYFRONTEND_SSE_SOFT_LIMIT` (256 KiB), `VLLM_PYFRONTEND_SSE_HARD_LIMIT` (8 MiB): a
  stream's backpressure bounds in bytes (serving/sse.py): above the soft one events are held
  and coalesced, past the hard one the stream is aborted.

SageMaker's (model_hosting_container_standards, as vLLM's SageMaker integration reads them;
server/sagemaker_hooks.py):

- `SAGEMAKER_MODEL_PATH` (/opt/ml/model) and `CUSTOM_SCRIPT_FILENAME` (model.py): the customer
  script whose hooks are loaded.
- `CUSTOM_FASTAPI_PING_HANDLER`, `CUSTOM_FASTAPI_INVOCATION_HANDLER`,
  `CUSTOM_FASTAPI_MIDDLEWARE_THROTTLE`, `CUSTOM_FASTAPI_MIDDLEWARE_PRE_POST_PROCESS`,
  `CUSTOM_PRE_PROCESS`, `CUSTOM_POST_PROCESS`: hooks named by the environment instead.
- `SAGEMAKER_ENABLE_STATEFUL_SESSIONS`: stateful sessions (not supported: warned at start).

Others':

- `PROMETHEUS_MULTIPROC_DIR`: the directory of every worker's metric files, which the
  supervisor sets for its workers (prometheus_client itself reads it at its import).
- `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`: grpc (default) or http/protobuf, with
  `--otlp-traces-endpoint` (tracing.py).
- `XDG_CACHE_HOME`: where the supervisor's cache goes (default ~/.cache).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping

API_KEYS_ENV = "VLLM_PYFRONTEND_API_KEYS"
TOKENIZER_BACKEND_ENV = "VLLM_PYFRONTEND_TOKENIZER_BACKEND"
WORKERS_ENV = "VLLM_PYFRONTEND_WORKERS"
PRELOAD_ENV = "VLLM_PYFRONTEND_WORKER_PRELOAD"
SSE_SOFT_LIMIT_ENV = "VLLM_PYFRONTEND_SSE_SOFT_LIMIT"
SSE_HARD_LIMIT_ENV = "VLLM_PYFRONTEND_SSE_HARD_LIMIT"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
STORE_ENV = "VLLM_ENABLE_RESPONSES_API_STORE"
RUNTIME_LORA_UPDATING_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"

Environ = Mapping[str, str]


def _get(name: str, environ: Environ | None) -> str | None:
    return (os.environ if environ is None else environ).get(name)


def nixl_side_channel(environ: Environ | None = None) -> tuple[str, int]:
    """vLLM's NIXL side channel: (host, base port)."""
    return _get("VLLM_NIXL_SIDE_CHANNEL_HOST", environ) or "localhost", _int("VLLM_NIXL_SIDE_CHANNEL_PORT", 5600, environ)


SAGEMAKER_VARIABLES = frozenset({
    "SAGEMAKER_MODEL_PATH", "CUSTOM_SCRIPT_FILENAME", "CUSTOM_FASTAPI_PING_HANDLER",
    "CUSTOM_FASTAPI_INVOCATION_HANDLER", "CUSTOM_FASTAPI_MIDDLEWARE_THROTTLE",
    "CUSTOM_FASTAPI_MIDDLEWARE_PRE_POST_PROCESS", "CUSTOM_PRE_PROCESS", "CUSTOM_POST_PROCESS",
    "SAGEMAKER_ENABLE_STATEFUL_SESSIONS"})


def sagemaker_setting(name: str, environ: Environ | None = None) -> str | None:
    """One of SageMaker's variables (`SAGEMAKER_VARIABLES`), or None when unset."""
    if name not in SAGEMAKER_VARIABLES:
        raise KeyError(f"{name} is not one of SageMaker's variables")
    return _get(name, environ)


def _int(name: str, default: int, environ: Environ | None = None) -> int:
    """An integer; the default when unset or not an integer."""
    try:
        return int(_get(name, environ) or default)
    except ValueError:
        return default


def _flag(name: str, environ: Environ | None = None) -> bool:
    """On when 1 or true (any case, spaces around ignored); off when unset."""
    return (_get(name, environ) or "0").strip().lower() in ("1", "true")


# ------------------------------------------------------------------ vLLM's

def vllm_api_key(environ: Environ | None = None) -> str | None:
    """`VLLM_API_KEY` (None when unset or empty)."""
    return _get("VLLM_API_KEY", environ) or None


def vllm_logging_level(environ: Environ | None = None) -> str:
    """`VLLM_LOGGING_LEVEL` as given (default "info")."""
    return _get("VLLM_LOGGING_LEVEL", environ) or "info"


def http_timeout_keep_alive(environ: Environ | None = None) -> float:
    """`VLLM_HTTP_TIMEOUT_KEEP_ALIVE` in seconds (default 5); ValueError when not a number."""
    return float(_get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", environ) or 5)


def server_dev_mode(environ: Environ | None = None) -> bool:
    """`VLLM_SERVER_DEV_MODE` (an int flag: "1" on, "0" or unset off; not an integer: off)."""
    try:
        return bool(int(_get("VLLM_SERVER_DEV_MODE", environ) or "0"))
    except ValueError:
        return False


def use_rust_frontend(environ: Environ | None = None) -> bool:
    """`VLLM_USE_RUST_FRONTEND` (1 or true: vLLM's launcher started this frontend)."""
    return (_get("VLLM_USE_RUST_FRONTEND", environ) or "").lower() in ("1", "true")


def runtime_lora_updating(environ: Environ | None = None) -> bool:
    """`VLLM_ALLOW_RUNTIME_LORA_UPDATING` (1 or true; default off)."""
    return _flag(RUNTIME_LORA_UPDATING_ENV, environ)


def responses_api_store(environ: Environ | None = None) -> str | None:
    """`VLLM_ENABLE_RESPONSES_API_STORE` as given (None when unset): vllm_pyfrontend.store
    reads it (`store_disabled`)."""
    return _get(STORE_ENV, environ)


def max_stop_strings(environ: Environ | None = None) -> int:
    """`VLLM_MAX_STOP_STRINGS` (default 4); ValueError when not an integer."""
    return int(_get("VLLM_MAX_STOP_STRINGS", environ) or "4")


def max_n_sequences(environ: Environ | None = None) -> int:
    """`VLLM_MAX_N_SEQUENCES` (default 16384): the derender routes' bound on responses and
    choices; ValueError when not an integer."""
    return int(_get("VLLM_MAX_N_SEQUENCES", environ) or "16384")


def msgpack_zero_copy_threshold(environ: Environ | None = None) -> int:
    """`VLLM_MSGPACK_ZERO_COPY_THRESHOLD` in bytes (default 256); ValueError when not an
    integer."""
    return int(_get("VLLM_MSGPACK_ZERO_COPY_THRESHOLD", environ) or "256")


def max_media_download_size_mb(environ: Environ | None = None) -> int:
    """`VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB` (default 256)."""
    return _int("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", 256, environ)


def max_audio_clip_filesize_mb(environ: Environ | None = None) -> float:
    """`VLLM_MAX_AUDIO_CLIP_FILESIZE_MB` (default 25; not a finite number: 25). Speech uploads
    take it as it is, the media loader in whole MB."""
    try:
        value = float(_get("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", environ) or "25")
    except ValueError:
        return 25.0
    return value if math.isfinite(value) else 25.0


def image_fetch_timeout(environ: Environ | None = None) -> int:
    """`VLLM_IMAGE_FETCH_TIMEOUT` in seconds (default 5)."""
    return _int("VLLM_IMAGE_FETCH_TIMEOUT", 5, environ)


def audio_fetch_timeout(environ: Environ | None = None) -> int:
    """`VLLM_AUDIO_FETCH_TIMEOUT` in seconds (default 10)."""
    return _int("VLLM_AUDIO_FETCH_TIMEOUT", 10, environ)


def video_fetch_timeout(environ: Environ | None = None) -> int:
    """`VLLM_VIDEO_FETCH_TIMEOUT` in seconds (default 30)."""
    return _int("VLLM_VIDEO_FETCH_TIMEOUT", 30, environ)


def media_url_allow_redirects(environ: Environ | None = None) -> bool:
    """`VLLM_MEDIA_URL_ALLOW_REDIRECTS` (an int flag, default on); ValueError when not an
    integer."""
    value = _get("VLLM_MEDIA_URL_ALLOW_REDIRECTS", environ)
    return True if value is None else bool(int(value))


def max_image_pixels(environ: Environ | None = None) -> int:
    """`VLLM_MAX_IMAGE_PIXELS` (default 178956970)."""
    return _int("VLLM_MAX_IMAGE_PIXELS", 178_956_970, environ)


def max_audio_decode_duration_s(environ: Environ | None = None) -> int:
    """`VLLM_MAX_AUDIO_DECODE_DURATION_S` (default 600)."""
    return _int("VLLM_MAX_AUDIO_DECODE_DURATION_S", 600, environ)


def max_audio_decode_bytes(environ: Environ | None = None) -> int:
    """`VLLM_MAX_AUDIO_DECODE_BYTES` (default 256 MiB)."""
    return _int("VLLM_MAX_AUDIO_DECODE_BYTES", 268_435_456, environ)


def vllm_variables(environ: Environ | None = None) -> dict[str, str]:
    """Every `VLLM_*` variable but those whose name holds "KEY", sorted by name (vLLM's
    `/server_info` lists them)."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in sorted(env.items()) if k.startswith("VLLM_") and "KEY" not in k}


# ------------------------------------------------------------------ the frontend's own

def take_api_keys() -> list[str] | None:
    """`VLLM_PYFRONTEND_API_KEYS` (a JSON list; empty keys dropped), removed from this
    process's environment (its children never see it); None when unset or empty."""
    keys = os.environ.pop(API_KEYS_ENV, None)
    return [k for k in json.loads(keys) if k] if keys else None


def tokenizer_backend(environ: Environ | None = None) -> str | None:
    """`VLLM_PYFRONTEND_TOKENIZER_BACKEND` as given (None when unset or empty): config checks it
    (`tokenizer_backend_from_env`)."""
    return _get(TOKENIZER_BACKEND_ENV, environ) or None


def workers(environ: Environ | None = None) -> int | None:
    """`VLLM_PYFRONTEND_WORKERS` (None when unset or empty); ValueError when not an integer."""
    value = _get(WORKERS_ENV, environ)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{WORKERS_ENV} must be an integer, got {value!r}") from None


def worker_preload(environ: Environ | None = None) -> bool:
    """`VLLM_PYFRONTEND_WORKER_PRELOAD` (off: 0, false, no or off; default on)."""
    return (_get(PRELOAD_ENV, environ) or "1").strip().lower() not in ("0", "false", "no", "off")


def sse_soft_limit(environ: Environ | None = None) -> int:
    """`VLLM_PYFRONTEND_SSE_SOFT_LIMIT` in bytes (default 256 KiB)."""
    return _int(SSE_SOFT_LIMIT_ENV, 256 * 1024, environ)


def sse_hard_limit(environ: Environ | None = None) -> int:
    """`VLLM_PYFRONTEND_SSE_HARD_LIMIT` in bytes (default 8 MiB)."""
    return _int(SSE_HARD_LIMIT_ENV, 8 * 1024 * 1024, environ)


# ------------------------------------------------------------------ others'

def prometheus_multiproc_dir(environ: Environ | None = None) -> str | None:
    """`PROMETHEUS_MULTIPROC_DIR` (None when unset or empty)."""
    return _get(MULTIPROC_ENV, environ) or None


def otlp_traces_protocol(environ: Environ | None = None) -> str:
    """`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` (default grpc)."""
    value = _get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", environ)
    return "grpc" if value is None else value


def cache_dir(environ: Environ | None = None) -> str:
    """`XDG_CACHE_HOME`, else ~/.cache."""
    return _get("XDG_CACHE_HOME", environ) or os.path.join(os.path.expanduser("~"), ".cache")
