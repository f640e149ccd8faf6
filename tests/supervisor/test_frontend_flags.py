"""Frontend flag parity: every API-server flag of `vllm serve` (walked from vLLM's own parser, so
it cannot drift) and of `vllm-rs serve` (its --help, when the binary is there) is classified in
supervisor/frontend_flags.py, implemented ones are the supervisor's, refused ones stop the start
with the reason, and none of them reaches the engine."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from vllm_pyfrontend.supervisor.cli import build_parser, parse_args
from vllm_pyfrontend.supervisor.frontend_flags import (
    ALIASES, FRONTEND_FLAGS, VLLM_DEFAULTS, classify, refusal, refused_serve_args,
)
from vllm_pyfrontend.supervisor.vllm_flags import takes_value

VLLM_RS = os.path.expanduser("~/.cache/vllm-pyfrontend/vllm-rs-0.33.0/vllm-rs")
MODEL = "demo:deepseek-v4"


def _flags(parser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


@pytest.fixture(scope="module")
def vllm_parsers():
    pytest.importorskip("vllm")
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    full = make_arg_parser(FlexibleArgumentParser())
    engine = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    return _flags(full), _flags(engine)


def test_every_vllm_frontend_flag_is_classified(vllm_parsers):
    full, engine = vllm_parsers
    frontend = full - engine - {"-h", "--help"}
    assert "--ssl-keyfile" in frontend and "--api-key" in frontend  # the walk found the group
    missing = sorted(f for f in frontend if classify(f)[1] is None)
    assert not missing, f"vLLM frontend flags not classified in supervisor/frontend_flags.py: {missing}"


@pytest.mark.skipif(not os.access(VLLM_RS, os.X_OK), reason="vllm-rs binary not present")
def test_every_vllm_rs_serve_flag_is_classified_or_an_engine_flag(vllm_parsers):
    full, _ = vllm_parsers
    help_text = subprocess.run([VLLM_RS, "serve", "--help"], capture_output=True, text=True, timeout=60).stdout
    rs = set(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9-]+)", help_text, re.M)) - {"--help"}
    assert "--port" in rs
    missing = sorted(f for f in rs - full if classify(f)[1] is None)
    assert not missing, f"vllm-rs serve flags neither vLLM's nor classified: {missing}"


def test_table_entries_are_well_formed_and_not_stale(vllm_parsers):
    full, engine = vllm_parsers
    rs_only = {"--engine-ready-timeout-secs", "--http-timeout-keep-alive", "--python"}
    for flag, entry in FRONTEND_FLAGS.items():
        assert re.match(r"(implemented by |forwarded to the engine|refused: )", entry), (flag, entry)
        assert flag in (full - engine) or flag in rs_only, f"{flag} is no longer a vLLM frontend flag"


def test_defaults_of_refused_flags_are_vllms():
    pytest.importorskip("vllm")
    import dataclasses

    from vllm.entrypoints.launchers.cli_args import FrontendArgs

    defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(FrontendArgs)}
    for flag, entry in FRONTEND_FLAGS.items():
        key = flag[2:].replace("-", "_")
        if entry.startswith("refused: ") and key in defaults:
            assert flag in VLLM_DEFAULTS and VLLM_DEFAULTS[flag] == defaults[key], flag
    for flag, default in VLLM_DEFAULTS.items():
        # the argv scanner must know a switch from a flag with a value
        assert takes_value(flag) == (not isinstance(default, bool)), flag


def test_implemented_flags_are_the_supervisors():
    own = _flags(build_parser())
    for flag, entry in FRONTEND_FLAGS.items():
        if entry.startswith("implemented by"):
            assert flag in own, f"{flag} is marked implemented but the supervisor does not parse it"
    for alias, flag in ALIASES.items():
        assert alias in own


@pytest.mark.parametrize("argv, reason", [
    (["--enable-offline-docs"], "docs pages"),
    (["--tool-strict-level", "function"], "structural-tag"),
])
def test_refused_flags_stop_the_start_with_the_reason(argv, reason, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--engine", "sim", *argv, MODEL])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "is not supported" in err and reason in err


def test_refused_flags_in_a_config_file_too(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cohere-format: cmd3\n")
    with pytest.raises(SystemExit):
        parse_args(["--config", str(cfg), "--engine", "sim", MODEL])
    assert "--cohere-format is not supported" in capsys.readouterr().err


def test_tls_and_unix_socket_flags_are_the_supervisors_not_the_engines():
    opts = parse_args(["--engine", "sim", "--uds", "/tmp/s.sock",
                       "--sse-keep-alive-interval", "15", "--http-timeout-keep-alive", "7", MODEL])
    assert opts.engine_args == []
    assert opts.uds == "/tmp/s.sock" and opts.policy.sse_keep_alive_interval == 15
    assert opts.policy.http_timeout_keep_alive == 7


def test_switches_that_write_the_default_are_accepted_and_stay_here():
    assert refusal("--no-enable-ssl-refresh") is None
    assert refusal("--enable-log-deltas") is None  # on by default
    opts = parse_args(["--engine", "sim", "--no-enable-ssl-refresh", "--enable-log-deltas",
                       "--disable-uvicorn-access-log", "--disable-fastapi-docs", "--enable-server-load-tracking",
                       "-asc", "3", "--engine-ready-timeout-secs", "5", "--dtype", "half", MODEL])
    assert opts.engine_args == ["--dtype", "half"]  # only the engine's flag goes to the engine
    assert opts.workers == 3 and opts.engine_ready_timeout == 5


def test_refused_flags_written_with_vllms_default_are_accepted():
    opts = parse_args(["--engine", "sim", "--no-enable-offline-docs", "--cohere-format=cmd4",
                       "--no-enable-ssl-refresh", "--ssl-cert-reqs", "0", "--dtype", "half", MODEL])
    assert opts.engine_args == ["--dtype", "half"]
    with pytest.raises(SystemExit):
        parse_args(["--engine", "sim", "--cohere-format", "cmd3", MODEL])


def test_dropin_reports_only_refused_args_away_from_the_default():
    args = {"cohere_format": "cmd4", "uvicorn_log_level": "info", "enable_log_deltas": True,
            "ssl_keyfile": None, "lora_modules": None, "middleware": [], "api_key": ["k"]}
    assert refused_serve_args(args) == []
    args.update(ssl_keyfile="/k.pem", enable_log_deltas=False, lora_modules=["a=/x"], cohere_format="cmd3",
                tool_strict_level="parameter")
    reasons = refused_serve_args(args)  # (TLS, LoRA modules, log deltas are served here: not among them)
    assert len(reasons) == 2 and any(r.startswith("--cohere-format is not supported") for r in reasons)


def test_frontend_flags_never_reach_the_engine():
    opts = parse_args(["--engine", "sim", "--api-key", "k", "--allowed-origins", "http://a",
                       "--max-log-len", "10", "--enable-request-id-headers", "--max-num-queued-reqs", "4",
                       "--max-num-queued-tokens", "1k", MODEL])
    assert opts.engine_args == []
    assert opts.policy.max_num_queued_reqs == 4 and opts.policy.max_num_queued_tokens == 1000


def test_cors_lists_take_vllms_json_form():
    opts = parse_args(["--engine", "sim", "--allowed-origins", '["http://a", "http://b"]', MODEL])
    assert opts.policy.allowed_origins == ["http://a", "http://b"]


def test_the_compatibility_page_shows_the_flag_table():
    from pathlib import Path

    from vllm_pyfrontend.supervisor.frontend_flags import markdown

    page = (Path(__file__).resolve().parents[2] / "docs" / "COMPATIBILITY.md").read_text()
    start, end = "<!-- flags:start -->\n", "<!-- flags:end -->"
    shown = page[page.index(start) + len(start):page.index(end)]
    assert shown == markdown(), "run: python -m vllm_pyfrontend.supervisor.frontend_flags --markdown"
