"""Stored responses, shared by every worker (and, with Redis, every replica).

vLLM keeps stored Responses in the memory of one API-server process, so a follow-up with
`previous_response_id` that lands on another process fails (vLLM issue #24603). Here each
worker opens the same store:

- the default: one SQLite file in the supervisor's runtime directory (WAL), shared by all
  workers of one supervisor and kept across worker restarts;
- `--response-store redis://HOST:PORT/DB`: one Redis database shared by several replicas;
- `--response-store none` (or, without the flag, vLLM's `VLLM_ENABLE_RESPONSES_API_STORE=0`):
  nothing is stored, as vLLM without its store.

A record is a JSON object (the response object, plus what a follow-up needs: the chat messages
the response was generated from) with its owner (`frontend/tenants`), its status and, while it
is in progress, the worker that runs it. Ids are created once (`create` never replaces a
record: a client-supplied id that is taken is refused by the route) and updated only by their
owner (`update`). Bounds: records expire after `ttl` seconds, at most `max_entries` and
`max_bytes` in all are kept (the oldest go first), and one record is at most `max_record_bytes`
(`RecordTooLarge`).

Faults stay inside the store: every operation either succeeds or raises `StoreUnavailable`
within about a second (a short busy timeout, never SQLite's default stall); the backend is
opened lazily and again after a failure, so a corrupt or missing file never stops a worker from
starting; `degraded` says why the last operation failed (for /health) until one succeeds.

Owner liveness: a worker running stored responses beats its heartbeat into the store every
`HEARTBEAT_S`; an `in_progress` record whose worker has not beaten for `STALE_S` belongs to a
worker that is gone, and any worker (its periodic sweep, or a GET that finds it) marks it failed.
"""

from __future__ import annotations

import os
import logging
from collections.abc import Mapping
from typing import Any, Callable, Protocol

import msgspec

from vllm_pyfrontend import environment
from vllm_pyfrontend.environment import STORE_ENV

log = logging.getLogger(__name__)


class StoreUnavailable(Exception):
    """The store cannot serve this operation now (corrupt, missing, read-only, locked or
    unreachable); the message says why. Routes answer 503."""


class RecordTooLarge(Exception):
    """A record over the store's per-record bound."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"{size} bytes, over the bound of {limit}")
        self.size, self.limit = size, limit


# mark(record) -> the record as it is stored once its worker is known to be gone.
MarkOrphan = Callable[[dict[str, Any]], dict[str, Any]]
# What a record keeps beside its JSON (SQLite columns, Redis arguments), added to what `get` returns.
RECORD_COLUMNS = ("owner", "worker")


def encode_record(record: dict[str, Any], max_record_bytes: int) -> bytes:
    """A record's stored JSON (without `RECORD_COLUMNS`); `RecordTooLarge` past the bound."""
    data = msgspec.json.encode({k: v for k, v in record.items() if k not in RECORD_COLUMNS})
    if len(data) > max_record_bytes:
        raise RecordTooLarge(len(data), max_record_bytes)
    return data


class ResponseStore(Protocol):
    degraded: str | None  # why the last operation failed; None once one succeeds

    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def create(self, key: str, owner: str, record: dict[str, Any], *, worker: str | None = None) -> bool:
        """Store a new record; False when the id is taken (whoever owns it). `worker`: the
        record is in progress on that worker (its heartbeat is beaten at once)."""

    async def update(self, key: str, owner: str, record: dict[str, Any], *, worker: str | None = None,
                     only_in_progress: bool = False) -> bool:
        """Replace `owner`'s record (False: gone, another owner's, or, with
        `only_in_progress`, no longer in progress). `worker` as for create; None: finished."""

    async def request_cancel(self, key: str) -> None: ...

    async def cancel_requested(self, keys: list[str]) -> set[str]: ...

    async def heartbeat(self, worker: str) -> None: ...

    async def worker_alive(self, worker: str) -> bool: ...

    async def fail_orphans(self, mark: MarkOrphan) -> list[str]:
        """Mark failed every in-progress record whose worker's heartbeat is stale."""

    async def probe(self) -> None:
        """One cheap read: opens the backend if needed (clears `degraded` when it works)."""

    async def close(self) -> None: ...


DEFAULT_TTL_S = 24 * 3600.0
DEFAULT_MAX_ENTRIES = 10000
# 4 MiB: a long text conversation (128k tokens of input and output, JSON-escaped) with a few
# images as data: URLs fits; a 10 MB `metadata` does not.
DEFAULT_MAX_RECORD_BYTES = 4 * 1024 * 1024
# 512 MiB in all: the runtime directory is often a tmpfs (memory).
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
SQLITE_NAME = "responses.sqlite3"
BUSY_TIMEOUT_S = 0.5  # the longest a store operation waits for another writer's lock
HEARTBEAT_S = 1.0  # a worker running stored responses beats this often
STALE_S = 5.0  # a worker silent this long is gone: its in-progress records are failed
# vLLM's switch, STORE_ENV (`VLLM_ENABLE_RESPONSES_API_STORE`): its store is off unless this is
# 1. Here the store is on by default; "0" turns it off, unless --response-store is given (a flag
# beats the environment).
NONE = "none"


def store_disabled(url: str | None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether storing is off: `--response-store none`, or no flag and vLLM's
    `VLLM_ENABLE_RESPONSES_API_STORE` set to 0 (read as vLLM does: an integer; from `environ`
    instead of this process's environment when given)."""
    if url:
        return url.strip().lower() == NONE
    value = environment.responses_api_store(environ)
    if value is None or not value.strip():
        return False
    try:
        return int(value) == 0
    except ValueError:
        log.warning("%s=%r is not an integer: ignored (the store stays on)", STORE_ENV, value)
        return False


def _no_limit(owner: str) -> None:
    return None


def open_store(url: str | None, runtime_dir: str, *, ttl: float = DEFAULT_TTL_S,
               max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES,
               max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
               owner_limit: Callable[[str], int | None] | None = None) -> ResponseStore:
    """The store named by `url`: None or "" (SQLite in `runtime_dir`), `sqlite:///PATH`, or
    `redis://HOST:PORT/DB` (also `rediss://`, `unix://`). Nothing is opened yet: the first
    operation opens the backend (a broken one fails that operation, not the caller).
    `owner_limit(owner)`: the bytes an owner's records may take (None: no bound of its own);
    past it that owner's oldest records go."""
    bounds = dict(ttl=ttl, max_entries=max_entries, max_bytes=max_bytes, max_record_bytes=max_record_bytes,
                  owner_limit=owner_limit or _no_limit)
    if not url:
        from vllm_pyfrontend.store.sqlite import SQLiteStore

        return SQLiteStore(os.path.join(runtime_dir, SQLITE_NAME), **bounds)
    if url.startswith("sqlite:///"):
        from vllm_pyfrontend.store.sqlite import SQLiteStore

        return SQLiteStore(url[len("sqlite://"):], **bounds)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from vllm_pyfrontend.store.redis import RedisStore

        return RedisStore(url, **bounds)
    raise ValueError(f"--response-store: unsupported URL {url!r} (redis://HOST:PORT/DB, sqlite:///PATH or none)")
