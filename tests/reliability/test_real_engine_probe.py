"""The engine-hang watchdog against the real vLLM EngineCore: its liveness probe
(`is_sleeping`, a utility call) is answered, so a short `--engine-timeout` never fails a healthy
engine, idle or busy."""

from __future__ import annotations

import time

import pytest

from tests.e2e.tiny_model import ENGINE_ARGS, build_tiny_model
from tests.reliability.helpers import request, wait_all_serving
from tests.stack import Stack

pytestmark = pytest.mark.real_engine


def test_probe_answered_by_vllm():
    model = build_tiny_model()
    stack = Stack(["--workers", "2", "--served-model-name", "tiny", "--shutdown-timeout", "5",
                   "--engine-timeout", "2", *ENGINE_ARGS, model], ready_timeout=600)
    try:
        wait_all_serving(stack, timeout=120)
        body = b'{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}'
        deadline = time.monotonic() + 8  # four timeouts' worth of idle probing (every 1 s)
        while time.monotonic() < deadline:
            assert stack.health() == 200, stack.logs()
            time.sleep(0.5)
        for _ in range(4):
            r = request(stack, "/v1/chat/completions", body, timeout=120)
            assert r.status == 200, (r.status, r.body)
        assert "engine 0 stalled" not in stack.logs() and "did not answer" not in stack.logs(), stack.logs()
    finally:
        code = stack.terminate(timeout=120)
    assert code == 0, stack.logs()
