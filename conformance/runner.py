"""Run vLLM's own HTTP-level test modules against vLLM's frontend and against this project's
(as vLLM's drop-in frontend), and compare.

One pytest process per frontend runs the selected modules one after another (each module starts
its own `vllm serve`, so one engine per frontend at a time), inside vLLM's extracted source tree
with conformance/pytest_plugin.py loaded. Each frontend's outcomes are kept in
`<out>/<frontend>/report.json`, module by module: a later run of some modules, or of one
frontend alone, replaces only those and is compared with the rest (vLLM's own baseline seldom
changes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from conformance.catalogue import NOT_RUNNABLE, Module
from conformance.expectations import DELIBERATE_DIFFERENCES, KNOWN_GAPS
from conformance.models import HUB_DIR, ensure_repos
from conformance.sources import CACHE_DIR, REPO_ROOT, installed_vllm_version, vllm_source_tree

FRONTENDS = ("vllm", "ours")
DEFAULT_OUT = CACHE_DIR / "runs"
LABELS = {"vllm": "vLLM's frontend", "ours": "this frontend (drop-in)"}


def dropin_executable() -> str:
    """The installed `vllm-pyfrontend` console script; a wrapper doing the same where the
    environment predates it."""
    exe = Path(sys.executable).with_name("vllm-pyfrontend")
    if exe.is_file() and os.access(exe, os.X_OK):
        return str(exe)
    wrapper = CACHE_DIR / "vllm-pyfrontend"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m vllm_pyfrontend.supervisor.dropin "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def node_prefix(module: Module) -> str:
    return f"tests/entrypoints/{module.path}"


def pytest_argv(modules: list[Module]) -> list[str]:
    argv = [sys.executable, "-m", "pytest", "-p", "conformance.pytest_plugin", "-p", "no:cacheprovider",
            "-q", "-rA"]
    keywords = []
    for m in modules:
        argv.append(node_prefix(m))
        argv += [f"--deselect={node_prefix(m)}::{name}" for name in m.deselect]
        if m.keyword:
            keywords.append(m.keyword[0])
    if keywords:
        argv += ["-k", " and ".join(f"({k})" for k in sorted(set(keywords)))]
    return argv


@dataclass
class FrontendRun:
    frontend: str
    process: subprocess.Popen
    out_dir: Path
    started: float
    log: object
    modules: list[Module]


def start_frontend(frontend: str, modules: list[Module], out: Path, source: Path, workers: int) -> FrontendRun:
    """Start one frontend's pytest run. Its outcomes go to `<out>/<frontend>/current.json`
    (kept current test by test), merged into `report.json` when it ends; the server logs of
    this run go to `logs/<start time>/`."""
    run_dir = out / frontend
    logs = run_dir / "logs" / time.strftime("%Y%m%dT%H%M%S")
    logs.mkdir(parents=True, exist_ok=True)
    (run_dir / "current.json").unlink(missing_ok=True)
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(source), str(REPO_ROOT)]),
        HF_HUB_CACHE=str(HUB_DIR),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        CONFORMANCE_FRONTEND=frontend,
        CONFORMANCE_REPORT=str(run_dir / "current.json"),
        CONFORMANCE_LOGS=str(logs),
        CONFORMANCE_DROPIN=dropin_executable(),
        CONFORMANCE_WORKERS=str(workers),
        PYTHONUNBUFFERED="1",
    )
    env.pop("HF_HOME", None)
    log = open(logs / "pytest.log", "wb")
    argv = pytest_argv(modules)
    log.write(("$ " + " ".join(argv[1:]) + "\n").encode())
    log.flush()
    proc = subprocess.Popen(argv, cwd=source, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    return FrontendRun(frontend, proc, run_dir, time.monotonic(), log, modules)


def merge_current(run: FrontendRun) -> None:
    """Fold this run's outcomes into `report.json`: the modules it ran replace their earlier
    outcomes, the other modules' are kept."""
    current = run.out_dir / "current.json"
    if not current.is_file():
        return
    new = json.loads(current.read_text())["tests"]
    merged = _read_tests(run.out_dir / "report.json")
    prefixes = tuple(node_prefix(m) + "::" for m in run.modules)
    merged = {t: v for t, v in merged.items() if not t.startswith(prefixes)}
    merged.update(new)
    (run.out_dir / "report.json").write_text(json.dumps({"tests": merged}, indent=1))
    current.unlink()


def wait_frontend(run: FrontendRun, timeout: float) -> None:
    try:
        run.process.wait(max(1.0, timeout - (time.monotonic() - run.started)))
    except subprocess.TimeoutExpired:
        import signal

        # SIGINT: pytest stops the session and tears its fixtures down, so vLLM's test harness
        # stops the servers it started (they run in sessions of their own).
        os.killpg(run.process.pid, signal.SIGINT)
        try:
            run.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(run.process.pid, signal.SIGKILL)
            run.process.wait()
    run.log.close()
    merge_current(run)


def run(modules: list[Module], frontends: list[str], out: Path = DEFAULT_OUT, jobs: int = 1,
        workers: int = 2, timeout: float = 4 * 3600) -> dict:
    """Run `modules` on each of `frontends` (`jobs` frontends at once) and return the summary,
    also written to `<out>/summary.json`."""
    source = vllm_source_tree()
    ensure_repos(sorted({repo for m in modules for repo in m.models}))
    out.mkdir(parents=True, exist_ok=True)
    pending = list(frontends)
    running: list[FrontendRun] = []
    while pending or running:
        while pending and len(running) < max(1, jobs):
            running.append(start_frontend(pending.pop(0), modules, out, source, workers))
        wait_frontend(running.pop(0), timeout)
    summary = summarize(modules, out)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _read_tests(path: Path) -> dict[str, dict]:
    return json.loads(path.read_text())["tests"] if path.is_file() else {}


def load_report(out: Path, frontend: str) -> dict[str, dict]:
    """A frontend's kept outcomes, with those of a run in progress (or cut short) over them."""
    tests = _read_tests(out / frontend / "report.json")
    tests.update(_read_tests(out / frontend / "current.json"))
    return tests


def summarize(modules: list[Module], out: Path) -> dict:
    """Per module: collected / passed on each frontend, and the tests vLLM passes and this
    project does not (split into deliberate differences, known gaps and new failures)."""
    reports = {f: load_report(out, f) for f in FRONTENDS}
    rows = []
    for m in modules:
        prefix = node_prefix(m) + "::"
        ids = sorted({t for rep in reports.values() for t in rep if t.startswith(prefix)})
        row: dict = {"module": m.path, "collected": len(ids), "passed": {}, "ran": {},
                     "failing_here": [], "passing_here_only": []}
        for f, rep in reports.items():
            row["ran"][f] = any(t.startswith(prefix) for t in rep)
            row["passed"][f] = sum(1 for t in ids if rep.get(t, {}).get("outcome") == "passed")
        if m.keyword:
            row["left_out"] = f"-k {m.keyword[0]!r}: {m.keyword[1]}"
        if m.deselect:
            row["deselected"] = m.deselect
        if row["ran"]["vllm"] and row["ran"]["ours"]:
            for t in ids:
                if t not in reports["vllm"] or t not in reports["ours"]:
                    continue  # one frontend's run has not reached it (yet)
                a = reports["vllm"][t]["outcome"]
                b = reports["ours"][t]
                if a == "passed" and b.get("outcome") != "passed":
                    kind = ("deliberate" if t in DELIBERATE_DIFFERENCES else
                            "known_gap" if t in KNOWN_GAPS else "new")
                    row["failing_here"].append({"test": t, "outcome": b.get("outcome", "not run"),
                                                "message": b.get("message", ""), "kind": kind})
                elif b.get("outcome") == "passed" and a != "passed":
                    row["passing_here_only"].append(t)
        rows.append(row)
    failing = [f for r in rows for f in r["failing_here"]]
    return {
        "vllm_version": installed_vllm_version(),
        "modules": rows,
        "totals": {
            "collected": sum(r["collected"] for r in rows),
            "passed_vllm": sum(r["passed"].get("vllm", 0) for r in rows),
            "passed_ours": sum(r["passed"].get("ours", 0) for r in rows),
            "failing_here": len(failing),
            "new_failures": sum(1 for f in failing if f["kind"] == "new"),
            "known_gaps": sum(1 for f in failing if f["kind"] == "known_gap"),
            "deliberate": sum(1 for f in failing if f["kind"] == "deliberate"),
        },
        "not_runnable": NOT_RUNNABLE,
    }


def markdown(summary: dict, command: str | None = None) -> str:
    """The README table: per module, collected / passed on vLLM's frontend / passed here."""
    lines = []
    if command:
        lines += [f"`{command}` (vLLM {summary['vllm_version']}):", ""]
    lines += ["| module | collected | passed, vLLM's frontend | passed, this frontend |",
              "| --- | ---: | ---: | ---: |"]
    for r in summary["modules"]:
        cell = {f: (str(r["passed"][f]) if r["ran"].get(f) else "not run") for f in FRONTENDS}
        lines.append(f"| `{r['module']}` | {r['collected']} | {cell['vllm']} | {cell['ours']} |")
    t = summary["totals"]
    lines.append(f"| **total** | {t['collected']} | {t['passed_vllm']} | {t['passed_ours']} |")
    failing = [f for r in summary["modules"] for f in r["failing_here"]]
    if failing:
        lines += ["", f"Tests vLLM's frontend passes and this one does not ({len(failing)}):", ""]
        for f in failing:
            tag = {"deliberate": " (deliberate)", "known_gap": " (known gap)"}.get(f["kind"], "")
            lines.append(f"- `{f['test'].split('tests/entrypoints/', 1)[-1]}`{tag}: {f['outcome']}: "
                         f"{f['message']}")
    only = [t for r in summary["modules"] for t in r["passing_here_only"]]
    if only:
        lines += ["", f"Tests this frontend passes and vLLM's does not ({len(only)}):", ""]
        lines += [f"- `{t.split('tests/entrypoints/', 1)[-1]}`" for t in only]
    return "\n".join(lines) + "\n"


def not_runnable_markdown() -> str:
    lines = ["| module | why it does not run here |", "| --- | --- |"]
    lines += [f"| `{p}` | {why} |" for p, why in sorted(NOT_RUNNABLE.items())]
    return "\n".join(lines) + "\n"
