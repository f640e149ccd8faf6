"""The embedded response store: one SQLite file (WAL) that every worker of a supervisor opens.

Each call is one short transaction run in a thread (`asyncio.to_thread`), so the event loop
never waits on the file lock; SQLite's busy timeout covers the writers of the other workers.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from typing import Any

import msgspec

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    stored_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    record BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_stored_at ON responses(stored_at);
CREATE TABLE IF NOT EXISTS cancels (
    id TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
"""
_PRUNE_EVERY = 64  # puts between two expiry/size sweeps


class SQLiteStore:
    def __init__(self, path: str, *, ttl: float, max_entries: int):
        self.path = path
        self.ttl = ttl
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=10.0, check_same_thread=False, isolation_level=None)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        self._puts = 0

    def _run(self, fn, *args):
        def call():
            with self._lock:
                return fn(*args)

        return asyncio.to_thread(call)

    # -- records -------------------------------------------------------------------------------
    async def get(self, key: str) -> dict[str, Any] | None:
        row = await self._run(self._get, key)
        return None if row is None else msgspec.json.decode(row)

    def _get(self, key: str) -> bytes | None:
        row = self._db.execute("SELECT record FROM responses WHERE id = ? AND expires_at > ?",
                               (key, time.time())).fetchone()
        return None if row is None else row[0]

    async def put(self, key: str, record: dict[str, Any]) -> None:
        data = msgspec.json.encode(record)
        self._puts += 1
        prune = self._puts % _PRUNE_EVERY == 1
        await self._run(self._put, key, data, prune)

    def _put(self, key: str, data: bytes, prune: bool) -> None:
        now = time.time()
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            # stored_at is the first store of the id, so a record being updated keeps its age.
            db.execute(
                "INSERT INTO responses (id, stored_at, expires_at, record) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET expires_at = excluded.expires_at, record = excluded.record",
                (key, now, now + self.ttl, data))
            if prune:
                db.execute("DELETE FROM responses WHERE expires_at <= ?", (now,))
                db.execute("DELETE FROM cancels WHERE expires_at <= ?", (now,))
            db.execute(
                "DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY stored_at DESC "
                "LIMIT -1 OFFSET ?)", (self.max_entries,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # -- cancel flags ------------------------------------------------------------------------
    async def request_cancel(self, key: str) -> None:
        await self._run(self._db.execute, "INSERT OR REPLACE INTO cancels (id, expires_at) VALUES (?, ?)",
                        (key, time.time() + self.ttl))

    async def cancel_requested(self, keys: list[str]) -> set[str]:
        if not keys:
            return set()
        return await self._run(self._cancel_requested, list(keys))

    def _cancel_requested(self, keys: list[str]) -> set[str]:
        marks = ",".join("?" * len(keys))
        rows = self._db.execute(f"SELECT id FROM cancels WHERE id IN ({marks})", keys).fetchall()
        return {r[0] for r in rows}

    async def close(self) -> None:
        with self._lock:
            self._db.close()
