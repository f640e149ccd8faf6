"""Idle PSS of this frontend's processes, per process: a quick memory check without a bench run.

    .venv/bin/python bench/idle_pss.py MODEL_DIR [--workers N] [-- extra frontend-supervisor flags]

Starts `frontend-supervisor --workers N --engine sim MODEL_DIR` (tool parsing on, as bench/run.py
starts it), sends 8 short chat requests, waits 3 s and prints each process's PSS (smaps_rollup, via
bench/procstat.py) and the sum without the simulated engine. E.g. `-- --no-worker-preload` for
workers spawned as their own interpreters instead of forked from the worker template.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.procstat import _pss_bytes, tree_pids  # noqa: E402
from vllm_pyfrontend.supervisor.runtime import free_tcp_port  # noqa: E402

KINDS = ("vllm_pyfrontend.supervisor.sim", "vllm_pyfrontend.server.preload", "vllm_pyfrontend.server.worker")


def _kind(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"
    for k in KINDS:
        if k in cmd:
            return k.rsplit(".", 1)[1]
    return "supervisor" if "frontend-supervisor" in cmd else cmd[:40]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--workers", type=int, default=2)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    args.extra = argv[cut + 1:]  # the frontend's own flags, after "--"
    port = free_tcp_port("127.0.0.1")
    exe = Path(sys.executable).parent / "frontend-supervisor"
    argv = [str(exe), "--workers", str(args.workers), "--engine", "sim", "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", "m", "--max-model-len", "16384",
            "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4", *args.extra, args.model]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the frontend did not start")
                time.sleep(0.5)
        time.sleep(3)  # every worker up (/v1/models answers as soon as one serves)
        body = json.dumps({"model": "m", "max_tokens": 8,
                           "messages": [{"role": "user", "content": "Hello there " * 20}]}).encode()
        for _ in range(8):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                         {"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=30).read()
        time.sleep(3)
        total = 0.0
        for pid in tree_pids(proc.pid):
            kind, mib = _kind(pid), _pss_bytes(pid) / 2**20
            print(f"{pid:8d} {kind:12s} {mib:8.1f} MiB")
            if kind != "sim":
                total += mib
        print(f"PSS without the engine: {total:.1f} MiB (--workers {args.workers} {' '.join(args.extra)})")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        proc.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
