"""vLLM's benchmark clients — Python `vllm bench serve` and the Rust `vllm-rs bench serve` (the
binary from the vllm==0.33.0 wheel, fetched by .ci/install) — run against this frontend without
errors, on the completions and the chat endpoint (simulated engine, real tokenizer)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4
from tests.stack import REPO, Stack


@pytest.fixture(scope="module")
def stack():
    s = Stack(["--engine", "sim", "--workers", "2", "--sim-step-time", "0.005", "--max-model-len", "4096",
               "--served-model-name", "dsv4", "--shutdown-timeout", "5", "demo:deepseek-v4"])
    yield s
    s.terminate()


@pytest.mark.parametrize("backend,endpoint", [("openai", "/v1/completions"), ("openai-chat", "/v1/chat/completions")])
def test_vllm_bench_serve(stack, backend, endpoint):
    tokenizer = materialize_deepseek_v4(os.path.join(REPO, ".cache", "demo-deepseek-v4"))
    args = ["bench", "serve", "--backend", backend, "--endpoint", endpoint, "--base-url", stack.base_url,
            "--model", "dsv4", "--tokenizer", tokenizer, "--dataset-name", "random",
            "--random-input-len", "32", "--random-output-len", "16", "--num-prompts", "24",
            "--max-concurrency", "8", "--disable-tqdm"]
    code = f"from vllm_pyfrontend.supervisor.vllm_headless import run_vllm_cli; run_vllm_cli({args!r})"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert re.search(r"Successful requests:\s+24\b", text), text[-3000:]
    assert re.search(r"Failed requests:\s+0\b", text), text[-3000:]
    assert re.search(r"Total generated tokens:\s+384\b", text), text[-3000:]


def vllm_rs_binary() -> str:
    path = os.environ.get("VLLM_RS") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "vllm-pyfrontend", "vllm-rs-0.33.0", "vllm-rs",
    )
    assert os.access(path, os.X_OK), f"vllm-rs not found at {path}: run .ci/install"
    return path


@pytest.mark.parametrize("backend", ["openai", "openai-chat"])
def test_vllm_rs_bench_serve(stack, backend):
    tokenizer = materialize_deepseek_v4(os.path.join(REPO, ".cache", "demo-deepseek-v4"))
    cmd = [vllm_rs_binary(), "bench", "serve", "--backend", backend, "--base-url", stack.base_url,
           "--model", "dsv4", "--tokenizer", tokenizer, "--dataset-name", "random",
           "--input-len", "32", "--output-len", "16", "--num-prompts", "24", "--max-concurrency", "8"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert re.search(r"Successful requests:\s+24\b", text), text[-3000:]
    assert re.search(r"Failed requests:\s+0\b", text), text[-3000:]
    assert re.search(r"Total generated tokens:\s+384\b", text), text[-3000:]
