"""The batch store's contract, on SQLite and on a real `redis-server`: claims bounded by the
running leases of every worker; a line answered only by its lease holder and only once; an
expired lease claimed again by another worker (whose answer then wins, the first one's is
dropped); lines given back; cancel and expiry; owner scoping; file records."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from vllm_pyfrontend.serving.batch_lines import expired_entry
from vllm_pyfrontend.store.batches import NewLine, open_batch_store
from vllm_pyfrontend.store.files import FileRecord, open_file_store


@pytest.fixture(params=["sqlite", "redis"])
def url(request, redis_url):
    if request.param == "redis":
        redis.Redis.from_url(redis_url).flushdb()
        return redis_url
    return None


def _batch(batch_id: str, window_s: float = 3600) -> dict:
    now = int(time.time())
    return {"id": batch_id, "object": "batch", "endpoint": "/v1/completions", "status": "validating",
            "input_file_id": "file-x", "completion_window": "1h", "created_at": now, "expires_at": time.time() + window_s,
            "errors": None, "output_file_id": None, "error_file_id": None, "metadata": None}


def _lines(n: int, bad: int = 0) -> list[NewLine]:
    out = [NewLine(i, f"c{i}", b'{"prompt": "x"}') for i in range(n)]
    out += [NewLine(n + i, None, None, b'{"error": "bad"}') for i in range(bad)]
    return out


async def _started(store, batch_id: str, n: int, bad: int = 0, window_s: float = 3600,
                   owner: str = "owner-a") -> None:
    await store.create(_batch(batch_id, window_s), owner, "t" + owner[-1])
    task = await store.claim_task("w0", 5)
    assert task.kind == "validate" and task.owner == owner
    assert await store.start_run(batch_id, "w0", _lines(n, bad))


def test_claims_leases_and_exactly_once(url, tmp_path):
    async def main():
        store = open_batch_store(url, str(tmp_path))
        await _started(store, "batch_1", 5, bad=1)
        assert (await store.get("batch_1", "owner-a"))["request_counts"] == {"total": 6, "completed": 0, "failed": 1}
        assert await store.get("batch_1", "owner-b") is None
        a = await store.claim_lines("wa", 10, 3, lease_s=0.3)
        assert len(a) == 3 and a[0].owner == "owner-a" and a[0].tenant == "ta" and a[0].url == "/v1/completions"
        assert await store.claim_lines("wb", 10, 3, lease_s=5) == []  # the deployment's bound
        assert await store.complete("wa", "batch_1", a[0].idx, b'{"ok": 0}', False)
        assert not await store.complete("wa", "batch_1", a[0].idx, b'{"ok": 0}', False)  # once
        assert not await store.complete("wb", "batch_1", a[1].idx, b"{}", False)  # not the holder
        await store.release("wa", [("batch_1", a[2].idx)])
        b = await store.claim_lines("wb", 10, 3, lease_s=5)
        assert sorted(x.idx for x in b) == sorted([a[2].idx, 3])
        await asyncio.sleep(0.4)  # wa's lease on a[1] expires: another worker takes it over
        c = await store.claim_lines("wc", 10, 3, lease_s=5)
        assert [x.idx for x in c] == [a[1].idx]
        assert await store.complete("wc", "batch_1", a[1].idx, b'{"ok": 1}', False)
        assert not await store.complete("wa", "batch_1", a[1].idx, b'{"late": 1}', False)  # dropped
        await store.renew("wb", 5)
        for x in b:
            assert await store.complete("wb", "batch_1", x.idx, b'{"ok": 2}', False)
        assert await store.claim_task("w0", 5) is None  # one line still pending
        d = await store.claim_lines("wb", 10, 3, lease_s=5)
        assert [x.idx for x in d] == [4]
        assert await store.complete("wb", "batch_1", 4, b'{"bad": 1}', True)
        task = await store.claim_task("w0", 5)
        assert task.kind == "finalize" and task.final_status == "completed"
        assert await store.begin_finalize("batch_1", "w0", "completed", expired_entry)
        answers = await store.answers("batch_1")
        assert [i for i, _, _ in answers] == [0, 1, 2, 3, 4, 5]
        assert answers[1][2] == b'{"ok": 1}' and answers[4][1] and answers[5][1]
        assert await store.end_finalize("batch_1", "w0", "file-o", "file-e")
        obj = await store.get("batch_1", None)
        assert obj["status"] == "completed" and obj["output_file_id"] == "file-o"
        assert obj["request_counts"] == {"total": 6, "completed": 4, "failed": 2}
        assert await store.answers("batch_1") == []  # the lines went with the output files: no copy kept
        assert (await store.list("owner-a", after=None, limit=10))[0][0]["request_counts"]["total"] == 6
        assert obj["finalizing_at"] and obj["completed_at"] and obj["in_progress_at"]
        assert (await store.counts_by_status()).get("completed") == 1
        await store.close()

    asyncio.run(main())


def test_cancel_and_expiry(url, tmp_path):
    async def main():
        store = open_batch_store(url, str(tmp_path))
        await _started(store, "batch_c", 4)
        run = await store.claim_lines("wa", 2, 10, lease_s=5)
        assert (await store.cancel("batch_c", "owner-b")) is None
        assert (await store.cancel("batch_c", "owner-a"))["status"] == "cancelling"
        assert await store.claim_lines("wb", 10, 10, lease_s=5) == []  # nothing new of it runs
        assert await store.statuses(["batch_c"]) == {"batch_c": "cancelling"}
        assert await store.claim_task("w0", 5) is None  # still running lines
        assert await store.complete("wa", "batch_c", run[0].idx, b'{"ok": 0}', False)
        await store.release("wa", [("batch_c", run[1].idx)])
        task = await store.claim_task("w0", 5)
        assert task.final_status == "cancelled"
        assert await store.begin_finalize("batch_c", "w0", "cancelled", expired_entry)
        assert [i for i, _, _ in await store.answers("batch_c")] == [run[0].idx]
        assert await store.end_finalize("batch_c", "w0", "file-o", None)
        obj = await store.get("batch_c", "owner-a")
        assert obj["status"] == "cancelled" and obj["cancelling_at"] and obj["cancelled_at"]

        await store.create(_batch("batch_v"), "owner-a", "ta")  # cancelled while being validated
        task = await store.claim_task("w0", 30)
        assert task.kind == "validate" and (await store.cancel("batch_v", "owner-a"))["status"] == "cancelling"
        assert not await store.start_run("batch_v", "w0", _lines(2))
        task = await store.claim_task("w1", 30)  # at once: the validating worker let go of it
        assert task.batch["id"] == "batch_v" and task.final_status == "cancelled"
        assert await store.begin_finalize("batch_v", "w1", "cancelled", expired_entry)
        assert await store.end_finalize("batch_v", "w1", None, None)
        assert (await store.get("batch_v", "owner-a"))["status"] == "cancelled"

        await _started(store, "batch_e", 3, window_s=0.5)
        first = await store.claim_lines("wa", 1, 10, lease_s=5)
        assert await store.complete("wa", "batch_e", first[0].idx, b'{"ok": 0}', False)
        await store.claim_lines("wa", 1, 10, lease_s=5)
        await asyncio.sleep(0.6)
        assert await store.claim_lines("wb", 10, 10, lease_s=5) == []
        assert (await store.statuses(["batch_e"]))["batch_e"] == "expired"
        task = await store.claim_task("w0", 5)
        assert task.final_status == "expired"
        assert await store.begin_finalize("batch_e", "w0", "expired", expired_entry)
        answers = await store.answers("batch_e")
        assert len(answers) == 3 and [f for _, f, _ in answers] == [False, True, True]
        assert b"batch_expired" in answers[2][2]
        assert await store.end_finalize("batch_e", "w0", "file-o", "file-e")
        obj = await store.get("batch_e", "owner-a")
        assert obj["status"] == "expired" and obj["request_counts"] == {"total": 3, "completed": 1, "failed": 2}
        await store.close()

    asyncio.run(main())


def test_file_records(url, tmp_path):
    async def main():
        files = open_file_store(url, str(tmp_path))
        recs = [FileRecord(f"file-{i}", "owner-a", "batch", f"f{i}.jsonl", 10, 1000.0 + i) for i in range(3)]
        for r in recs:
            assert await files.add(r, max_total_bytes=30)
        assert not await files.add(FileRecord("file-x", "owner-a", "batch", "x", 1, 2000.0), max_total_bytes=30)
        assert await files.get("file-1", "owner-b") is None
        assert (await files.get("file-1", "owner-a")).filename == "f1.jsonl"
        page, more = await files.list("owner-a", purpose=None, after=None, limit=2, order="desc")
        assert [r.id for r in page] == ["file-2", "file-1"] and more
        page, more = await files.list("owner-a", purpose="batch", after="file-1", limit=2, order="desc")
        assert [r.id for r in page] == ["file-0"] and not more
        assert not await files.delete("file-1", "owner-b")
        assert await files.delete("file-1", "owner-a")
        assert await files.add(FileRecord("file-x", "owner-a", "batch", "x", 10, 2000.0), max_total_bytes=30)
        # an owner's own bound (max_storage_bytes): owner-a holds 30, owner-b nothing
        assert not await files.add(FileRecord("file-y", "owner-a", "batch", "y", 5, 2001.0), max_owner_bytes=34)
        assert await files.add(FileRecord("file-z", "owner-b", "batch", "z", 5, 2001.0), max_owner_bytes=34)
        assert await files.delete("file-x", "owner-a")
        assert await files.add(FileRecord("file-y", "owner-a", "batch", "y", 5, 2001.0), max_owner_bytes=34)
        await files.close()

    asyncio.run(main())


def test_runners_get_fair_parts(url, tmp_path):
    """Each runner alive (seen within the lease time) gets its part of the bound; one that stops
    being seen leaves its part to the others."""
    async def main():
        store = open_batch_store(url, str(tmp_path))
        await _started(store, "batch_f", 12)
        assert await store.claim_lines("wb", 0, 4, lease_s=0.5) == []  # (seen)
        a = await store.claim_lines("wa", 10, 4, lease_s=0.5)
        b = await store.claim_lines("wb", 10, 4, lease_s=0.5)
        assert len(a) == 2 and len(b) == 2
        assert await store.claim_lines("wa", 10, 4, lease_s=0.5) == []
        for x in a:
            assert await store.complete("wa", "batch_f", x.idx, b"{}", False)
        assert len(await store.claim_lines("wa", 10, 4, lease_s=0.5)) == 2  # its part again, not more
        await asyncio.sleep(0.6)  # both stop renewing; wb is never seen again
        assert len(await store.claim_lines("wa", 10, 4, lease_s=0.5)) == 4  # alone: the whole bound
        await store.close()

    asyncio.run(main())


def test_claims_are_fair_across_owners(url, tmp_path):
    """A big batch of one owner created first does not hold another owner's small batch back:
    each line goes to the owner with the fewest lines running."""
    async def main():
        store = open_batch_store(url, str(tmp_path))
        await _started(store, "batch_big", 200, owner="owner-a")
        await asyncio.sleep(0.01)
        await _started(store, "batch_small", 2, owner="owner-b")
        first = await store.claim_lines("w", 1, 50, lease_s=5)
        second = await store.claim_lines("w", 1, 50, lease_s=5)
        assert [x.owner for x in first + second] == ["owner-a", "owner-b"]
        # Several at once: interleaved, the small batch's lines among the first ones.
        more = await store.claim_lines("w", 4, 50, lease_s=5)
        assert [x.batch_id for x in more].count("batch_small") == 1
        assert [x.idx for x in more if x.batch_id == "batch_big"] == [1, 2, 3]
        await store.close()

    asyncio.run(main())


def test_answers_a_page_at_a_time(url, tmp_path):
    async def main():
        store = open_batch_store(url, str(tmp_path))
        await _started(store, "batch_p", 7)
        lines = await store.claim_lines("w", 10, 10, lease_s=5)
        for x in lines:
            if x.idx != 3:  # one line not answered yet
                assert await store.complete("w", "batch_p", x.idx, b'{"i": %d}' % x.idx, x.idx == 5)
        assert [a[0] for a in await store.answers("batch_p")] == [0, 1, 2, 4, 5, 6]
        assert [a[0] for a in await store.answers("batch_p", -1, 2)] == [0, 1]
        page = await store.answers("batch_p", 1, 3)
        assert [a[0] for a in page] == [2, 4, 5] and page[2][1] and page[0][2] == b'{"i": 2}'
        assert await store.answers("batch_p", 6, 10) == []
        await store.close()

    asyncio.run(main())


def test_workers_opening_a_new_database_at_once(tmp_path):
    """Workers that start together open the same new SQLite file at once: each gets it (its
    switch to WAL is refused at once while another makes it, and tried again)."""
    import threading

    from vllm_pyfrontend.store.files import _FILES_SCHEMA, SQLiteDB

    for n in range(20):
        path = str(tmp_path / f"files-{n}.sqlite")
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []

        def open_it():
            barrier.wait()
            try:
                SQLiteDB(path, _FILES_SCHEMA).close()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
