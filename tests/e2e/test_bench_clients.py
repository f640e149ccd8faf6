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


VLLM_BENCH = [("openai", "/v1/completions"), ("openai-chat", "/v1/chat/completions")]

# Each run of `vllm bench serve` in the one Python process below, between these lines.
_RUNS = """
import sys, traceback
from vllm_pyfrontend.supervisor.vllm_headless import run_vllm_cli

for name, args in RUNS:
    print(f"=== vllm bench run {name} ===", flush=True)
    try:
        run_vllm_cli(args)
        status = 0
    except SystemExit as e:  # vLLM's CLI, as `python -c` would exit with it
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    print(f"=== vllm bench status {name} {status} ===", flush=True)
"""


@pytest.fixture(scope="module")
def vllm_bench_runs(stack) -> dict[str, tuple[int | None, str]]:
    """`vllm bench serve` for each backend of VLLM_BENCH, one run after the other in one Python
    process (vLLM and torch are imported once, not once a run): each run's exit status (None if
    the process ended before it did) and its output (stdout and stderr)."""
    tokenizer = materialize_deepseek_v4(os.path.join(REPO, ".cache", "demo-deepseek-v4"))
    runs = [(backend, ["bench", "serve", "--backend", backend, "--endpoint", endpoint, "--base-url", stack.base_url,
                       "--model", "dsv4", "--tokenizer", tokenizer, "--dataset-name", "random",
                       "--random-input-len", "32", "--random-output-len", "16", "--num-prompts", "24",
                       "--max-concurrency", "8", "--disable-tqdm"])
            for backend, endpoint in VLLM_BENCH]
    code = f"RUNS = {runs!r}\n{_RUNS}"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    result: dict[str, tuple[int | None, str]] = {}
    for backend, _ in VLLM_BENCH:
        start = out.stdout.find(f"=== vllm bench run {backend} ===")
        m = re.search(rf"^=== vllm bench status {re.escape(backend)} (-?\d+) ===$", out.stdout[max(start, 0):], re.M)
        if start < 0 or m is None:
            result[backend] = None, f"(exit code {out.returncode})\n" + out.stdout[max(start, 0):]
        else:
            result[backend] = int(m.group(1)), out.stdout[start:start + m.end()]
    return result


@pytest.mark.parametrize("backend,endpoint", VLLM_BENCH)
def test_vllm_bench_serve(vllm_bench_runs, backend, endpoint):
    status, text = vllm_bench_runs[backend]
    assert status == 0, text[-3000:]
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
