"""Stored responses, shared by every worker (and, with Redis, every replica).

vLLM keeps stored Responses in the memory of one API-server process, so a follow-up with
`previous_response_id` that lands on another process fails (vLLM issue #24603). Here each
worker opens the same store:

- the default: one SQLite file in the supervisor's runtime directory (WAL), shared by all
  workers of one supervisor and kept across worker restarts;
- `--response-store redis://HOST:PORT/DB`: one Redis database shared by several replicas.

A record is a JSON object (the response object, plus what a follow-up needs: the chat messages
the response was generated from). Records expire after `ttl` seconds and at most `max_entries`
are kept (the oldest go first). Besides records the store holds cancel flags: any worker sets
one, the worker that owns a background response watches it and aborts its engine request.
"""

from __future__ import annotations

import os
from typing import Any, Protocol


class ResponseStore(Protocol):
    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def put(self, key: str, record: dict[str, Any]) -> None: ...

    async def request_cancel(self, key: str) -> None: ...

    async def cancel_requested(self, keys: list[str]) -> set[str]: ...

    async def close(self) -> None: ...


DEFAULT_TTL_S = 24 * 3600.0
DEFAULT_MAX_ENTRIES = 10000
SQLITE_NAME = "responses.sqlite3"


def open_store(url: str | None, runtime_dir: str, *, ttl: float = DEFAULT_TTL_S,
               max_entries: int = DEFAULT_MAX_ENTRIES) -> ResponseStore:
    """The store named by `url`: None or "" (SQLite in `runtime_dir`), `sqlite:///PATH`, or
    `redis://HOST:PORT/DB` (also `rediss://`, `unix://`)."""
    if not url:
        from vllm_pyfrontend.store.sqlite import SQLiteStore

        return SQLiteStore(os.path.join(runtime_dir, SQLITE_NAME), ttl=ttl, max_entries=max_entries)
    if url.startswith("sqlite:///"):
        from vllm_pyfrontend.store.sqlite import SQLiteStore

        return SQLiteStore(url[len("sqlite://"):], ttl=ttl, max_entries=max_entries)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from vllm_pyfrontend.store.redis import RedisStore

        return RedisStore(url, ttl=ttl, max_entries=max_entries)
    raise ValueError(f"--response-store: unsupported URL {url!r} (redis://HOST:PORT/DB or sqlite:///PATH)")
