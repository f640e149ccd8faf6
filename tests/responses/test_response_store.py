"""The response store's backends against the real thing: SQLite files shared by two openers
(as the workers of one supervisor share one), and a real `redis-server` (Debian package) started
here on a free port, shared by two supervisors: a response stored through one replica is
retrieved, chained and cancelled through the other."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import redis

from vllm_pyfrontend.store import SQLITE_NAME, RecordTooLarge, StoreUnavailable, open_store
from tests.responses.helpers import client
from tests.stack import Stack


def _backends(tmp_path, redis_url):
    return {"sqlite": lambda **kw: open_store(None, str(tmp_path), **kw),
            "redis": lambda **kw: open_store(redis_url, str(tmp_path), **kw)}


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_store_contract(tmp_path, redis_url, kind):
    """Two openers (two workers) see each other's records and cancel flags; an id is created
    once and updated only by its owner; records expire after the TTL; past max_entries the
    oldest go."""
    if kind == "redis":
        redis.Redis.from_url(redis_url).flushdb()
    make = _backends(tmp_path, redis_url)[kind]

    async def run():
        a, b = make(ttl=60, max_entries=3), make(ttl=60, max_entries=3)
        try:
            assert await a.create("r1", "A", {"response": {"id": "r1", "status": "in_progress"}, "messages": []})
            got = await b.get("r1")
            assert got["response"]["status"] == "in_progress" and got["owner"] == "A" and got["worker"] is None
            # create-only: the same id again (another owner or the same) changes nothing
            assert not await b.create("r1", "B", {"response": {"id": "r1", "status": "forged"}})
            assert not await b.create("r1", "A", {"response": {"id": "r1", "status": "forged"}})
            # updates: the owner only
            assert not await b.update("r1", "B", {"response": {"id": "r1", "status": "forged"}})
            assert await b.update("r1", "A", {"response": {"id": "r1", "status": "completed"},
                                              "messages": [{"role": "user"}]})
            got = await a.get("r1")
            assert got["response"]["status"] == "completed" and got["owner"] == "A"
            assert not await a.update("nope", "A", {"response": {}})
            assert await a.get("nope") is None
            assert await a.cancel_requested(["r1", "r2"]) == set()
            await b.request_cancel("r1")
            assert await a.cancel_requested(["r1", "r2"]) == {"r1"}
            for i in range(2, 6):  # r1 (oldest) and r2 go: 3 kept
                assert await a.create(f"r{i}", "A", {"response": {"id": f"r{i}"}})
                await asyncio.sleep(0.01)
            assert [await b.get(f"r{i}") is not None for i in range(1, 6)] == [False, False, True, True, True]
            assert a.degraded is None and b.degraded is None
        finally:
            await a.close()
            await b.close()
        short = make(ttl=0.3, max_entries=100)
        try:
            await short.create("t", "", {"response": {}})
            assert await short.get("t") is not None
            await asyncio.sleep(0.5)
            assert await short.get("t") is None
            assert await short.create("t", "other", {"response": {}})  # an expired id is free again
        finally:
            await short.close()

    asyncio.run(run())


def test_sqlite_opened_under_another_writers_lock_reads_and_fails_writes_fast(tmp_path):
    """A worker whose connection opens while another process holds the file's write lock (a
    backup, a second deployment, a long write) reads the records and fails its writes in about
    the busy timeout: opening a file that has the schema writes nothing."""
    import sqlite3

    async def run():
        first = open_store(None, str(tmp_path))
        assert await first.create("r1", "A", {"response": {"id": "r1"}})
        await first.close()
        other = sqlite3.connect(str(tmp_path / SQLITE_NAME), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        late = open_store(None, str(tmp_path))
        try:
            assert (await late.get("r1"))["response"] == {"id": "r1"}
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailable, match="locked"):
                await late.create("r2", "A", {"response": {"id": "r2"}})
            assert time.monotonic() - t0 < 2.0
            assert (await late.get("r1"))["owner"] == "A"  # and reads go on
        finally:
            other.execute("ROLLBACK")
            other.close()
            await late.close()

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_store_byte_bounds(tmp_path, redis_url, kind):
    """One record over max_record_bytes is refused; past max_bytes in all the oldest go, so the
    total stays bounded however many large records come."""
    if kind == "redis":
        redis.Redis.from_url(redis_url).flushdb()
    make = _backends(tmp_path, redis_url)[kind]

    async def run():
        s = make(ttl=60, max_entries=1000, max_bytes=250_000, max_record_bytes=100_000)
        try:
            with pytest.raises(RecordTooLarge):
                await s.create("big", "A", {"response": {"metadata": {"k": "x" * 100_001}}})
            assert await s.get("big") is None
            for i in range(10):  # ~60 kB each: at most 4 fit in 250 kB
                assert await s.create(f"m{i}", "A", {"response": {"metadata": {"k": "x" * 60_000}}})
                await asyncio.sleep(0.005)
            kept = [i for i in range(10) if await s.get(f"m{i}") is not None]
            assert kept == [6, 7, 8, 9]
        finally:
            await s.close()

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_tenant_that_stores_a_lot_evicts_its_own(tmp_path, redis_url, kind):
    """Past a bound the oldest records of the owner holding the most go: tenant B's few
    responses stay however much tenant A stores (before, the oldest of anyone's went)."""
    if kind == "redis":
        redis.Redis.from_url(redis_url).flushdb()
    make = _backends(tmp_path, redis_url)[kind]

    async def run():
        s = make(ttl=60, max_entries=6, max_bytes=250_000, max_record_bytes=100_000)
        try:
            for i in range(2):
                assert await s.create(f"b{i}", "tenant:b", {"response": {"metadata": {"k": "y" * 1_000}}})
                await asyncio.sleep(0.005)
            for i in range(12):  # A's: past both bounds, again and again
                assert await s.create(f"a{i}", "tenant:a", {"response": {"metadata": {"k": "x" * 50_000}}})
                await asyncio.sleep(0.005)
            assert [await s.get(f"b{i}") is not None for i in range(2)] == [True, True]
            kept = [i for i in range(12) if await s.get(f"a{i}") is not None]
            assert kept == list(range(12 - len(kept), 12)) and 1 <= len(kept) <= 4, kept  # A's newest
            # updates keep the per-owner totals right: A's record shrinks, B grows past A; A's
            # next write then evicts B's oldest (B holds the most)
            assert await s.update("a11", "tenant:a", {"response": {}})
            for i in range(2, 5):
                assert await s.create(f"b{i}", "tenant:b", {"response": {"metadata": {"k": "y" * 60_000}}})
                await asyncio.sleep(0.005)
            assert await s.get("b4") is not None and await s.get("a11") is not None
        finally:
            await s.close()

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_an_owners_storage_bound(tmp_path, redis_url, kind):
    """An owner with a bound of its own (a keys file's `max_storage_bytes`) keeps its newest
    records within it, whatever room the store has; other owners are not touched."""
    if kind == "redis":
        redis.Redis.from_url(redis_url).flushdb()
    make = _backends(tmp_path, redis_url)[kind]

    async def run():
        s = make(ttl=60, max_entries=1000, max_bytes=10_000_000, max_record_bytes=100_000,
                 owner_limit=lambda owner: 120_000 if owner == "tenant:a" else None)
        try:
            assert await s.create("b0", "tenant:b", {"response": {"metadata": {"k": "y" * 50_000}}})
            for i in range(5):
                assert await s.create(f"a{i}", "tenant:a", {"response": {"metadata": {"k": "x" * 50_000}}})
                await asyncio.sleep(0.005)
            assert [i for i in range(5) if await s.get(f"a{i}") is not None] == [3, 4]
            assert await s.get("b0") is not None
            for i in range(5):
                assert await s.create(f"b{i + 1}", "tenant:b", {"response": {"metadata": {"k": "y" * 50_000}}})
            assert all([await s.get(f"b{i}") is not None for i in range(6)])  # no bound of its own
        finally:
            await s.close()

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_store_orphans(tmp_path, redis_url, kind, monkeypatch):
    """An in-progress record whose worker stops beating is failed by any opener's sweep; a
    worker that beats keeps its records."""
    import vllm_pyfrontend.store.redis as redis_store
    import vllm_pyfrontend.store.sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "STALE_S", 0.5)
    monkeypatch.setattr(redis_store, "STALE_S", 0.5)
    if kind == "redis":
        redis.Redis.from_url(redis_url).flushdb()
    make = _backends(tmp_path, redis_url)[kind]

    def mark(record):
        return {**record, "response": {**record["response"], "status": "failed"}}

    async def run():
        a, b = make(ttl=60, max_entries=100), make(ttl=60, max_entries=100)
        try:
            assert await a.create("gone", "A", {"response": {"status": "in_progress"}}, worker="w-gone")
            assert await a.create("live", "A", {"response": {"status": "in_progress"}}, worker="w-live")
            assert await b.fail_orphans(mark) == []
            assert await b.worker_alive("w-gone")
            t = time.monotonic()
            while time.monotonic() - t < 0.8:
                await a.heartbeat("w-live")
                await asyncio.sleep(0.1)
            assert not await b.worker_alive("w-gone") and await b.worker_alive("w-live")
            assert await b.fail_orphans(mark) == ["gone"]
            gone, live = await a.get("gone"), await a.get("live")
            assert gone["response"]["status"] == "failed" and gone["worker"] is None
            assert live["response"]["status"] == "in_progress" and live["worker"] == "w-live"
            assert await b.fail_orphans(mark) == []
        finally:
            await a.close()
            await b.close()

    asyncio.run(run())


def test_two_supervisors_share_one_redis(redis_url):
    """Two replicas (each its own supervisor, sim engine, one worker, its own runtime dir) behind
    one Redis: what one stores, the other retrieves, continues and cancels."""
    redis.Redis.from_url(redis_url).flushdb()
    args = ["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "8192",
            "--served-model-name", "dsv4", "--shutdown-timeout", "5", "--response-store", redis_url,
            "demo:deepseek-v4"]
    with Stack(args) as a, Stack(args) as b:
        ca, cb = client(a.base_url), client(b.base_url)
        first = ca.responses.create(model="dsv4", input="Hello", max_output_tokens=5)
        assert cb.responses.retrieve(first.id).output_text == first.output_text
        second = cb.responses.create(model="dsv4", input="More", previous_response_id=first.id, max_output_tokens=5)
        assert second.previous_response_id == first.id
        assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
        assert ca.responses.retrieve(second.id).id == second.id
        # A background response on replica A, cancelled through replica B.
        bg = ca.responses.create(model="dsv4", input="long", background=True, max_output_tokens=4000,
                                 extra_body={"ignore_eos": True})
        assert cb.responses.cancel(bg.id).status == "cancelled"
        deadline = time.monotonic() + 20
        while (got := cb.responses.retrieve(bg.id)).usage is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert got.status == "cancelled" and 0 < got.usage.output_tokens < 4000
        assert httpx.get(f"{b.base_url}/v1/responses/resp_unknown").status_code == 404
