"""The embedded response store: one SQLite file (WAL) that every worker of a supervisor opens.

Each call is one short transaction run in a thread (`asyncio.to_thread`), so the event loop
never waits on the file lock. Every wait is bounded by `BUSY_TIMEOUT_S` (SQLite's busy timeout
for another process's lock, the same bound for this worker's own connection lock), so a store
whose lock is held elsewhere fails its operations in half a second instead of stalling them.
The file is opened on the first operation, and again after one that found it broken: a corrupt
or missing file fails the store's operations (`StoreUnavailable`), never the worker's start.

Tables: `records` (the records, their owner, size and the worker running them),
`totals` (bytes and entries of `records`, kept by triggers, so the bounds cost no scan),
`owner_totals` (bytes per owner, by triggers too: past a bound the owner holding the most loses
its oldest records, so one tenant's writes never evict another's while it holds more),
`cancels` (cancel flags), `workers` (heartbeats).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from typing import Any

import msgspec

from vllm_pyfrontend.store.files import enable_wal
from vllm_pyfrontend.store import (
    BUSY_TIMEOUT_S,
    STALE_S,
    MarkOrphan,
    StoreUnavailable,
    encode_record,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    worker TEXT,
    stored_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    size INTEGER NOT NULL,
    record BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS records_stored_at ON records(stored_at);
CREATE INDEX IF NOT EXISTS records_running ON records(worker) WHERE worker IS NOT NULL;
CREATE TABLE IF NOT EXISTS totals (k INTEGER PRIMARY KEY CHECK (k = 0), bytes INTEGER NOT NULL,
                                   entries INTEGER NOT NULL);
INSERT OR IGNORE INTO totals (k, bytes, entries) VALUES (0, 0, 0);
CREATE TRIGGER IF NOT EXISTS records_added AFTER INSERT ON records BEGIN
    UPDATE totals SET bytes = bytes + NEW.size, entries = entries + 1 WHERE k = 0; END;
CREATE TRIGGER IF NOT EXISTS records_removed AFTER DELETE ON records BEGIN
    UPDATE totals SET bytes = bytes - OLD.size, entries = entries - 1 WHERE k = 0; END;
CREATE TRIGGER IF NOT EXISTS records_resized AFTER UPDATE OF size ON records BEGIN
    UPDATE totals SET bytes = bytes - OLD.size + NEW.size WHERE k = 0; END;
CREATE TABLE IF NOT EXISTS owner_totals (owner TEXT PRIMARY KEY, bytes INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS records_owner ON records(owner, stored_at);
CREATE TRIGGER IF NOT EXISTS records_owner_added AFTER INSERT ON records BEGIN
    INSERT INTO owner_totals (owner, bytes) VALUES (NEW.owner, NEW.size)
        ON CONFLICT(owner) DO UPDATE SET bytes = bytes + NEW.size; END;
CREATE TRIGGER IF NOT EXISTS records_owner_removed AFTER DELETE ON records BEGIN
    UPDATE owner_totals SET bytes = bytes - OLD.size WHERE owner = OLD.owner;
    DELETE FROM owner_totals WHERE owner = OLD.owner AND bytes <= 0; END;
CREATE TRIGGER IF NOT EXISTS records_owner_resized AFTER UPDATE OF size ON records BEGIN
    UPDATE owner_totals SET bytes = bytes - OLD.size + NEW.size WHERE owner = NEW.owner; END;
CREATE TABLE IF NOT EXISTS cancels (
    id TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (
    id TEXT PRIMARY KEY,
    beat REAL NOT NULL
);
"""
# The schema's version, kept in the file's `user_version`: an opener creates the schema only
# where the file's is older, so opening a file that has it writes nothing and needs no write
# lock (a worker that opens while another process holds that lock still reads).
_SCHEMA_VERSION = 2
_PRUNE_EVERY = 64  # writes between two expiry sweeps
_EVICT_CHUNK = 64  # oldest records looked at per eviction query
_WORKER_FORGET_S = 3600.0  # heartbeats older than this are dropped by the expiry sweep

_enc = msgspec.json.encode
_dec = msgspec.json.decode


class SQLiteStore:
    def __init__(self, path: str, *, ttl: float, max_entries: int, max_bytes: int, max_record_bytes: int,
                 owner_limit=lambda owner: None):
        self.path = path
        self.owner_limit = owner_limit  # owner -> the bytes its records may take (None: no bound of its own)
        self.ttl = ttl
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_record_bytes = max_record_bytes
        self.degraded: str | None = None
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._writes = 0

    # -- the connection ------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None)
        try:
            enable_wal(db)
            db.execute("PRAGMA synchronous=NORMAL")
            if db.execute("PRAGMA user_version").fetchone()[0] < _SCHEMA_VERSION:
                # (version 1 had no owner_totals: filled from the records it holds)
                db.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} DELETE FROM owner_totals; "
                                 "INSERT INTO owner_totals (owner, bytes) SELECT owner, SUM(size) FROM records "
                                 f"GROUP BY owner; PRAGMA user_version = {_SCHEMA_VERSION}; COMMIT;")
        except BaseException:
            db.close()
            raise
        return db

    def _run(self, fn, *args):
        def call():
            if not self._lock.acquire(timeout=BUSY_TIMEOUT_S):
                raise StoreUnavailable("the response store is busy (its lock was held too long)")
            try:
                if self._db is None:
                    self._db = self._open()
                return fn(self._db, *args)
            except sqlite3.Error as e:
                if not isinstance(e, sqlite3.OperationalError) or "locked" not in str(e):
                    # corrupt, gone, read-only...: open it again next time (it may be fixed)
                    self._drop()
                raise StoreUnavailable(f"the response store ({self.path}) failed: {e}") from None
            finally:
                self._lock.release()

        return self._guard(asyncio.to_thread(call))

    async def _guard(self, call):
        try:
            result = await call
        except StoreUnavailable as e:
            self.degraded = str(e)
            raise
        self.degraded = None
        return result

    def _drop(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except sqlite3.Error:
                pass

    @staticmethod
    def _write(db: sqlite3.Connection, fn, *args):
        db.execute("BEGIN IMMEDIATE")
        try:
            result = fn(*args)
            db.execute("COMMIT")
            return result
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _encode(self, record: dict[str, Any]) -> bytes:
        return encode_record(record, self.max_record_bytes)

    # -- records -------------------------------------------------------------------------------
    async def get(self, key: str) -> dict[str, Any] | None:
        row = await self._run(self._get, key)
        if row is None:
            return None
        record = _dec(row[2])
        record["owner"], record["worker"] = row[0], row[1]
        return record

    @staticmethod
    def _get(db: sqlite3.Connection, key: str):
        return db.execute("SELECT owner, worker, record FROM records WHERE id = ? AND expires_at > ?",
                          (key, time.time())).fetchone()

    async def create(self, key: str, owner: str, record: dict[str, Any], *, worker: str | None = None) -> bool:
        data = self._encode(record)
        return await self._run(lambda db: self._write(db, self._create, db, key, owner, data, worker))

    def _create(self, db: sqlite3.Connection, key: str, owner: str, data: bytes, worker: str | None) -> bool:
        now = time.time()
        # An expired record's id is free again (its row is only swept now and then).
        db.execute("DELETE FROM records WHERE id = ? AND expires_at <= ?", (key, now))
        cur = db.execute(
            "INSERT INTO records (id, owner, worker, stored_at, expires_at, size, record) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING",
            (key, owner, worker, now, now + self.ttl, len(data), data))
        if cur.rowcount != 1:
            return False
        if worker is not None:
            self._beat(db, worker, now)
        self._after_write(db, key, now, owner)
        return True

    async def update(self, key: str, owner: str, record: dict[str, Any], *, worker: str | None = None,
                     only_in_progress: bool = False) -> bool:
        data = self._encode(record)
        return await self._run(lambda db: self._write(db, self._update, db, key, owner, data, worker,
                                                      only_in_progress, None))

    def _update(self, db: sqlite3.Connection, key: str, owner: str, data: bytes, worker: str | None,
                only_in_progress: bool, expect_worker: str | None) -> bool:
        now = time.time()
        sql = ("UPDATE records SET record = ?, size = ?, worker = ?, expires_at = ? "
               "WHERE id = ? AND owner = ? AND expires_at > ?")
        args: list[Any] = [data, len(data), worker, now + self.ttl, key, owner, now]
        if only_in_progress:
            sql += " AND worker IS NOT NULL"
        if expect_worker is not None:
            sql += " AND worker = ?"
            args.append(expect_worker)
        if db.execute(sql, args).rowcount != 1:
            return False
        if worker is not None:
            self._beat(db, worker, now)
        self._after_write(db, key, now, owner)
        return True

    def _after_write(self, db: sqlite3.Connection, key: str, now: float, owner: str) -> None:
        """Expired rows now and then; the oldest records while a bound is exceeded: the
        writing owner's own bound first, then the store's."""
        self._writes += 1
        if self._writes % _PRUNE_EVERY == 1:
            db.execute("DELETE FROM records WHERE expires_at <= ?", (now,))
            db.execute("DELETE FROM cancels WHERE expires_at <= ?", (now,))
            db.execute("DELETE FROM workers WHERE beat < ?", (now - _WORKER_FORGET_S,))
        limit = self.owner_limit(owner)
        if limit is not None:
            row = db.execute("SELECT bytes FROM owner_totals WHERE owner = ?", (owner,)).fetchone()
            held = row[0] if row else 0
            while held > limit:
                rows = db.execute("SELECT id, size FROM records WHERE owner = ? AND id != ? ORDER BY stored_at "
                                  "LIMIT ?", (owner, key, _EVICT_CHUNK)).fetchall()
                if not rows:
                    break
                gone = []
                for rid, size in rows:
                    if held <= limit:
                        break
                    gone.append(rid)
                    held -= size
                db.executemany("DELETE FROM records WHERE id = ?", [(rid,) for rid in gone])
        total, entries = db.execute("SELECT bytes, entries FROM totals WHERE k = 0").fetchone()
        while total > self.max_bytes or entries > self.max_entries:
            # From the owner that holds the most, its oldest first: one tenant storing a lot
            # evicts its own responses, not another's.
            top = db.execute("SELECT owner FROM owner_totals ORDER BY bytes DESC LIMIT 1").fetchone()
            rows = db.execute("SELECT id, size FROM records WHERE owner = ? AND id != ? ORDER BY stored_at LIMIT ?",
                              (top[0] if top else "", key, _EVICT_CHUNK)).fetchall() if top else []
            if not rows:
                rows = db.execute("SELECT id, size FROM records WHERE id != ? ORDER BY stored_at LIMIT ?",
                                  (key, _EVICT_CHUNK)).fetchall()
            if not rows:
                break
            gone = []
            for rid, size in rows:
                if total <= self.max_bytes and entries <= self.max_entries:
                    break
                gone.append(rid)
                total, entries = total - size, entries - 1
            db.executemany("DELETE FROM records WHERE id = ?", [(rid,) for rid in gone])

    # -- cancel flags ------------------------------------------------------------------------
    async def request_cancel(self, key: str) -> None:
        await self._run(lambda db: db.execute("INSERT OR REPLACE INTO cancels (id, expires_at) VALUES (?, ?)",
                                              (key, time.time() + self.ttl)))

    async def cancel_requested(self, keys: list[str]) -> set[str]:
        if not keys:
            return set()
        return await self._run(self._cancel_requested, list(keys))

    @staticmethod
    def _cancel_requested(db: sqlite3.Connection, keys: list[str]) -> set[str]:
        marks = ",".join("?" * len(keys))
        rows = db.execute(f"SELECT id FROM cancels WHERE id IN ({marks})", keys).fetchall()
        return {r[0] for r in rows}

    # -- owner liveness ------------------------------------------------------------------------
    @staticmethod
    def _beat(db: sqlite3.Connection, worker: str, now: float) -> None:
        db.execute("INSERT INTO workers (id, beat) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET beat = excluded.beat",
                   (worker, now))

    async def heartbeat(self, worker: str) -> None:
        await self._run(lambda db: self._beat(db, worker, time.time()))

    async def worker_alive(self, worker: str) -> bool:
        row = await self._run(lambda db: db.execute("SELECT beat FROM workers WHERE id = ?", (worker,)).fetchone())
        return row is not None and row[0] > time.time() - STALE_S

    async def fail_orphans(self, mark: MarkOrphan) -> list[str]:
        return await self._run(self._fail_orphans, mark)

    def _fail_orphans(self, db: sqlite3.Connection, mark: MarkOrphan) -> list[str]:
        now = time.time()
        rows = db.execute(
            "SELECT r.id, r.owner, r.worker, r.record FROM records r LEFT JOIN workers w ON w.id = r.worker "
            "WHERE r.worker IS NOT NULL AND r.expires_at > ? AND (w.beat IS NULL OR w.beat < ?)",
            (now, now - STALE_S)).fetchall()
        if not rows:
            return []
        failed = []

        def write() -> None:
            for rid, owner, worker, blob in rows:
                data = _enc(mark(_dec(blob)))
                if self._update(db, rid, owner, data, None, True, worker):
                    failed.append(rid)

        self._write(db, write)
        return failed

    async def probe(self) -> None:
        await self._run(lambda db: db.execute("SELECT bytes FROM totals WHERE k = 0").fetchone())

    async def close(self) -> None:
        with self._lock:
            self._drop()
