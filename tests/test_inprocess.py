"""The in-process tier itself (tests/inprocess.py): two deployments side by side keep their logs
apart, and a stopped one leaves nothing behind in the test process (threads, log handlers,
logger levels, environment variables, runtime directory)."""

from __future__ import annotations

import logging
import os
import threading

import httpx
import pytest

from tests.inprocess import PRODUCT_LOGGER, InProcessStack

ARGS = ["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "1024",
        "--served-model-name", "dsv4", "--enable-log-requests", "demo:deepseek-v4"]


def test_two_deployments_keep_their_logs_apart_and_leave_nothing_behind():
    level = logging.getLogger(PRODUCT_LOGGER).level
    handlers = list(logging.getLogger().handlers)
    assert "VLLM_PYFRONTEND_INPROCESS_TEST" not in os.environ
    with InProcessStack(ARGS, env={"VLLM_PYFRONTEND_INPROCESS_TEST": "1"}) as a, InProcessStack(ARGS) as b:
        assert os.environ["VLLM_PYFRONTEND_INPROCESS_TEST"] == "1"
        r = httpx.post(a.base_url + "/v1/completions", timeout=30, json={"model": "dsv4", "prompt": "hi", "max_tokens": 2})
        assert r.status_code == 200, r.text
        assert httpx.get(a.base_url + "/only-in-a", timeout=30).status_code == 404
        a.wait_for(lambda: "only-in-a" in a.logs(), 10, "a's request line")
        assert "only-in-a" not in b.logs()
        assert any(line.startswith("[engine] ") for line in a.logs().splitlines()), a.logs()
        assert all(line.startswith(("[worker 0] ", "[engine] ")) for line in a.logs().splitlines()), a.logs()
        names = (a.name, b.name)
        runtime = a.runtime.path
    assert a.terminate() == 0 and b.terminate() == 0  # (already stopped: the same code)
    assert not [t.name for t in threading.enumerate() if t.name.startswith(names)]
    assert logging.getLogger(PRODUCT_LOGGER).level == level
    assert logging.getLogger().handlers == handlers
    assert "VLLM_PYFRONTEND_INPROCESS_TEST" not in os.environ
    assert not os.path.exists(runtime)


def test_one_worker_only():
    with pytest.raises(ValueError, match="one worker"):
        InProcessStack([*ARGS[:2], "--workers", "2", *ARGS[4:]])
