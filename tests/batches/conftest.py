"""Fixtures of the Batch API tests: a real `redis-server` for the Redis store."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import redis

from tests.stack import free_port, stop_process_group


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    exe = shutil.which("redis-server")
    assert exe, "redis-server is not installed (.ci/install installs the Debian package)"
    port = free_port()
    work = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(work)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    r = redis.Redis(port=port)
    deadline = time.monotonic() + 20
    while True:
        try:
            r.ping()
            break
        except redis.ConnectionError:
            assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    stop_process_group(proc, 10)
