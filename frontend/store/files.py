"""Uploaded and generated files (`/v1/files`): metadata in a shared store, contents on disk.

The contents of file `<id>` are `<files_dir>/<id>`, written once (to a temporary name, then
renamed) and never changed; the metadata (OpenAI's File object plus its owner) is a row of the
same SQLite file the batches use (`<files_dir>/batches.sqlite3`, WAL, shared by every worker), or
a Redis hash when the deployment's store is Redis (several replicas: `files_dir` must then be a
directory they all mount). An owner reads only its own files: another owner's id is not found.

A file may expire (`expires_at`: OpenAI's `expires_after`, a batch's `output_expires_after`):
from then on it is not found, counts toward no bound, and `expire_files` removes its record and
its contents (the batch runner's periodic sweep, an upload, and a lookup that finds nothing).
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
EXPIRE_CHUNK = 256  # expired files removed per `expire` call


class FileRecord(msgspec.Struct, frozen=True):
    id: str
    owner: str
    purpose: str
    filename: str
    bytes: int
    created_at: float
    expires_at: float | None = None  # None: kept until deleted

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def to_object(self) -> dict[str, Any]:
        """OpenAI's File object."""
        return {"id": self.id, "object": "file", "bytes": self.bytes, "created_at": int(self.created_at),
                "filename": self.filename, "purpose": self.purpose, "status": "processed",
                "expires_at": None if self.expires_at is None else int(self.expires_at), "status_details": None}


class FileStore(Protocol):
    """`now` (default: the time of the call) decides which files have expired: those are not
    found by `get`, `list` and `delete`."""

    async def add(self, rec: FileRecord, max_total_bytes: int | None = None,
                  max_owner_bytes: int | None = None) -> bool:
        """Record `rec`; False (nothing recorded) when all files together would pass
        `max_total_bytes`, or its owner's would pass `max_owner_bytes` (expired files count
        until `expire` removes them on Redis; never on SQLite)."""

    async def get(self, file_id: str, owner: str, *, now: float | None = None) -> FileRecord | None: ...

    async def list(self, owner: str, *, purpose: str | None, after: str | None, limit: int,
                   order: str, now: float | None = None) -> tuple[list[FileRecord], bool]: ...

    async def delete(self, file_id: str, owner: str) -> bool: ...

    async def stored_bytes(self, owner: str, exclude: tuple[str, ...] = ()) -> int:
        """The bytes of `owner`'s live files, those in `exclude` left out."""

    async def expire(self, now: float | None = None, *, file_ids: list[str] | None = None,
                     limit: int = EXPIRE_CHUNK) -> list[str]:
        """Remove the records of files expired at `now` (any owner's; of `file_ids` only, when
        given), at most `limit` of them; their ids (the caller removes their contents)."""

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


_VERSIONS = "CREATE TABLE IF NOT EXISTS schema_versions (name TEXT PRIMARY KEY, version INTEGER NOT NULL);"


class SQLiteDB:
    """One SQLite connection used from threads, one short transaction per call.

    `schema`: the tables as first released (`CREATE ... IF NOT EXISTS`); `upgrades`: the changes
    made to them since, in order, each a tuple of statements. The file records how many of a
    store's upgrades it has (`schema_versions`, one row per store `name`: the files' and the
    batches' tables share the file, so its one `user_version`, which the response store uses,
    cannot count both), and an opener applies the rest in one transaction: a file made by an
    older release keeps its rows and gains the new columns; one that is up to date is only read."""

    def __init__(self, path: str, schema: str, *, name: str = "", upgrades: tuple[tuple[str, ...], ...] = ()):
        self.path = path
        self._lock = threading.Lock()
        self.db = sqlite3.connect(path, timeout=30.0, check_same_thread=False, isolation_level=None)
        with self._lock:
            enable_wal(self.db)
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(schema + (_VERSIONS if upgrades else ""))
            if upgrades:
                self._upgrade(name, upgrades)

    def _upgrade(self, name: str, upgrades: tuple[tuple[str, ...], ...]) -> None:
        db = self.db

        def version() -> int:
            row = db.execute("SELECT version FROM schema_versions WHERE name = ?", (name,)).fetchone()
            return 0 if row is None else row[0]

        if version() >= len(upgrades):
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            for step in upgrades[version():]:  # (read again under the lock: another opener may have done it)
                for statement in step:
                    db.execute(statement)
            db.execute("INSERT OR REPLACE INTO schema_versions (name, version) VALUES (?, ?)", (name, len(upgrades)))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

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
_FILES_UPGRADES = (
    # 1: files expire (OpenAI's `expires_after`)
    ("ALTER TABLE files ADD COLUMN expires_at REAL",
     "CREATE INDEX IF NOT EXISTS files_expiry ON files(expires_at) WHERE expires_at IS NOT NULL"),
)
_COLS = "id, owner, purpose, filename, bytes, created_at, expires_at"
_LIVE = "(expires_at IS NULL OR expires_at > ?)"


def _now(now: float | None) -> float:
    return time.time() if now is None else now


class SQLiteFileStore:
    def __init__(self, path: str):
        self._db = SQLiteDB(path, _FILES_SCHEMA, name="files", upgrades=_FILES_UPGRADES)

    async def add(self, rec: FileRecord, max_total_bytes: int | None = None,
                  max_owner_bytes: int | None = None) -> bool:
        return await self._db.transaction(self._add, rec, max_total_bytes, max_owner_bytes)

    @staticmethod
    def _add(db, rec: FileRecord, max_total: int | None, max_owner: int | None) -> bool:
        now = time.time()
        if max_total is not None:
            (total,) = db.execute(f"SELECT COALESCE(SUM(bytes), 0) FROM files WHERE {_LIVE}", (now,)).fetchone()
            if total + rec.bytes > max_total:
                return False
        if max_owner is not None:
            (total,) = db.execute(f"SELECT COALESCE(SUM(bytes), 0) FROM files WHERE owner = ? AND {_LIVE}",
                                  (rec.owner, now)).fetchone()
            if total + rec.bytes > max_owner:
                return False
        db.execute(f"INSERT OR REPLACE INTO files ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (rec.id, rec.owner, rec.purpose, rec.filename, rec.bytes, rec.created_at, rec.expires_at))
        return True

    async def stored_bytes(self, owner: str, exclude: tuple[str, ...] = ()) -> int:
        marks = ", ".join("?" * len(exclude))
        query = (f"SELECT COALESCE(SUM(bytes), 0) FROM files WHERE owner = ? AND {_LIVE}"
                 + (f" AND id NOT IN ({marks})" if exclude else ""))
        row = await self._db.run(lambda: self._db.db.execute(query, (owner, time.time(), *exclude)).fetchone())
        return int(row[0])

    async def get(self, file_id: str, owner: str, *, now: float | None = None) -> FileRecord | None:
        row = await self._db.run(lambda: self._db.db.execute(
            f"SELECT {_COLS} FROM files WHERE id = ? AND owner = ? AND {_LIVE}",
            (file_id, owner, _now(now))).fetchone())
        return None if row is None else FileRecord(*row)

    async def list(self, owner: str, *, purpose: str | None, after: str | None, limit: int,
                   order: str, now: float | None = None) -> tuple[list[FileRecord], bool]:
        def query():
            cmp, direction = ("<", "DESC") if order == "desc" else (">", "ASC")
            sql = f"SELECT {_COLS} FROM files WHERE owner = ? AND {_LIVE}"
            args: list[Any] = [owner, _now(now)]
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
        cur = await self._db.run(self._db.db.execute, f"DELETE FROM files WHERE id = ? AND owner = ? AND {_LIVE}",
                                 (file_id, owner, time.time()))
        return cur.rowcount > 0

    async def expire(self, now: float | None = None, *, file_ids: list[str] | None = None,
                     limit: int = EXPIRE_CHUNK) -> list[str]:
        now = _now(now)
        sql = "SELECT id FROM files WHERE expires_at <= ?"
        args: list[Any] = [now]
        if file_ids is not None:
            if not file_ids:
                return []
            sql += f" AND id IN ({','.join('?' * len(file_ids))})"
            args += file_ids
        sql += " LIMIT ?"
        args.append(limit)

        def tx(db) -> list[str]:
            ids = [i for (i,) in db.execute(sql, args).fetchall()]
            db.executemany("DELETE FROM files WHERE id = ?", [(i,) for i in ids])
            return ids

        # (read first: a sweep that finds nothing, the usual case, takes no write lock)
        if not await self._db.run(lambda: self._db.db.execute(sql, args).fetchone()):
            return []
        return await self._db.transaction(tx)

    async def close(self) -> None:
        self._db.close()


# A file's record leaves with everything that counts it, atomically (two workers sweeping the
# same expired file, or a delete racing the sweep, take its bytes off the totals once).
# ARGV: prefix, id, owner ("": any), now, mode ("live": only if not expired at `now`, as a
# delete; "expired": only if expired at `now`, as the sweep). Returns 1 if removed.
_FORGET = """
local P, id, owner, now, mode = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local key = P .. 'file:' .. id
local data = redis.call('GET', key)
if not data then
  redis.call('ZREM', P .. 'files:expiring', id)
  return 0
end
local rec = cjson.decode(data)
if owner ~= '' and rec.owner ~= owner then return 0 end
local expires = type(rec.expires_at) == 'number' and rec.expires_at or nil
if (expires ~= nil and expires <= now) ~= (mode == 'expired') then
  if mode == 'expired' then  -- (the index disagrees with a record written again since: mended)
    if expires then redis.call('ZADD', P .. 'files:expiring', expires, id)
    else redis.call('ZREM', P .. 'files:expiring', id) end
  end
  return 0
end
redis.call('DEL', key)
redis.call('ZREM', P .. 'files:' .. rec.owner, id)
redis.call('ZREM', P .. 'files:expiring', id)
redis.call('DECRBY', P .. 'files:bytes', rec.bytes)
redis.call('DECRBY', P .. 'files:bytes:' .. rec.owner, rec.bytes)
return 1
"""


class RedisFileStore:
    """Keys (prefix `vpf:`): `file:<id>` the record (JSON), `files:<owner>` a sorted set of the
    owner's ids by creation time, `files:expiring` the ids of files that expire by expiry time,
    `files:bytes` the total size of all files, `files:bytes:<owner>` an owner's (an expired file
    counts until `expire` removes it)."""

    PREFIX = "vpf:"

    def __init__(self, url: str):
        import redis.asyncio as aioredis

        self._redis = aioredis.from_url(url)
        self._forget = self._redis.register_script(_FORGET)

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
            if rec.expires_at is not None:
                p.zadd(self.PREFIX + "files:expiring", {rec.id: rec.expires_at})
            else:
                p.zrem(self.PREFIX + "files:expiring", rec.id)
            await p.execute()
        return True

    async def stored_bytes(self, owner: str, exclude: tuple[str, ...] = ()) -> int:
        total = int(await self._redis.get(f"{self.PREFIX}files:bytes:{owner}") or 0)
        for file_id in exclude:
            raw = await self._redis.get(f"{self.PREFIX}file:{file_id}")
            if raw is not None:
                total -= msgspec.json.decode(raw, type=FileRecord).bytes
        return max(0, total)

    async def get(self, file_id: str, owner: str, *, now: float | None = None) -> FileRecord | None:
        data = await self._redis.get(f"{self.PREFIX}file:{file_id}")
        if data is None:
            return None
        rec = msgspec.json.decode(data, type=FileRecord)
        return rec if rec.owner == owner and not rec.expired(_now(now)) else None

    async def list(self, owner: str, *, purpose: str | None, after: str | None, limit: int,
                   order: str, now: float | None = None) -> tuple[list[FileRecord], bool]:
        now = _now(now)
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
                if (purpose and rec.purpose != purpose) or rec.expired(now):
                    continue
                out.append(rec)
                if len(out) > limit:
                    return out[:limit], True
        return out, False

    async def delete(self, file_id: str, owner: str) -> bool:
        return bool(await self._forget(args=[self.PREFIX, file_id, owner, repr(time.time()), "live"]))

    async def expire(self, now: float | None = None, *, file_ids: list[str] | None = None,
                     limit: int = EXPIRE_CHUNK) -> list[str]:
        now = _now(now)
        if file_ids is None:
            file_ids = [i.decode() for i in await self._redis.zrangebyscore(
                self.PREFIX + "files:expiring", "-inf", now, start=0, num=limit)]
        gone = []
        for file_id in file_ids[:limit]:
            if await self._forget(args=[self.PREFIX, file_id, "", repr(now), "expired"]):
                gone.append(file_id)
        return gone

    async def close(self) -> None:
        await self._redis.aclose()


async def expire_files(files: FileStore, contents: FileContents, *, now: float | None = None,
                       file_ids: list[str] | None = None) -> list[str]:
    """Remove the files expired at `now` (up to `EXPIRE_CHUNK` of them; only those of `file_ids`
    when given): their records, then their contents. The ids removed."""
    gone = await files.expire(now, file_ids=file_ids)
    if gone:
        await asyncio.to_thread(lambda: [contents.remove(i) for i in gone])
    return gone


def is_redis_url(url: str | None) -> bool:
    return bool(url) and url.startswith(("redis://", "rediss://", "unix://"))


def open_file_store(store_url: str | None, files_dir: str) -> FileStore:
    """Redis when the deployment's store URL is Redis, else SQLite in `files_dir`."""
    if is_redis_url(store_url):
        return RedisFileStore(store_url)  # type: ignore[arg-type]
    os.makedirs(files_dir, mode=0o700, exist_ok=True)
    return SQLiteFileStore(os.path.join(files_dir, DB_NAME))


