"""vLLM's own HTTP-level tests, run against this frontend as vLLM's drop-in (conformance/).

A small fixed subset of the conformance run (`python -m conformance --modules ci`): each module
runs twice, on vLLM's frontend and on this one, each with its own real CPU engine serving a tiny
stand-in of the model the module names. A test that vLLM's frontend passes must pass here too,
unless conformance/expectations.py lists it: as a deliberate difference (with why), or as a known
gap (reported here, removed from the list when its fix lands). The full run is on demand:
`python -m conformance` (see README).
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

from conformance.catalogue import CI_SUBSET
from conformance.sources import REPO_ROOT

# Its engines and servers are its own (the conformance runner's subprocesses): it runs beside the
# real-engine tier, not after it.
pytestmark = [pytest.mark.real_engine, pytest.mark.own_engines]


def test_vllm_suites_pass_here(tmp_path):
    out = tmp_path / "conformance"
    proc = subprocess.run(
        [sys.executable, "-m", "conformance", "--modules", "ci", "--out", str(out), "--timeout", "1500"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    summary_path = out / "summary.json"
    assert summary_path.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    rows = {r["module"]: r for r in summary["modules"]}
    assert sorted(rows) == sorted(CI_SUBSET)
    logs = sorted((out / "vllm" / "logs").glob("*/pytest.log"))
    log = logs[-1].read_text(errors="replace")[-3000:] if logs else "(no log)"
    for module, row in rows.items():
        # The harness works: vLLM's own frontend passes the module's tests on the stand-in.
        assert row["ran"]["vllm"] and row["ran"]["ours"], f"{module} did not run:\n{log}"
        assert row["passed"]["vllm"] > 0, f"{module}: vLLM's frontend passed nothing:\n{log}"
    failing = [f for r in summary["modules"] for f in r["failing_here"]]
    gaps = [f for f in failing if f["kind"] == "known_gap"]
    if gaps:
        warnings.warn(f"{len(gaps)} known gaps still open: " + "; ".join(f["test"] for f in gaps), stacklevel=1)
    new = [f"{f['test']}: {f['outcome']}: {f['message']}" for f in failing if f["kind"] == "new"]
    assert not new, "vLLM's frontend passes these, this frontend does not:\n" + "\n".join(new)
