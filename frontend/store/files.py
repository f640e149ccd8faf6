"""Uploaded and generated files (`/v1/files`): metadata in a shared store, contents on disk.

The contents of file `<id>` are `<files_dir>/<id>`, written once (to a temporary name, then
renamed) and never changed; the metadata (OpenAI's File object plus its owner) is a row of the
same SQLite file the batches use (`<files_dir>/batches.sqlite3`, WAL, shared by every worker), or
a Redis hash when the deployment's store is Redis (several replicas: `files_dir` must then be a
directory they all mount). An owner reads only its own files: another owner's id is not found.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from typing import Any, Protocol

import msgspec

DB_NAME = "batches.sqlite3"


class FileRecord(msgspec.Struct, frozen=True):
    id: str
    owner: str
    purpose: str
    filename: str
    bytes: int
    created_at: float

    def to_object(self) -> dict[str, Any]:
        """OpenAI's File object."""
        return {"id": self.id, "object": "file", "bytes": self.bytes, "created_at": int(self.created_at),
                "filename": self.filename, "purpose": self.purpose, "status": "processed",
                "expires_at": None, "status_details": None}


class FileStore(Protocol):
    async def add(self, rec: FileRecord, max_total_bytes: int | None = None,
                  max_owner_bytes: int | None = None) -> bool:
        """Record `rec`; False (nothing recorded) when all files together would pass
        `max_total_bytes`, or its owner's would pass `max_owner_bytes`."""

    async def get(self, file_id: str, owner: str) -> FileRecord | None: ...

    async def list(self, owner: str, *, purpose: str | None, after: str | None, limit: int,
                   order: str) -> tuple[list[FileRecord], bool]: ...

    async def delete(self, file_id: str, owner: str) -> bool: ...

    async def close(self) -> None: ...


class FileContents:
    """The files' bytes under one directory."""

    def __init__(self, files_dir: str):
        self.dir = files_dir
        os.makedirs(files_dir, mode=0o700, exist_ok=True)

    def path(self, file_id: str) -> str:
        return os.path.join(self.dir, file_id)

    def temp_path(self, file_id: str) -> str:
        return os.path.join(self.dir, f".{file_id}.{os.getpid()}.part")

    def publish(self, temp: str, file_id: str) -> None:
        os.replace(temp, self.path(file_id))

    def write(self, file_id: str, data: bytes) -> None:
        """Write `data` as the contents of `file_id` (atomically: readers see all or nothing)."""
        temp = self.temp_path(file_id)
        with open(temp, "wb") as f:
            f.write(data)
        self.publish(temp, file_id)

    def remove(self, file_id: str) -> None:
        try:
            os.unlink(self.path(file_id))
        except FileNotFoundError:
            pass


def enable_wal(db: sqlite3.Connection, tries: int = 100) -> None:
    """The file in WAL mode (kept in the file: set once, by whichever worker opens it first).
    Changing the mode while another worker opens the same new file can be refused at once
    (SQLite does not wait on its busy timeout for it): tried again for up to ~5 s."""
    for attempt in range(tries):
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                return
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e) or attempt == tries - 1:
                raise
            time.sleep(0.05)


class SQLiteDB:
    """One SQLite connection used from threads, one short transaction per call."""

    def __init__(self, path: str, schema: str):
        self.path = path
        self._lock = threading.Lock()
        self.db = sqlite3.connect(path, timeout=30.0, check_same_thread=False, isolation_level=None)
        with self._lock:
            enable_wal(self.db)
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(schema)

    def run(self, fn, *args):
        def call():
            with self._lock:
                return fn(*args)

        return asyncio.to_thread(call)

    def transaction(self, fn, *args):
        """`fn(db, *args)` inside BEGIN IMMEDIATE ... COMMIT, in a thread."""
        def call():
            with self._lock:
                db = self.db
                db.execute("BEGIN IMMEDIATE")
                try:
                    out = fn(db, *args)
                    db.execute("COMMIT")
                    return out
                except BaseException:
                    db.execute("ROLLBACK")
                    raise

        return asyncio.to_thread(call)

    def close(self) -> None:
        with self._lock:
            self.db.close()


_FILES_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    purpose TEXT NOT NULL,
    filename TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS files_owner ON files(owner, created_at);
"""
_COLS = "id, owner, purpose, filename, bytes, created_at"


class SQLiteFileStore:
    def __init__(self, path: str):
        self._db = SQLiteDB(path, _FILES_SCHEMA)

    async def add(self, rec: FileRecord, max_total_bytes: int | None = None,
                  max_owner_bytes: int | None = None) -> bool:
        return await self._db.transaction(self._add, rec, max_total_bytes, max_owner_bytes)

    @staticmethod
    def _add(db, rec: FileRecord, max_total: int | None, max_owner: int | None) -> bool:
        if max_total is not None:
            (total,) = db.execute("SELECT COALESCE(SUM(bytes), 0) FROM files").fetchone()
            if total + rec.bytes > max_total:
                return False
        if max_owner is not None:
            (total,) = db.execute("SELECT COALESCE(SUM(bytes), 0) FROM files WHERE owner = ?", (rec.owner,)).fetchone()
            if total + rec.bytes > max_owner:
                return False
        db.execute(f"INSERT OR REPLACE INTO files ({_COLS}) VALUES (?, ?, ?, ?, ?, ?)",
                   (rec.id, rec.owner, rec.purpose, rec.filename, rec.bytes, rec.created_at))
        return True

    async def get(self, file_id: str, owner: str) -> FileRecord | None:
        row = await self._db.run(lambda: self._db.db.execute(
            f"SELECT {_COLS} FROM files WHERE id = ? AND owner = ?", (file_id, owner)).fetchone())
        return None if row is None else FileRecord(*row)

    async def list(self, owner: str, *, purpose: str | None, after: str | None, limit: int,
                   order: str) -> tuple[list[FileRecord], bool]:
        def query():
            cmp, direction = ("<", "DESC") if order == "desc" else (">", "ASC")
            sql = f"SELECT {_COLS} FROM files WHERE owner = ?"
            args: list[Any] = [owner]
            if purpose:
                sql += " AND purpose = ?"
                args.append(purpose)
            if after:
                sql += (f" AND (created_at, id) {cmp} (SELECT created_at, id FROM files WHERE id = ? AND owner = ?)")
                args += [after, owner]
            sql += f" ORDER BY created_at {direction}, id {direction} LIMIT ?"
            args.append(limit + 1)
            return self._db.db.execute(sql, args).fetchall()

        rows = await self._db.run(query)
        return [FileRecord(*r) for r in rows[:limit]], len(rows) > limit

    async def delete(self, file_id: str, owner: str) -> bool:
        cur = await self._db.run(self._db.db.execute, "DELETE FROM files WHERE id = ? AND owner = ?",
                                 (file_id, owner))
        return cur.rowcount > 0

    async def close(self) -> None:
        self._db.close()


class RedisFileStore:
    """Keys (prefix `vpf:`): `file:<id>` the record (JSON), `files:<owner>` a sorted set of the
    owner's ids by creation time, `files:bytes` the total size of all files, `files:bytes:<owner>`
    an owner's."""

    PREFIX = "vpf:"

    def __init__(self, url: str):
        import redis.asyncio as aioredis

        self._redis = aioredis.from_url(url)

    async def add(self, rec: FileRecord, max_total_bytes: int | None = None,
                  max_owner_bytes: int | None = None) -> bool:
        total_key, owner_key = self.PREFIX + "files:bytes", f"{self.PREFIX}files:bytes:{rec.owner}"
        async with self._redis.pipeline(transaction=True) as p:
            p.incrby(total_key, rec.bytes)
            p.incrby(owner_key, rec.bytes)
            total, owned = await p.execute()
        if (max_total_bytes is not None and total > max_total_bytes) or \
                (max_owner_bytes is not None and owned > max_owner_bytes):
            async with self._redis.pipeline(transaction=True) as p:
                p.decrby(total_key, rec.bytes)
                p.decrby(owner_key, rec.bytes)
                await p.execute()
            return False
        async with self._redis.pipeline(transaction=True) as p:
            p.set(f"{self.PREFIX}file:{rec.id}", msgspec.json.encode(rec))
            p.zadd(f"{self.PREFIX}files:{rec.owner}", {rec.id: rec.created_at})
            await p.execute()
        return True

    async def get(self, file_id: str, owner: str) -> FileRecord | None:
        data = await self._redis.get(f"{self.PREFIX}file:{file_id}")
        if data is None:
            return None
        rec = msgspec.json.decode(data, type=FileRecord)
        return rec if rec.owner == owner else None

    async def list(self, owner: str, *, purpose: str | None, after: str | None, limit: int,
                   order: str) -> tuple[list[FileRecord], bool]:
        ids = [i.decode() for i in await self._redis.zrange(f"{self.PREFIX}files:{owner}", 0, -1)]
        if order == "desc":
            ids.reverse()
        if after and after in ids:
            ids = ids[ids.index(after) + 1:]
        out: list[FileRecord] = []
        for chunk_start in range(0, len(ids), 256):
            chunk = ids[chunk_start:chunk_start + 256]
            for data in await self._redis.mget([f"{self.PREFIX}file:{i}" for i in chunk]):
                if data is None:
                    continue
                rec = msgspec.json.decode(data, type=FileRecord)
                if purpose and rec.purpose != purpose:
                    continue
                out.append(rec)
                if len(out) > limit:
                    return out[:limit], True
        return out, False

    async def delete(self, file_id: str, owner: str) -> bool:
        rec = await self.get(file_id, owner)
        if rec is None:
            return False
        async with self._redis.pipeline(transaction=True) as p:
            p.delete(f"{self.PREFIX}file:{file_id}")
            p.zrem(f"{self.PREFIX}files:{owner}", file_id)
            p.decrby(self.PREFIX + "files:bytes", rec.bytes)
            p.decrby(f"{self.PREFIX}files:bytes:{owner}", rec.bytes)
            await p.execute()
        return True

    async def close(self) -> None:
        await self._redis.aclose()


def is_redis_url(url: str | None) -> bool:
    return bool(url) and url.startswith(("redis://", "rediss://", "unix://"))


def open_file_store(store_url: str | None, files_dir: str) -> FileStore:
    """Redis when the deployment's store URL is Redis, else SQLite in `files_dir`."""
    if is_redis_url(store_url):
        return RedisFileStore(store_url)  # type: ignore[arg-type]
    os.makedirs(files_dir, mode=0o700, exist_ok=True)
    return SQLiteFileStore(os.path.join(files_dir, DB_NAME))


