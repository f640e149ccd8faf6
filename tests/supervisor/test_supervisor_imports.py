"""The supervisor process stays small: it does not import what only workers need (aiohttp,
the tokenizer libraries, the chat template engine, uvloop). aiohttp alone, pulled in with the
connection code for a TLS check, made the supervisor's PSS 35 MiB instead of 24.5
(bench/idle_pss.py)."""

from __future__ import annotations

import subprocess
import sys


def test_the_supervisor_cli_does_not_import_worker_libraries():
    code = ("import sys, vllm_pyfrontend.supervisor.cli; "
            "print(sorted(m for m in ('aiohttp', 'tokenizers', 'fastokens', 'minijinja', 'uvloop') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
