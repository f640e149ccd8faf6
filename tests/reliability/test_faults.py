"""Faults, each with its outcome asserted: a worker killed mid-stream, the engine killed, an engine
that stops answering, 1,000 clients dropping at once, clients that stop reading.

The whole stack runs (supervisor, 2 workers, simulated engine); streams are raw sockets so the
tests can misbehave as real clients do and see exactly what arrives.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import struct
import time

import pytest

from tests.reliability.helpers import (
    alive,
    assert_serves,
    chat_body,
    engine_running,
    engines_of,
    open_stream,
    read_all,
    read_until,
    request,
    restarts,
    rss_kb,
    server_load,
    sim_args,
    sse_events,
    wait_all_serving,
    wait_for,
    workers_of,
)
from tests.stack import Stack, worker_index


def worker_index_of(pid: int) -> int:
    return worker_index(pid)


def stream_worker(first: bytes) -> int:
    """Which worker answers a stream: its chunk ids are `chatcmpl-w<i>-...`."""
    event = json.loads(sse_events(first)[0])
    return int(event["id"].split("-")[1][1:])


def open_spread_streams(stack: Stack, body: bytes, per_worker: int = 2, limit: int = 40):
    """Streams until each of the 2 workers serves `per_worker` (SO_REUSEPORT picks by hash)."""
    by_worker: dict[int, list[socket.socket]] = {0: [], 1: []}
    extra = []
    for _ in range(limit):
        s = open_stream(stack, body)
        w = stream_worker(read_until(s, b"}\n\n"))
        (by_worker[w] if len(by_worker[w]) < per_worker else extra).append(s)
        if all(len(v) >= per_worker for v in by_worker.values()):
            break
    for s in extra:
        s.close()
    assert all(len(v) >= per_worker for v in by_worker.values()), "connections all went to one worker"
    return by_worker


# -- a shared, non-destructive stack -------------------------------------------------------------

@pytest.fixture(scope="module")
def stack():
    s = Stack(sim_args(step=0.01, max_model_len=8192), ready_timeout=120,
              env={"VLLM_PYFRONTEND_SSE_SOFT_LIMIT": str(64 * 1024), "VLLM_PYFRONTEND_SSE_HARD_LIMIT": str(1 << 20)})
    wait_all_serving(s)
    yield s
    code = s.terminate()
    assert code == 0, s.logs()


def test_kill_worker_mid_stream(stack):
    """kill -9 worker 0 under live streams: its clients see the connection end, worker 1's streams
    flow on untouched, the supervisor restarts worker 0, and the engine ends the orphaned requests
    (the restarted worker aborts them on their first output) long before they would finish."""
    before = restarts(stack)
    body = chat_body(stream=True, max_tokens=6000)  # 60 s of tokens at 10 ms a step
    streams = open_spread_streams(stack, body)
    pids = {worker_index_of(p): p for p in workers_of(stack)}
    os.kill(pids[0], signal.SIGKILL)
    t_kill = time.monotonic()
    for s in streams[0]:
        s.settimeout(10)
        rest = read_all(s)  # ends: EOF or reset, well before the 60 s of tokens
        assert b"[DONE]" not in rest
        s.close()
    for s in streams[1]:  # untouched: still streaming after the kill
        got = read_until(s, b"}\n\n" * 1)
        got += read_until(s, b"}\n\n")
        assert len(sse_events(got)) >= 1
    assert alive(pids[1]) and pids[1] in workers_of(stack)
    wait_for(lambda: restarts(stack) > before and any("ready again" in l for l in list(stack.log)),
             60, "worker 0 restarted", stack)
    for s in streams[1]:
        s.close()  # worker 1 aborts these itself
    # Orphans of worker 0 are aborted by its successor: the engine goes idle, not after 60 s.
    wait_for(lambda: engine_running(stack) == (0, 0), 40, "engine idle", stack, every=0.5)
    assert time.monotonic() - t_kill < 55
    assert any("aborting orphaned request" in l for l in list(stack.log)), stack.logs()
    assert_serves(stack)


def test_thousand_clients_drop_at_once(stack):
    """1,000 streams (256 running in the engine, the rest queued) all reset in one instant: the
    aborts go out batched (one ABORT message per engine per loop turn) and the engine ends with
    nothing running or waiting; the workers with nothing in flight."""
    body = chat_body(stream=True, max_tokens=2000)

    async def run() -> float:
        conns = []
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        for i in range(0, 1000, 100):
            batch = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", stack.port) for _ in range(100)))
            for reader, writer in batch:
                writer.write(head + body)
            conns += batch
        # Accepted: every stream has its first event (it is in the engine by then).
        await asyncio.wait_for(asyncio.gather(*(r.readuntil(b"data: ") for r, _ in conns)), 120)
        t0 = time.monotonic()
        for _, writer in conns:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        return t0

    running, waiting = None, None
    t0 = asyncio.run(run())
    wait_for(lambda: engine_running(stack) == (0, 0), 60, "engine idle after 1000 drops", stack, every=0.5)
    idle_after = time.monotonic() - t0
    wait_for(lambda: server_load(stack) == 0, 30, "workers idle", stack, every=0.5)
    assert idle_after < 60
    assert "Traceback" not in "\n".join(l for l in stack.log if "[worker" in l)
    assert_serves(stack)


def test_slow_readers_bounded(stack):
    """Clients that stop reading: their events are coalesced, then past the hard limit (1 MiB
    here) the stream is cut and its engine request cancelled; worker memory stays bounded. A
    client that pauses and then catches up gets the whole stream intact."""
    text = " ".join(f"word{i}" for i in range(600))
    # Pause, then catch up: coalesced frames, nothing lost or reordered.
    body = chat_body(stream=True, max_tokens=2000, vllm_xargs={"sim_text": text})
    s = open_stream(stack, body, rcvbuf=4096)
    time.sleep(3)
    s.settimeout(30)
    raw = read_until(s, b"[DONE]")
    s.close()
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    content = "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1])
    assert content.strip() == text

    # Never read: cut at the hard limit, request cancelled in the engine.
    pids = workers_of(stack)
    rss0 = {p: rss_kb(p) for p in pids}
    # n=32 choices a stream: 32 chunks a step, ~1 MB/s each, so the limit is reached in seconds.
    big = chat_body(stream=True, max_tokens=8000, n=32,
                    stream_options={"include_usage": True, "continuous_usage_stats": True})
    socks = [open_stream(stack, big, rcvbuf=4096) for _ in range(6)]
    wait_for(lambda: engine_running(stack)[0] >= 6 * 32, 30, "streams running", stack, every=0.5)
    # 8000 tokens take 80 s; the writer gives up on each stream once ~1 MiB is queued for it.
    wait_for(lambda: engine_running(stack) == (0, 0), 60, "slow streams cut and cancelled", stack, every=1)
    for p in pids:
        grown = (rss_kb(p) - rss0[p]) / 1024
        assert grown < 6 * 1.5 + 30, f"worker {p} grew {grown:.0f} MiB for 6 slow readers"
    for s in socks:
        s.settimeout(5)
        data = read_all(s)  # what the kernel had buffered, then the end
        assert b"[DONE]" not in data
        s.close()
    assert_serves(stack)


# -- destructive ---------------------------------------------------------------------------------

def test_engine_killed():
    """kill -9 the engine: every in-flight stream ends with an error event and `[DONE]`, no
    worker answers 200 to /health afterwards, and the supervisor exits 1 (its policy: the engine
    is not restarted; a process manager restarts the deployment)."""
    stack = Stack(sim_args(step=0.01, max_model_len=8192), ready_timeout=120)
    try:
        wait_all_serving(stack)
        streams = open_spread_streams(stack, chat_body(stream=True, max_tokens=6000))
        (engine,) = engines_of(stack)
        os.kill(engine, signal.SIGKILL)
        for s in streams[0] + streams[1]:
            s.settimeout(30)
            events = sse_events(read_until(s, b"[DONE]"))
            s.close()
            assert events[-1] == "[DONE]", events[-3:]
            err = json.loads(events[-2])["error"]
            assert err["code"] == 503 and "engine" in err["message"].lower(), err
        assert stack.health() != 200
        code = stack.proc.wait(60)
    except BaseException:
        stack.stop()
        raise
    assert code == 1, stack.logs()
    assert "engine exited (killed by SIGKILL)" in stack.logs()


def test_engine_stops_answering():
    """An engine that hangs (sim `--hang-after-steps 30`) with `--engine-timeout 3`: within the
    deadline the in-flight stream ends with a 503 error event and `[DONE]`, the non-streaming
    request gets a 503, /health turns 503 on every worker, and new requests get a clear 503."""
    # (--migration-limit 0: with migration the requests would wait for an engine to answer,
    # tests/reliability/test_migration_faults.py)
    stack = Stack(sim_args("--engine-timeout", "3", "--hang-after-steps", "30", "--migration-limit", "0", step=0.01),
                  ready_timeout=120)
    try:
        wait_all_serving(stack)
        s = open_stream(stack, chat_body(stream=True, max_tokens=500))
        t0 = time.monotonic()
        r = request(stack, "/v1/chat/completions", chat_body(max_tokens=500), timeout=30)
        s.settimeout(30)
        events = sse_events(read_until(s, b"[DONE]"))
        took = time.monotonic() - t0
        s.close()
        assert r.status == 503, (r.status, r.body)
        assert "did not answer" in r.json()["error"]["message"]
        assert events[-1] == "[DONE]"
        err = json.loads(events[-2])["error"]
        assert err["code"] == 503 and "did not answer" in err["message"], err
        assert took < 3 + 6, took  # the deadline plus the watchdog's tick, not the 5 s of tokens
        wait_for(lambda: all(stack.health() == 503 for _ in range(8)), 15, "/health 503 everywhere", stack)
        r = request(stack, "/v1/chat/completions", chat_body())
        assert r.status == 503 and r.json()["error"]["message"], r
    finally:
        code = stack.terminate(timeout=60)
    assert code == 0, stack.logs()


def test_engine_killed_restart_policy():
    """`--on-engine-death restart`: the streams in flight end with a 503 error event and
    `[DONE]`, then the supervisor starts the engine and the workers again and serves. (Without
    migration, `--migration-limit 0`; with it the workers serve on and the streams continue:
    tests/reliability/test_migration_faults.py.)"""
    stack = Stack(sim_args("--on-engine-death", "restart", "--migration-limit", "0", step=0.01, max_model_len=8192),
                  ready_timeout=120)
    try:
        wait_all_serving(stack)
        s = open_stream(stack, chat_body(stream=True, max_tokens=6000))
        read_until(s, b"}\n\n")
        (engine,) = engines_of(stack)
        old_workers = set(workers_of(stack))
        os.kill(engine, signal.SIGKILL)
        s.settimeout(30)
        events = sse_events(read_until(s, b"[DONE]"))
        s.close()
        assert events[-1] == "[DONE]" and json.loads(events[-2])["error"]["code"] == 503, events[-3:]
        wait_for(lambda: "restarting the engine" in stack.logs(), 30, "restart", stack)
        wait_for(lambda: stack.health() == 200 and sum("serving on http" in l for l in list(stack.log)) >= 2,
                 120, "serving again", stack, every=0.5)
        assert_serves(stack)
        (engine2,) = engines_of(stack)
        assert engine2 != engine and not (set(workers_of(stack)) & old_workers)
        assert stack.proc.poll() is None
    finally:
        code = stack.terminate(timeout=60)
    assert code == 0, stack.logs()
