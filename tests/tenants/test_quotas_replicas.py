"""A tenant's limits across replicas that share one Redis (`--quota-store`, here by way of the
Redis response store): two deployments (the in-process tier, one worker each) and one keys file.

- A tenant limited to 10 requests per second gets at most about 10 per second across both
  replicas under a burst at both (without the shared store: 10 per second at each).
- Concurrency is counted across replicas: two streams held at one replica, the next request at
  the other is a 429.
- Redis gone: each replica goes on with its own counts (fail-open, a metric), or with
  `--quota-store-failure closed` refuses the limited tenant (503) and serves the others.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis

from tests.inprocess import InProcessStack
from tests.reliability.helpers import MODEL, SERVED, chat_body, open_stream, read_until, request
from tests.stack import free_port

KEYS = """
- {name: limited, key: key-limited, requests_per_second: 10}
- {name: pair, key: key-pair, max_concurrency: 2}
- {name: free, key: key-free}
"""
BODY = json.dumps({"model": SERVED, "prompt": "hi", "max_tokens": 1}).encode()


def _args(keys_path, *extra: str) -> list[str]:
    return ["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--served-model-name", SERVED,
            "--api-keys-file", str(keys_path), *extra, MODEL]


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def replicas(tmp_path_factory, redis_url):
    redis.Redis.from_url(redis_url).flushdb()
    path = tmp_path_factory.mktemp("keys") / "keys.yaml"
    path.write_text(KEYS)
    with InProcessStack(_args(path, "--response-store", redis_url)) as a, \
            InProcessStack(_args(path, "--quota-store", redis_url)) as b:
        yield a, b, path


def _burst(stacks, key: str, seconds: float, threads_per_stack: int = 3) -> list[float]:
    """Requests from several threads at every stack for `seconds`: the times of the 200s."""
    ok: list[float] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client(stack):
        while time.monotonic() < end:
            r = request(stack, "/v1/completions", BODY, headers=_auth(key))
            if r.status == 200:
                with lock:
                    ok.append(time.monotonic())
            else:
                assert r.status == 429, (r.status, r.body)

    threads = [threading.Thread(target=client, args=(s,)) for s in stacks for _ in range(threads_per_stack)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ok


def test_requests_per_second_hold_across_replicas(replicas):
    a, b, _ = replicas
    time.sleep(1.1)  # (a window without this tenant's requests)
    seconds = 4.0
    served = _burst([a, b], "key-limited", seconds)
    # Each replica alone would admit about 10 per second: some 90 in all (the first window
    # counts from nothing: 10 more). Shared: 10 per second over the 4 s and the first window
    # (about 50; measured 48-55), plus what both replicas admit within one sync interval.
    assert 30 <= len(served) <= 10 * (seconds + 1) + 12, len(served)


def test_concurrency_is_counted_across_replicas(replicas):
    a, b, _ = replicas
    body = chat_body(stream=True, max_tokens=2000, ignore_eos=True)
    streams = [open_stream(a, body, headers=_auth("key-pair")) for _ in range(2)]
    try:
        for s in streams:
            read_until(s, b"data: ")
        deadline = time.monotonic() + 5
        while True:  # (until the other replica has seen them: one sync interval)
            r = request(b, "/v1/completions", BODY, headers=_auth("key-pair"))
            if r.status == 429:
                break
            assert time.monotonic() < deadline, "the other replica never counted the streams"
            time.sleep(0.05)
        assert "Concurrency limit" in r.json()["error"]["message"]
    finally:
        for s in streams:
            s.close()
    deadline = time.monotonic() + 5
    while request(b, "/v1/completions", BODY, headers=_auth("key-pair")).status != 200:
        assert time.monotonic() < deadline, "the slots were never given back"
        time.sleep(0.05)


@pytest.mark.parametrize("failure", ["open", "closed"])
def test_an_unreachable_quota_store(failure, tmp_path):
    path = tmp_path / "keys.yaml"
    path.write_text(KEYS)
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with InProcessStack(_args(path, "--quota-store", dead, "--quota-store-failure", failure)) as s:
        deadline = time.monotonic() + 10
        while "vllm_frontend_quota_store_errors_total 0.0" in (text := request(s, "/metrics").body.decode()) \
                or "vllm_frontend_quota_store_errors_total" not in text:
            assert time.monotonic() < deadline, "no quota store error counted"
            time.sleep(0.1)
        limited = request(s, "/v1/completions", BODY, headers=_auth("key-limited"))
        if failure == "open":
            assert limited.status == 200, limited.body
        else:
            assert limited.status == 503 and "quota store" in limited.json()["error"]["message"], limited.body
        assert request(s, "/v1/completions", BODY, headers=_auth("key-free")).status == 200
        assert "quota store" in s.logs() and "does not answer" in s.logs()
