"""Faults in the response store degrade, never spread (two workers, simulated engine):

- its files overwritten with random bytes and a worker SIGKILLed: the worker comes back, chat
  and `store: false` responses keep serving on every worker, `/health` stays 200 and says
  degraded, and the store's routes answer 503 at once;
- its write lock held by another connection: a `store: true` create answers 503 in about the
  store's busy timeout (never a 10 s stall, never a 200 that did not store), reads still serve;
- a background response whose worker is SIGKILLed is failed within seconds (owner liveness),
  with the SQLite store and with Redis.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time

import httpx
import pytest
import redis

from tests.reliability.helpers import workers_of
from tests.responses.helpers import client, create_on, http_on
from tests.stack import Stack, proc_alive, worker_index

SIM = ["--engine", "sim", "--workers", "2", "--max-model-len", "8192", "--served-model-name", "dsv4",
       "--shutdown-timeout", "5"]
CHAT = {"model": "dsv4", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


@pytest.fixture(scope="module")
def sqlite_stack(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "responses.db"
    s = Stack([*SIM, "--sim-step-time", "0.002", "--response-store", f"sqlite:///{path}", "demo:deepseek-v4"])
    s.store_path = str(path)
    yield s
    s.terminate()


def _pid_of(stack: Stack, index: int) -> int:
    return next(p for p in workers_of(stack) if worker_index(p) == index)


def test_locked_store_fails_fast(sqlite_stack):
    s = sqlite_stack
    c = client(s.base_url)
    kept = c.responses.create(model="dsv4", input="before", max_output_tokens=5)
    db = sqlite3.connect(s.store_path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        for worker in (0, 1):
            h = http_on(s.base_url, worker)
            t0 = time.monotonic()
            r = h.post("/v1/responses", json={"model": "dsv4", "input": "x", "max_output_tokens": 5})
            took = time.monotonic() - t0
            assert r.status_code == 503 and "response store" in r.json()["error"]["message"], r.text
            assert took < 3.0, took
            # reads and everything that does not store still serve
            got = h.get(f"/v1/responses/{kept.id}")
            assert got.status_code == 200 and got.json()["id"] == kept.id, got.text
            assert h.post("/v1/responses", json={"model": "dsv4", "input": "x", "max_output_tokens": 5,
                                                 "store": False}).status_code == 200
            assert h.post("/v1/chat/completions", json=CHAT).status_code == 200
            h.close()
    finally:
        db.execute("ROLLBACK")
        db.close()
    after = c.responses.create(model="dsv4", input="after", max_output_tokens=5)
    assert c.responses.retrieve(after.id).status == after.status == "incomplete"  # (max_output_tokens)


def _background_on_killed_worker(stack: Stack) -> None:
    bg, worker = create_on(stack.base_url, 0, model="dsv4", input="long", background=True, max_output_tokens=8000,
                           extra_body={"ignore_eos": True})
    c = client(stack.base_url)
    assert c.responses.retrieve(bg.id).status in ("queued", "in_progress")
    pid = _pid_of(stack, worker)
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    # Its listening socket closes with it: until then the kernel may still queue a new connection
    # on that socket, which the dying worker never accepts (reset: a client error, not a retry).
    stack.wait_for(lambda: not proc_alive(pid), 5, "the killed worker gone")
    # (a fresh connection each time: the one kept alive may have been the killed worker's)
    got = stack.wait_for(lambda: (r := client(stack.base_url).responses.retrieve(bg.id)).status == "failed" and r,
                         20, "the orphaned background response failed")
    assert time.monotonic() - t0 < 12.0
    assert "worker running this response is gone" in got.error.message


def test_background_response_of_a_killed_worker_fails_within_seconds(sqlite_stack):
    _background_on_killed_worker(sqlite_stack)


def test_a_client_that_leaves_leaves_a_cancelled_record(sqlite_stack):
    """A stored synchronous request whose client goes away: its record (created before it ran)
    ends cancelled, never left in progress."""
    s = sqlite_stack
    rid = "resp_left_" + os.urandom(8).hex()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{s.base_url}/v1/responses", timeout=httpx.Timeout(30, read=1.0),
                   json={"model": "dsv4", "input": "long", "max_output_tokens": 8000, "ignore_eos": True,
                         "request_id": rid})
    got = s.wait_for(lambda: (r := client(s.base_url).responses.retrieve(rid)).status != "in_progress" and r, 20,
                     "the record of the request left")
    assert got.status == "cancelled", got


def test_corrupt_store_degrades_and_a_restarted_worker_serves(sqlite_stack):
    """(Last on this stack: its store stays corrupt.)"""
    s = sqlite_stack
    stored = client(s.base_url).responses.create(model="dsv4", input="before", max_output_tokens=5)
    for suffix in ("", "-wal", "-shm"):  # the database and its WAL files: random bytes
        p = s.store_path + suffix
        if os.path.exists(p):
            with open(p, "r+b") as f:
                f.write(os.urandom(max(os.path.getsize(p), 8192)))
    victim = _pid_of(s, 1)
    os.kill(victim, signal.SIGKILL)
    s.wait_for(lambda: len(workers_of(s)) == 2 and victim not in workers_of(s), 60, "worker 1 restarted")
    for worker in (0, 1):
        h = http_on(s.base_url, worker)
        health = s.wait_for(lambda: (r := h.get("/health")).status_code == 200 and r.content and r.json(),
                            30, f"worker {worker}'s /health degraded")
        assert health["status"] == "degraded" and "response store" in health["response_store"], health
        assert h.post("/v1/chat/completions", json=CHAT).status_code == 200
        assert h.post("/v1/responses", json={"model": "dsv4", "input": "x", "max_output_tokens": 5,
                                             "store": False}).status_code == 200
        t0 = time.monotonic()
        for method, path, body in (("POST", "/v1/responses", {"model": "dsv4", "input": "x", "max_output_tokens": 5}),
                                   ("GET", f"/v1/responses/{stored.id}", None),
                                   ("POST", f"/v1/responses/{stored.id}/cancel", None),
                                   ("POST", "/v1/responses", {"model": "dsv4", "input": "x",
                                                              "previous_response_id": stored.id})):
            r = h.request(method, path, json=body)
            assert r.status_code == 503 and r.json()["error"]["type"] == "ServiceUnavailableError", (path, r.text)
        assert time.monotonic() - t0 < 3.0
        assert h.get("/ready").status_code == 200
        h.close()
    assert s.proc.poll() is None
    assert "giving up" not in s.logs()


def test_background_response_of_a_killed_worker_fails_within_seconds_redis(redis_url):
    redis.Redis.from_url(redis_url).flushdb()
    with Stack([*SIM, "--sim-step-time", "0.002", "--response-store", redis_url, "demo:deepseek-v4"]) as s:
        _background_on_killed_worker(s)
