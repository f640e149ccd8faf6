"""The conformance runner's own logic (conformance/): no engine, no download."""

from __future__ import annotations

import json

import pytest

from conformance import catalogue, runner
from conformance.pytest_plugin import cpu_serve_args


def test_cpu_serve_args_drop_gpu_flags_and_add_the_cpu_engine_settings():
    args = cpu_serve_args(["--dtype", "bfloat16", "--gpu-memory-utilization", "0.8",
                           "--swap-space=4", "--max-model-len", "8192"])
    assert args[:4] == ["--dtype", "bfloat16", "--max-model-len", "8192"]
    assert "--gpu-memory-utilization" not in args and "0.8" not in args
    assert not any(a.startswith("--swap-space") for a in args)
    assert args[4:] == ["--kv-cache-memory-bytes", str(256 << 20), "--enforce-eager"]
    # Settings a test gives itself are kept, not doubled.
    again = cpu_serve_args(["--enforce-eager", "--kv-cache-memory-bytes", "1000"])
    assert again == ["--enforce-eager", "--kv-cache-memory-bytes", "1000"]


def test_select_by_group_name_and_path():
    assert catalogue.select(["core"]) == catalogue.CORE
    assert [m.path for m in catalogue.select(["ci"])] == [
        m.path for m in catalogue.ALL if m.path in catalogue.CI_SUBSET]
    assert catalogue.select(["test_models"])[0].path == "openai/models/test_models.py"
    assert catalogue.select(["serve/tokenize/test_tokenization.py"])[0].name == "test_tokenization"
    with pytest.raises(SystemExit, match="not runnable here"):
        catalogue.select(["test_lmeval"])
    with pytest.raises(SystemExit, match="no such module"):
        catalogue.select(["test_nothing"])


def test_every_runnable_module_has_stand_ins_and_is_not_also_refused():
    from conformance.models import LORA_STAND_INS, STAND_INS

    for m in catalogue.ALL:
        assert m.path not in catalogue.NOT_RUNNABLE
        assert all(r in STAND_INS or r in LORA_STAND_INS for r in m.models), m.path
    assert set(catalogue.CI_SUBSET) <= {m.path for m in catalogue.CORE}


def _report(out, frontend, tests):
    (out / frontend).mkdir(parents=True)
    (out / frontend / "report.json").write_text(json.dumps({"exitstatus": 1, "tests": tests}))


def test_summary_counts_and_the_tests_failing_only_here(tmp_path, monkeypatch):
    module = catalogue.select(["test_models"])[0]
    node = "tests/entrypoints/openai/models/test_models.py::"
    _report(tmp_path, "vllm", {node + "a": {"outcome": "passed", "message": ""},
                               node + "b": {"outcome": "passed", "message": ""},
                               node + "c": {"outcome": "failed", "message": "x"},
                               node + "d": {"outcome": "passed", "message": ""}})
    _report(tmp_path, "ours", {node + "a": {"outcome": "passed", "message": ""},
                               node + "b": {"outcome": "failed", "message": "AssertionError: 1 == 2"},
                               node + "c": {"outcome": "passed", "message": ""},
                               node + "d": {"outcome": "error", "message": "boom"}})
    monkeypatch.setattr(runner, "KNOWN_GAPS", {node + "d": "not yet"})
    s = runner.summarize([module], tmp_path)
    row = s["modules"][0]
    assert (row["collected"], row["passed"]) == (4, {"vllm": 3, "ours": 2})
    assert [(f["test"], f["kind"]) for f in row["failing_here"]] == [(node + "b", "new"), (node + "d", "known_gap")]
    assert row["failing_here"][0]["message"] == "AssertionError: 1 == 2"
    assert row["passing_here_only"] == [node + "c"]
    assert s["totals"]["new_failures"] == 1 and s["totals"]["known_gaps"] == 1
    md = runner.markdown(s, "python -m conformance --modules test_models")
    assert "| `openai/models/test_models.py` | 4 | 3 | 2 |" in md
    assert "`openai/models/test_models.py::b`: failed: AssertionError: 1 == 2" in md


def test_summary_of_one_frontend_only_compares_nothing(tmp_path):
    module = catalogue.select(["test_models"])[0]
    _report(tmp_path, "vllm", {"tests/entrypoints/openai/models/test_models.py::a": {"outcome": "passed", "message": ""}})
    row = runner.summarize([module], tmp_path)["modules"][0]
    assert row["ran"] == {"vllm": True, "ours": False} and row["failing_here"] == []
    assert "| 1 | 1 | not run |" in runner.markdown(runner.summarize([module], tmp_path))


def test_a_later_run_replaces_only_the_modules_it_ran(tmp_path):
    models, echo = catalogue.select(["test_models"])[0], catalogue.select(["test_chat_echo"])[0]
    a = "tests/entrypoints/openai/models/test_models.py::a"
    b = "tests/entrypoints/openai/chat_completion/test_chat_echo.py::b"
    stale = "tests/entrypoints/openai/models/test_models.py::gone"
    _report(tmp_path, "ours", {a: {"outcome": "failed", "message": "x"}, b: {"outcome": "passed", "message": ""},
                               stale: {"outcome": "passed", "message": ""}})
    (tmp_path / "ours" / "current.json").write_text(json.dumps({"tests": {a: {"outcome": "passed", "message": ""}}}))
    # While the run is in progress (or after it was cut short) its outcomes show over the kept ones.
    assert runner.load_report(tmp_path, "ours")[a]["outcome"] == "passed"
    run = runner.FrontendRun("ours", None, tmp_path / "ours", 0.0, None, [models])
    runner.merge_current(run)
    assert runner.load_report(tmp_path, "ours") == {a: {"outcome": "passed", "message": ""},
                                                    b: {"outcome": "passed", "message": ""}}
    assert not (tmp_path / "ours" / "current.json").exists()
    assert echo.path in b


def test_a_relative_out_is_made_absolute(tmp_path, monkeypatch):
    """The pytest run writes its outcomes from inside vLLM's source tree (its working directory):
    a relative --out must name the caller's folder, not one in there."""
    from conformance import __main__ as cli

    seen = {}

    def fake_run(modules, frontends, out, **kw):
        seen["out"] = out
        out.mkdir(parents=True, exist_ok=True)
        return runner.summarize(modules, out)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setattr(runner, "installed_vllm_version", lambda: "0.32.0")
    assert cli.main(["--modules", "test_models", "--frontend", "ours", "--out", "rel"]) == 0
    assert seen["out"] == tmp_path / "rel" and (tmp_path / "rel" / "summary.md").is_file()
