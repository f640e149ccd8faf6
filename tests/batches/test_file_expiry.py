"""Files that expire, as OpenAI's `expires_after` (upload) and `output_expires_after` (batch
create) set them, on SQLite and on a real `redis-server`: the File object's `expires_at`; 400s
naming the parameter for a bad policy, with nothing stored; from its expiry on a file is not
found on any route, its record and bytes go, and it counts toward no storage bound; a batch's
output and error files expire `output_expires_after.seconds` after they are written.

Nothing waits an hour: expired files are recorded with an expiry already past (as if the hour
had gone by), and the store and sweep calls take an explicit `now`. The routes run in this
process (aiohttp's test server, the real stores, a batch runner whose lines are answered by a
stub) and are called with the official client."""

from __future__ import annotations

import asyncio
import io
import os
import sqlite3
import threading
import time
from types import SimpleNamespace

import httpx
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.batches.helpers import jsonl, line
from tests.batches.test_batch_store import url  # noqa: F401 - the store-url fixture (SQLite, Redis)
from vllm_pyfrontend.api.batches import routes
from vllm_pyfrontend.server.app import error_middleware
from vllm_pyfrontend.serving.batch_runner import BatchRunner, RunnerSettings
from vllm_pyfrontend.serving.state import STATE
from vllm_pyfrontend.store.batches import open_batch_store
from vllm_pyfrontend.store.files import DB_NAME, FileContents, FileRecord, expire_files, open_file_store
from vllm_pyfrontend.tenants import TENANT, Tenant
from vllm_pyfrontend.tenants.keys_file import Limits

HOUR = 3600
TENANTS = {"key-a": Tenant("a", "tenant:a"), "key-b": Tenant("b", "tenant:b"),
           "key-small": Tenant("small", "tenant:small", Limits(max_storage_bytes=100))}


# -- the stores ------------------------------------------------------------------------------------
def test_store_hides_and_removes_expired_files(url, tmp_path):
    async def main():
        files, contents = open_file_store(url, str(tmp_path)), FileContents(str(tmp_path))
        t = 1_000_000.0
        kept = FileRecord("file-kept", "o", "batch", "k.jsonl", 10, t)
        short = FileRecord("file-short", "o", "batch", "s.jsonl", 20, t, t + HOUR)
        for rec in (kept, short):
            assert await files.add(rec)
            contents.write(rec.id, b"x" * rec.bytes)
        assert short.to_object()["expires_at"] == int(t) + HOUR and kept.to_object()["expires_at"] is None
        got = await files.get("file-short", "o", now=t + HOUR - 1)
        assert got == short and got.to_object()["expires_at"] == int(t) + HOUR  # (read back as stored)
        assert await files.get("file-short", "o", now=t + HOUR) is None  # gone from its expiry on
        assert await files.get("file-kept", "o", now=t + 10 * HOUR) == kept
        page, _ = await files.list("o", purpose=None, after=None, limit=10, order="asc", now=t + HOUR - 1)
        assert [r.id for r in page] == ["file-kept", "file-short"]
        page, _ = await files.list("o", purpose=None, after=None, limit=10, order="asc", now=t + HOUR)
        assert [r.id for r in page] == ["file-kept"]
        assert not await files.delete("file-short", "o")  # (the real clock is long past its expiry)
        assert await expire_files(files, contents, now=t + HOUR - 1) == []
        assert os.path.exists(contents.path("file-short"))
        assert await expire_files(files, contents, now=t + HOUR) == ["file-short"]
        assert not os.path.exists(contents.path("file-short")) and os.path.exists(contents.path("file-kept"))
        assert await files.expire(t + HOUR) == []  # once
        await files.close()

    asyncio.run(main())


def test_expired_files_count_toward_no_bound(url, tmp_path):
    async def main():
        files, contents = open_file_store(url, str(tmp_path)), FileContents(str(tmp_path))
        now = time.time()
        old = FileRecord("file-old", "o", "batch", "old", 80, now - 2 * HOUR, now - HOUR)
        assert await files.add(old)
        # once swept, on either store its bytes are off the deployment's and the owner's totals
        assert await expire_files(files, contents) == ["file-old"]
        assert await files.add(FileRecord("file-new", "o", "batch", "new", 80, now), max_total_bytes=100,
                               max_owner_bytes=100)
        assert not await files.add(FileRecord("file-more", "o", "batch", "more", 30, now), max_total_bytes=100)
        await files.close()

    asyncio.run(main())


def test_stored_bytes_are_an_owners_live_files(url, tmp_path):
    async def main():
        files, contents = open_file_store(url, str(tmp_path)), FileContents(str(tmp_path))
        now = time.time()
        for rec in (FileRecord("file-1", "o", "batch", "1", 30, now), FileRecord("file-2", "o", "batch", "2", 50, now),
                    FileRecord("file-3", "p", "batch", "3", 70, now),
                    FileRecord("file-4", "o", "batch", "4", 90, now - 2 * HOUR, now - HOUR)):
            assert await files.add(rec)
        await expire_files(files, contents)
        assert await files.stored_bytes("o") == 80
        assert await files.stored_bytes("o", ("file-2", "file-x")) == 30  # a batch's own output left out
        assert await files.stored_bytes("nobody") == 0
        await files.close()

    asyncio.run(main())


def test_sqlite_counts_no_expired_file_even_before_the_sweep(tmp_path):
    async def main():
        files = open_file_store(None, str(tmp_path))
        now = time.time()
        assert await files.add(FileRecord("file-old", "o", "batch", "old", 80, now - 2 * HOUR, now - HOUR))
        assert await files.add(FileRecord("file-new", "o", "batch", "new", 80, now), max_total_bytes=100,
                               max_owner_bytes=100)
        await files.close()

    asyncio.run(main())


# The tables as the release before expiry made them.
_OLD_SCHEMA = """
CREATE TABLE files (id TEXT PRIMARY KEY, owner TEXT NOT NULL, purpose TEXT NOT NULL, filename TEXT NOT NULL,
                    bytes INTEGER NOT NULL, created_at REAL NOT NULL);
CREATE INDEX files_owner ON files(owner, created_at);
INSERT INTO files VALUES ('file-old', 'o', 'batch', 'old.jsonl', 5, 1000.0);
"""


def test_sqlite_file_of_an_older_release_is_upgraded(tmp_path):
    """A database made before files expired: its rows are kept and read as kept until deleted,
    and workers opening it at once add the columns once."""
    db = sqlite3.connect(str(tmp_path / DB_NAME))
    db.executescript(_OLD_SCHEMA)
    db.close()
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def open_both():
        barrier.wait()
        try:
            async def opened():
                await open_file_store(None, str(tmp_path)).close()
                await open_batch_store(None, str(tmp_path)).close()
            asyncio.run(opened())
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=open_both) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

    async def main():
        files = open_file_store(None, str(tmp_path))
        old = await files.get("file-old", "o")
        assert old is not None and old.expires_at is None and old.to_object()["expires_at"] is None
        assert await files.add(FileRecord("file-new", "o", "batch", "n", 1, 2000.0, 2000.0 + HOUR))
        assert (await files.get("file-new", "o", now=2000.0)).expires_at == 2000.0 + HOUR
        await files.close()

    asyncio.run(main())
    versions = dict(sqlite3.connect(str(tmp_path / DB_NAME)).execute("SELECT name, version FROM schema_versions"))
    assert versions == {"files": 1, "batches": 1}


# -- the routes ------------------------------------------------------------------------------------
@web.middleware
async def _tenants(request: web.Request, handler):
    request[TENANT] = TENANTS[request.headers["Authorization"].removeprefix("Bearer ")]
    return await handler(request)


async def _answer(url: str, body: bytes, tenant: Tenant):
    return 200, {"object": "chat.completion", "choices": []}, None


class Deployment:
    """The files and batches routes of one worker, on the real stores, in this process."""

    def __init__(self, url: str | None, files_dir: str, max_total_bytes: int):
        files, batches = open_file_store(url, files_dir), open_batch_store(url, files_dir)
        self.contents = FileContents(files_dir)
        self.runner = BatchRunner(batches=batches, files=files, contents=self.contents, call=_answer,
                                  settings=RunnerSettings(poll_s=0.05, expire_every_s=3600))
        self.service = routes.BatchService(files, batches, self.contents, max_file_bytes=1 << 20,
                                           max_total_bytes=max_total_bytes, runner=self.runner)
        app = web.Application(middlewares=[_tenants, error_middleware])
        policy = SimpleNamespace(root_path="", log_error_stack=False)  # (what the error middleware reads)
        app[STATE] = SimpleNamespace(config=SimpleNamespace(policy=policy), read_body=lambda request: request.read())
        app[routes.BATCHES] = self.service
        app.router.add_post("/v1/files", routes.handle_upload)
        app.router.add_get("/v1/files", routes.handle_list_files)
        app.router.add_get("/v1/files/{file_id}", routes.handle_retrieve_file)
        app.router.add_delete("/v1/files/{file_id}", routes.handle_delete_file)
        app.router.add_get("/v1/files/{file_id}/content", routes.handle_file_content)
        app.router.add_post("/v1/batches", routes.handle_create_batch)
        app.router.add_get("/v1/batches/{batch_id}", routes.handle_retrieve_batch)
        self.server = TestServer(app)

    async def __aenter__(self):
        await self.server.start_server()
        self.runner.start()
        return self

    async def __aexit__(self, *exc):
        await self.server.close()
        await self.service.close()

    def client(self, key: str = "key-a") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=str(self.server.make_url("/v1")), api_key=key, max_retries=0,
                                  http_client=httpx.AsyncClient())

    async def add_expired(self, file_id: str, owner: str, size: int) -> FileRecord:
        """A file uploaded two hours ago that expired an hour ago."""
        now = time.time()
        rec = FileRecord(file_id, owner, "batch", f"{file_id}.jsonl", size, now - 2 * HOUR, int(now) - HOUR)
        self.contents.write(file_id, b"x" * size)
        assert await self.service.files.add(rec)
        return rec


def _upload(c: openai.AsyncOpenAI, data: bytes = b"{}\n", **kw):
    return c.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch", **kw)


def _stored(files_dir) -> set[str]:
    return {n for n in os.listdir(files_dir) if n.startswith("file-") or n.startswith(".file-")}


def test_upload_sets_expires_at_and_refuses_bad_policies(url, tmp_path):
    async def main():
        async with Deployment(url, str(tmp_path), 1 << 20) as d:
            c = d.client()
            f = await _upload(c, expires_after={"anchor": "created_at", "seconds": HOUR})
            assert f.expires_at == f.created_at + HOUR
            assert (await c.files.retrieve(f.id)).expires_at == f.expires_at
            assert (await _upload(c)).expires_at is None
            for policy, param in [({"anchor": "last_active_at", "seconds": HOUR}, "expires_after[anchor]"),
                                  ({"seconds": HOUR}, "expires_after[anchor]"),
                                  ({"anchor": "created_at", "seconds": HOUR - 1}, "expires_after[seconds]"),
                                  ({"anchor": "created_at", "seconds": 2592001}, "expires_after[seconds]"),
                                  ({"anchor": "created_at", "seconds": "an hour"}, "expires_after[seconds]"),
                                  ({"anchor": "created_at", "seconds": 3600.5}, "expires_after[seconds]"),
                                  ({"anchor": "created_at"}, "expires_after[seconds]")]:
                with pytest.raises(openai.BadRequestError) as e:
                    await _upload(c, expires_after=policy)
                assert e.value.body["param"] == param, policy
            assert (await _upload(c, expires_after={"anchor": "created_at", "seconds": 2592000})).expires_at
            page = await c.files.list()
            assert len(page.data) == 3 and len(_stored(tmp_path)) == 3  # nothing of the refused ones kept

    asyncio.run(main())


def test_expired_file_is_gone_on_every_route(url, tmp_path):
    async def main():
        async with Deployment(url, str(tmp_path), 1 << 20) as d:
            c = d.client()
            live = await _upload(c, expires_after={"anchor": "created_at", "seconds": HOUR})
            for file_id in ("file-gone1", "file-gone2", "file-gone3", "file-gone4"):
                await d.add_expired(file_id, "tenant:a", 10)
            assert [f.id for f in (await c.files.list()).data] == [live.id]
            with pytest.raises(openai.NotFoundError):
                await c.files.retrieve("file-gone1")
            assert not os.path.exists(d.contents.path("file-gone1"))  # the miss removed it
            with pytest.raises(openai.NotFoundError):
                await c.files.content("file-gone2")
            with pytest.raises(openai.NotFoundError):
                await c.files.delete("file-gone3")
            with pytest.raises(openai.NotFoundError) as e:
                await c.batches.create(input_file_id="file-gone4", endpoint="/v1/chat/completions",
                                       completion_window="24h")
            assert e.value.body["param"] == "input_file_id"
            assert _stored(tmp_path) == {live.id}
            assert await expire_files(d.service.files, d.contents, now=time.time() + 2 * HOUR) == [live.id]

            await d.add_expired("file-swept", "tenant:b", 10)  # never asked for: the runner's sweep
            assert await d.runner.expire_files() == 1
            assert _stored(tmp_path) == set()

    asyncio.run(main())


def test_expired_files_leave_the_storage_bounds(url, tmp_path):
    async def main():
        async with Deployment(url, str(tmp_path), 150) as d:
            await d.add_expired("file-old-a", "tenant:a", 120)  # the deployment's 150 bytes
            await d.add_expired("file-old-small", "tenant:small", 90)  # that key's 100 bytes
            assert (await _upload(d.client(), b"a" * 100)).bytes == 100
            assert (await _upload(d.client("key-small"), b"s" * 40)).bytes == 40
            with pytest.raises(openai.APIStatusError) as e:  # live files still count
                await _upload(d.client(), b"a" * 20)
            assert e.value.status_code == 413
            assert _stored(tmp_path) == {f.id for k in ("key-a", "key-small") for f in
                                         (await d.client(k).files.list()).data}

    asyncio.run(main())


def test_batch_output_files_expire_as_asked(url, tmp_path):
    async def main():
        async with Deployment(url, str(tmp_path), 1 << 20) as d:
            c = d.client()
            data = jsonl([line("ok", "/v1/chat/completions", {"model": "m", "messages": []}), "not json"])
            f = await _upload(c, data)
            for policy, param in [({"anchor": "expires_at", "seconds": HOUR}, "output_expires_after.anchor"),
                                  ({"anchor": "created_at", "seconds": 60}, "output_expires_after.seconds"),
                                  ({"anchor": "created_at", "seconds": 2592001}, "output_expires_after.seconds"),
                                  ({"anchor": "created_at", "seconds": 7200.0}, "output_expires_after.seconds"),
                                  ({"anchor": "created_at", "seconds": True}, "output_expires_after.seconds"),
                                  ({"anchor": "created_at", "seconds": HOUR, "x": 1}, "output_expires_after")]:
                with pytest.raises(openai.BadRequestError) as e:
                    await c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                           completion_window="24h", output_expires_after=policy)
                assert e.value.body["param"] == param, policy
            b = await c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h",
                                       output_expires_after={"anchor": "created_at", "seconds": 2 * HOUR})
            assert "output_expires_after" not in b.model_extra
            plain = await c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                           completion_window="24h")
            deadline = time.monotonic() + 30
            while (b := await c.batches.retrieve(b.id)).status != "completed" or \
                    (plain := await c.batches.retrieve(plain.id)).status != "completed":
                assert time.monotonic() < deadline, (b.status, plain.status)
                await asyncio.sleep(0.05)
            out, err = await c.files.retrieve(b.output_file_id), await c.files.retrieve(b.error_file_id)
            assert out.expires_at == out.created_at + 2 * HOUR and err.expires_at == err.created_at + 2 * HOUR
            assert (await c.files.retrieve(plain.output_file_id)).expires_at is None
            assert (await c.files.retrieve(f.id)).expires_at is None  # the input keeps its own policy
            # an hour later they are there; two hours later the runner's sweep takes them
            assert await d.runner.expire_files(now=out.created_at + HOUR) == 0
            assert await d.runner.expire_files(now=out.expires_at) == 2
            for file_id in (b.output_file_id, b.error_file_id):
                with pytest.raises(openai.NotFoundError):
                    await c.files.content(file_id)
                assert not os.path.exists(d.contents.path(file_id))
            assert (await c.files.content(plain.output_file_id)).text

    asyncio.run(main())
