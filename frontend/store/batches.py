"""Batches and their lines, in the store every worker shares (`<files_dir>/batches.sqlite3`).

A batch is a row (OpenAI's Batch object as JSON, its status, and a lease for the batch-level
steps: validating the input file, assembling the output); each request line is a row of its
own with a state (pending, running, done), a lease and, once done, its answer. Any worker may
claim work: a claim is one transaction that takes pending lines, or running lines whose lease
expired (their worker died), up to the deployment's concurrency bound counted over the running
leases of every worker. A worker renews the leases of the lines it runs; a line's answer is
recorded only by the holder of its lease and only once (`complete` checks both in the same
transaction), and the output file is assembled from these rows when the batch finalizes, so
each line is answered exactly once whatever died or restarted in between.
"""

from __future__ import annotations

import os
import time
from typing import Any, Protocol

import msgspec

from vllm_pyfrontend.store.files import DB_NAME, SQLiteDB, is_redis_url

PENDING, RUNNING, DONE = 0, 1, 2
# Statuses whose lines may still run; the terminal ones.
ACTIVE = ("validating", "in_progress")
ENDED = ("completed", "failed", "expired", "cancelled")
TERMINAL = ("completed", "failed", "expired", "cancelled")
STATUSES = ("validating", "in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled")


class Line(msgspec.Struct, frozen=True, array_like=True):
    """A line to run: which batch, its index in the input file, its custom_id and its body."""
    batch_id: str
    idx: int
    custom_id: str
    url: str
    body: bytes
    owner: str  # the batch's owner scope and tenant name: the line runs as that tenant
    tenant: str


class NewLine(msgspec.Struct, frozen=True, array_like=True):
    """A line of a validated input file: pending (`error` None) or answered at once with the
    error-file entry `error` (a malformed line)."""
    idx: int
    custom_id: str | None
    body: bytes | None
    error: bytes | None = None


def task_step(status: str, past_window: bool, final_status: str | None) -> tuple[str, str | None]:
    """The step a claimed batch is due for, (`validate` or `finalize`, the final status)."""
    if status in ACTIVE and past_window:
        return "finalize", "expired"
    if status == "validating":
        return "validate", None
    if status == "in_progress":
        return "finalize", "completed"
    if status == "cancelling":
        return "finalize", "cancelled"
    return "finalize", final_status or "completed"  # finalizing: a step whose worker died


class Task(msgspec.Struct, frozen=True):
    """Batch-level work a worker claimed: `validate`, or `finalize` into `final_status`;
    `output_expires_s`: the output and error files expire this long after they are written
    (the batch's `output_expires_after`; None: kept until deleted)."""
    kind: str
    batch: dict[str, Any]
    owner: str
    final_status: str | None = None
    output_expires_s: int | None = None


class BatchStore(Protocol):
    async def create(self, batch: dict[str, Any], owner: str, tenant: str, *,
                     output_expires_s: int | None = None) -> None: ...

    async def get(self, batch_id: str, owner: str | None) -> dict[str, Any] | None: ...

    async def list(self, owner: str, *, after: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]: ...

    async def cancel(self, batch_id: str, owner: str) -> dict[str, Any] | None: ...

    async def claim_task(self, me: str, lease_s: float) -> Task | None: ...

    async def start_run(self, batch_id: str, me: str, lines: list[NewLine]) -> bool: ...

    async def fail(self, batch_id: str, me: str, errors: list[dict[str, Any]]) -> bool: ...

    async def claim_lines(self, me: str, want: int, max_running: int, lease_s: float) -> list[Line]: ...

    async def renew(self, me: str, lease_s: float) -> None: ...

    async def complete(self, me: str, batch_id: str, idx: int, answer: bytes, failed: bool) -> bool: ...

    async def release(self, me: str, keys: list[tuple[str, int]]) -> None: ...

    async def statuses(self, batch_ids: list[str]) -> dict[str, str]: ...

    async def answers(self, batch_id: str, after: int = -1, limit: int = -1) -> list[tuple[int, bool, bytes]]:
        """The recorded answers (index, failed, answer) of indexes above `after`, in index
        order, at most `limit` of them (-1: all)."""

    async def begin_finalize(self, batch_id: str, me: str, final_status: str, unfinished_answer) -> bool: ...

    async def end_finalize(self, batch_id: str, me: str, output_file_id: str | None,
                           error_file_id: str | None) -> bool: ...

    async def counts_by_status(self) -> dict[str, int]: ...

    async def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    tenant TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    status TEXT NOT NULL,
    final_status TEXT,
    record BLOB NOT NULL,
    lease_owner TEXT,
    lease_until REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS batches_owner ON batches(owner, created_at);
CREATE INDEX IF NOT EXISTS batches_status ON batches(status);
CREATE TABLE IF NOT EXISTS batch_lines (
    batch_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    custom_id TEXT,
    body BLOB,
    state INTEGER NOT NULL,
    lease_owner TEXT,
    lease_until REAL NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    answer BLOB,
    PRIMARY KEY (batch_id, idx)
);
CREATE INDEX IF NOT EXISTS batch_lines_state ON batch_lines(state, batch_id);
CREATE INDEX IF NOT EXISTS batch_lines_batch_state ON batch_lines(batch_id, state);
CREATE INDEX IF NOT EXISTS batch_lines_lease ON batch_lines(lease_owner);
CREATE TABLE IF NOT EXISTS batch_runners (
    me TEXT PRIMARY KEY,
    seen_at REAL NOT NULL
);
"""
_UPGRADES = (
    # 1: the batch's `output_expires_after` (seconds)
    ("ALTER TABLE batches ADD COLUMN output_expires_s INTEGER",),
)

# The timestamp field OpenAI's object sets when a batch enters each status.
STATUS_TIME = {"in_progress": "in_progress_at", "finalizing": "finalizing_at", "completed": "completed_at",
               "failed": "failed_at", "expired": "expired_at", "cancelling": "cancelling_at",
               "cancelled": "cancelled_at"}


def _fair_lines(db, now: float, n: int) -> list[tuple]:
    """The next `n` lines to run, fair across owners: each goes to the owner with the fewest
    lines running now (ties: the owner of the older batch), from that owner's oldest batch
    first. One owner's 50,000-line batch never holds another owner's one line for long."""
    runnable = (f" FROM batch_lines l JOIN batches b ON b.id = l.batch_id"
                f" WHERE b.status = 'in_progress' AND b.expires_at > ? AND"
                f" (l.state = {PENDING} OR (l.state = {RUNNING} AND l.lease_until <= ?))")
    owners = [o for (o,) in db.execute(
        "SELECT owner FROM batches WHERE status = 'in_progress' AND expires_at > ? "
        "GROUP BY owner ORDER BY MIN(created_at)", (now,)).fetchall()]
    if len(owners) <= 1:
        return db.execute(
            "SELECT l.batch_id, l.idx, l.custom_id, b.record, l.body, b.owner, b.tenant" + runnable
            + " ORDER BY b.created_at, l.idx LIMIT ?", (now, now, n)).fetchall()
    running = dict(db.execute(
        f"SELECT b.owner, COUNT(*) FROM batch_lines l JOIN batches b ON b.id = l.batch_id "
        f"WHERE l.state = {RUNNING} AND l.lease_until > ? GROUP BY b.owner", (now,)).fetchall())
    queues = {o: db.execute(
        "SELECT l.batch_id, l.idx, l.custom_id, b.record, l.body, b.owner, b.tenant" + runnable
        + " AND b.owner = ? ORDER BY b.created_at, l.idx LIMIT ?", (now, now, o, n)).fetchall()[::-1]
        for o in owners}
    order = {o: k for k, o in enumerate(owners)}
    rows = []
    while len(rows) < n:
        ready = [o for o in owners if queues[o]]
        if not ready:
            break
        o = min(ready, key=lambda x: (running.get(x, 0), order[x]))
        rows.append(queues[o].pop())
        running[o] = running.get(o, 0) + 1
    return rows


def _counts(db, batch_id: str) -> dict[str, int]:
    total = completed = failed = 0
    for state, is_failed, n in db.execute(
            "SELECT state, failed, COUNT(*) FROM batch_lines WHERE batch_id = ? GROUP BY state, failed",
            (batch_id,)):
        total += n
        if state == DONE:
            if is_failed:
                failed += n
            else:
                completed += n
    return {"total": total, "completed": completed, "failed": failed}


def _object(db, row) -> dict[str, Any]:
    """OpenAI's Batch object from a row (id, status, record)."""
    batch_id, status, record = row
    obj = msgspec.json.decode(record)
    obj["status"] = status
    if status not in ENDED:  # (an ended batch keeps its counts in its record; its lines are gone)
        obj["request_counts"] = _counts(db, batch_id)
    return obj


class SQLiteBatchStore:
    def __init__(self, path: str):
        self._db = SQLiteDB(path, _SCHEMA, name="batches", upgrades=_UPGRADES)

    # -- the API's side ----------------------------------------------------------------------------
    async def create(self, batch: dict[str, Any], owner: str, tenant: str, *,
                     output_expires_s: int | None = None) -> None:
        await self._db.run(
            self._db.db.execute,
            "INSERT INTO batches (id, owner, tenant, created_at, expires_at, status, record, output_expires_s) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (batch["id"], owner, tenant, time.time(), batch["expires_at"], batch["status"],
             msgspec.json.encode(batch), output_expires_s))

    async def get(self, batch_id: str, owner: str | None) -> dict[str, Any] | None:
        def query():
            db = self._db.db
            if owner is None:
                row = db.execute("SELECT id, status, record FROM batches WHERE id = ?", (batch_id,)).fetchone()
            else:
                row = db.execute("SELECT id, status, record FROM batches WHERE id = ? AND owner = ?",
                                 (batch_id, owner)).fetchone()
            return None if row is None else _object(db, row)

        return await self._db.run(query)

    async def list(self, owner: str, *, after: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        def query():
            db = self._db.db
            sql = "SELECT id, status, record FROM batches WHERE owner = ?"
            args: list[Any] = [owner]
            if after:
                sql += " AND (created_at, id) < (SELECT created_at, id FROM batches WHERE id = ? AND owner = ?)"
                args += [after, owner]
            sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
            args.append(limit + 1)
            rows = db.execute(sql, args).fetchall()
            return [_object(db, r) for r in rows[:limit]], len(rows) > limit

        return await self._db.run(query)

    async def cancel(self, batch_id: str, owner: str) -> dict[str, Any] | None:
        """Move a validating or running batch to `cancelling` (its lines stop being claimed; the
        workers running some abort them); the object, or None for an unknown id."""
        def tx(db):
            row = db.execute("SELECT id, status, record FROM batches WHERE id = ? AND owner = ?",
                             (batch_id, owner)).fetchone()
            if row is None:
                return None
            if row[1] in ACTIVE:
                record = _set_status(db, batch_id, row[2], "cancelling", final_status="cancelled")
                row = (batch_id, "cancelling", record)
            return _object(db, row)

        return await self._db.transaction(tx)

    # -- the runners' side -------------------------------------------------------------------------
    async def claim_task(self, me: str, lease_s: float) -> Task | None:
        """Claim one batch-level step that is due: validate a new batch, expire one past its
        window, finalize one with nothing left to run (or cancelled, once none of its lines runs),
        or take over a step whose worker died."""
        def tx(db):
            now = time.time()
            free = "(lease_until <= ?)"
            row = db.execute(
                f"SELECT id, status, record, final_status, owner, output_expires_s FROM batches WHERE {free} AND ("
                f" (status IN ('validating', 'in_progress') AND expires_at <= ?)"
                f" OR status = 'validating' OR status = 'finalizing'"
                f" OR (status = 'in_progress' AND NOT EXISTS (SELECT 1 FROM batch_lines l WHERE"
                f"     l.batch_id = batches.id AND l.state != {DONE}))"
                f" OR (status = 'cancelling' AND NOT EXISTS (SELECT 1 FROM batch_lines l WHERE"
                f"     l.batch_id = batches.id AND l.state = {RUNNING} AND l.lease_until > ?))"
                f") ORDER BY created_at LIMIT 1", (now, now, now)).fetchone()
            if row is None:
                return None
            batch_id, status, record, final_status, owner, output_expires_s = row
            db.execute("UPDATE batches SET lease_owner = ?, lease_until = ? WHERE id = ?",
                       (me, now + lease_s, batch_id))
            obj = msgspec.json.decode(record)
            obj["status"] = status
            kind, final = task_step(status, obj["expires_at"] <= now, final_status)
            return Task(kind, obj, owner, final, output_expires_s)

        return await self._db.transaction(tx)

    def _holds(self, db, batch_id: str, me: str) -> str | None:
        row = db.execute("SELECT record FROM batches WHERE id = ? AND lease_owner = ?", (batch_id, me)).fetchone()
        return None if row is None else row[0]

    async def start_run(self, batch_id: str, me: str, lines: list[NewLine]) -> bool:
        """The validated lines of a batch this worker is validating; the batch goes in_progress
        (False: the batch left `validating` meanwhile, e.g. cancelled)."""
        def tx(db):
            record = self._holds(db, batch_id, me)
            status = db.execute("SELECT status FROM batches WHERE id = ?", (batch_id,)).fetchone()
            if record is None or status is None:
                return False
            if status[0] != "validating":  # cancelled meanwhile: its finalize need not wait for the lease
                db.execute("UPDATE batches SET lease_owner = NULL, lease_until = 0 WHERE id = ?", (batch_id,))
                return False
            db.execute("DELETE FROM batch_lines WHERE batch_id = ?", (batch_id,))
            db.executemany(
                "INSERT INTO batch_lines (batch_id, idx, custom_id, body, state, failed, answer) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(batch_id, ln.idx, ln.custom_id, ln.body, PENDING if ln.error is None else DONE,
                  0 if ln.error is None else 1, ln.error) for ln in lines])
            _set_status(db, batch_id, record, "in_progress")
            db.execute("UPDATE batches SET lease_owner = NULL, lease_until = 0 WHERE id = ?", (batch_id,))
            return True

        return await self._db.transaction(tx)

    async def fail(self, batch_id: str, me: str, errors: list[dict[str, Any]]) -> bool:
        """The input file cannot run at all (OpenAI's `errors` list): the batch ends `failed`."""
        def tx(db):
            record = self._holds(db, batch_id, me)
            if record is None:
                return False
            obj = msgspec.json.decode(record)
            obj["errors"] = {"object": "list", "data": errors}
            _set_status(db, batch_id, msgspec.json.encode(obj), "failed")
            db.execute("UPDATE batches SET lease_owner = NULL, lease_until = 0 WHERE id = ?", (batch_id,))
            return True

        return await self._db.transaction(tx)

    async def claim_lines(self, me: str, want: int, max_running: int, lease_s: float) -> list[Line]:
        """Up to `want` lines of running batches (fair across owners, `_fair_lines`), keeping the lines running
        deployment-wide (unexpired leases) at most `max_running`, and this runner's at most its
        fair part of them: `max_running` over the runners seen within `lease_s` (every worker
        of every replica), so the work spreads over the deployment."""
        def tx(db):
            now = time.time()
            db.execute("INSERT OR REPLACE INTO batch_runners (me, seen_at) VALUES (?, ?)", (me, now))
            db.execute("DELETE FROM batch_runners WHERE seen_at <= ?", (now - 10 * lease_s,))
            (live,) = db.execute("SELECT COUNT(*) FROM batch_runners WHERE seen_at > ?", (now - lease_s,)).fetchone()
            running, mine = db.execute(
                f"SELECT COUNT(*), COALESCE(SUM(lease_owner = ?), 0) FROM batch_lines "
                f"WHERE state = {RUNNING} AND lease_until > ?", (me, now)).fetchone()
            n = min(want, max_running - running, -(-max_running // max(1, live)) - mine)
            if n <= 0:
                return []
            rows = _fair_lines(db, now, n)
            db.executemany(
                f"UPDATE batch_lines SET state = {RUNNING}, lease_owner = ?, lease_until = ? "
                f"WHERE batch_id = ? AND idx = ?", [(me, now + lease_s, r[0], r[1]) for r in rows])
            endpoints: dict[str, str] = {}
            out = []
            for batch_id, idx, custom_id, record, body, owner, tenant in rows:
                url = endpoints.get(batch_id)
                if url is None:
                    url = endpoints[batch_id] = msgspec.json.decode(record)["endpoint"]
                out.append(Line(batch_id, idx, custom_id, url, body, owner, tenant))
            return out

        return await self._db.transaction(tx)

    async def renew(self, me: str, lease_s: float) -> None:
        """Extend the leases of this runner's lines, and say it is alive (its fair part)."""
        def tx(db):
            now = time.time()
            db.execute(f"UPDATE batch_lines SET lease_until = ? WHERE lease_owner = ? AND state = {RUNNING}",
                       (now + lease_s, me))
            db.execute("INSERT OR REPLACE INTO batch_runners (me, seen_at) VALUES (?, ?)", (me, now))

        await self._db.transaction(tx)

    async def complete(self, me: str, batch_id: str, idx: int, answer: bytes, failed: bool) -> bool:
        """Record a line's answer; False when this worker no longer holds the line's lease (it
        expired and the line was claimed again, or the batch ended): the answer is dropped."""
        cur = await self._db.run(
            self._db.db.execute,
            f"UPDATE batch_lines SET state = {DONE}, failed = ?, answer = ?, lease_owner = NULL "
            f"WHERE batch_id = ? AND idx = ? AND state = {RUNNING} AND lease_owner = ?",
            (1 if failed else 0, answer, batch_id, idx, me))
        return cur.rowcount > 0

    async def release(self, me: str, keys: list[tuple[str, int]]) -> None:
        """Give lines back unanswered (this worker stops, or their batch is being cancelled)."""
        if not keys:
            return
        await self._db.transaction(lambda db: db.executemany(
            f"UPDATE batch_lines SET state = {PENDING}, lease_owner = NULL, lease_until = 0 "
            f"WHERE batch_id = ? AND idx = ? AND state = {RUNNING} AND lease_owner = ?",
            [(b, i, me) for b, i in keys]))

    async def statuses(self, batch_ids: list[str]) -> dict[str, str]:
        if not batch_ids:
            return {}
        marks = ",".join("?" * len(batch_ids))
        rows = await self._db.run(lambda: self._db.db.execute(
            f"SELECT id, status, expires_at FROM batches WHERE id IN ({marks})", batch_ids).fetchall())
        now = time.time()
        # A batch past its window runs no more lines, whether or not a worker expired it yet.
        return {r[0]: ("expired" if r[1] in ACTIVE and r[2] <= now else r[1]) for r in rows}

    async def answers(self, batch_id: str, after: int = -1, limit: int = -1) -> list[tuple[int, bool, bytes]]:
        rows = await self._db.run(lambda: self._db.db.execute(
            f"SELECT idx, failed, answer FROM batch_lines WHERE batch_id = ? AND state = {DONE} AND idx > ? "
            f"ORDER BY idx LIMIT ?", (batch_id, after, limit)).fetchall())
        return [(i, bool(f), a) for i, f, a in rows]

    async def begin_finalize(self, batch_id: str, me: str, final_status: str, unfinished_answer) -> bool:
        """Enter `finalizing` (a cancel stays `cancelling` until it ends); for an expired batch,
        every line not done is answered with `unfinished_answer(custom_id)` (OpenAI's
        `batch_expired` error entry)."""
        def tx(db):
            record = self._holds(db, batch_id, me)
            if record is None:
                return False
            if final_status == "expired":
                rows = db.execute(f"SELECT idx, custom_id FROM batch_lines WHERE batch_id = ? AND state != {DONE}",
                                  (batch_id,)).fetchall()
                db.executemany(
                    f"UPDATE batch_lines SET state = {DONE}, failed = 1, answer = ?, lease_owner = NULL "
                    f"WHERE batch_id = ? AND idx = ?", [(unfinished_answer(c), batch_id, i) for i, c in rows])
            status = "cancelling" if final_status == "cancelled" else "finalizing"
            (current,) = db.execute("SELECT status FROM batches WHERE id = ?", (batch_id,)).fetchone()
            if current != status:
                _set_status(db, batch_id, record, status)
            db.execute("UPDATE batches SET final_status = ? WHERE id = ?", (final_status, batch_id))
            return True

        return await self._db.transaction(tx)

    async def end_finalize(self, batch_id: str, me: str, output_file_id: str | None,
                           error_file_id: str | None) -> bool:
        """The batch's final status, with its output and error files (already stored)."""
        def tx(db):
            row = db.execute("SELECT record, final_status FROM batches WHERE id = ? AND lease_owner = ?",
                             (batch_id, me)).fetchone()
            if row is None:
                return False
            record, final_status = row
            obj = msgspec.json.decode(record)
            obj["output_file_id"] = output_file_id
            obj["error_file_id"] = error_file_id
            # The lines and their answers are in the output files now: the counts are kept in
            # the record and the lines go (the input is not kept twice).
            obj["request_counts"] = _counts(db, batch_id)
            _set_status(db, batch_id, msgspec.json.encode(obj), final_status)
            db.execute("UPDATE batches SET lease_owner = NULL, lease_until = 0 WHERE id = ?", (batch_id,))
            db.execute("DELETE FROM batch_lines WHERE batch_id = ?", (batch_id,))
            return True

        return await self._db.transaction(tx)

    async def counts_by_status(self) -> dict[str, int]:
        rows = await self._db.run(lambda: self._db.db.execute(
            "SELECT status, COUNT(*) FROM batches GROUP BY status").fetchall())
        return dict(rows)

    async def close(self) -> None:
        self._db.close()


def _set_status(db, batch_id: str, record: bytes, status: str, final_status: str | None = None) -> bytes:
    """Set a batch's status and the object's timestamp for it; the new record."""
    obj = msgspec.json.decode(record)
    obj["status"] = status
    field = STATUS_TIME.get(status)
    if field is not None:
        obj[field] = int(time.time())
    data = msgspec.json.encode(obj)
    if final_status is None:
        db.execute("UPDATE batches SET status = ?, record = ? WHERE id = ?", (status, data, batch_id))
    else:
        db.execute("UPDATE batches SET status = ?, record = ?, final_status = ? WHERE id = ?",
                   (status, data, final_status, batch_id))
    return data


def open_batch_store(store_url: str | None, files_dir: str) -> BatchStore:
    """SQLite in `files_dir` (beside the files' metadata), or Redis when the deployment's store
    URL is Redis (several replicas)."""
    if is_redis_url(store_url):
        from vllm_pyfrontend.store.redis_batches import RedisBatchStore

        return RedisBatchStore(store_url)  # type: ignore[arg-type]
    os.makedirs(files_dir, mode=0o700, exist_ok=True)
    return SQLiteBatchStore(os.path.join(files_dir, DB_NAME))
