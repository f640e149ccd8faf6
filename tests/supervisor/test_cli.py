"""Command line: which flags the supervisor reads, which it forwards to vLLM's engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vllm_pyfrontend.supervisor.cli import build_parser, human_readable_int, main, parse_args, resolve_model, split_argv
from vllm_pyfrontend.supervisor.engine_launch import engine_launches, split_sim_flags
from vllm_pyfrontend.supervisor.options import SupervisorOptions

# argv -> (expected supervisor fields, expected forwarded engine args)
CASES = [
    (
        ["/m"],
        {"model": "/m", "engine": "vllm", "port": 8000, "host": "0.0.0.0", "max_model_len": None},
        [],
    ),
    (
        ["--workers", "3", "--port", "9000", "/m", "--dtype", "half", "--enforce-eager"],
        {"workers": 3, "port": 9000, "model": "/m"},
        ["--dtype", "half", "--enforce-eager"],
    ),
    # An unknown flag's value is not the model; boolean flags take no value.
    (
        ["--dtype", "float16", "--trust-remote-code", "/m", "-tp", "2"],
        {"model": "/m"},
        ["--dtype", "float16", "--trust-remote-code", "-tp", "2"],
    ),
    (
        ["/m", "--no-enable-prefix-caching", "--gpu-memory-utilization=0.9", "-O3"],
        {"model": "/m"},
        ["--no-enable-prefix-caching", "--gpu-memory-utilization=0.9", "-O3"],
    ),
    # Read AND forwarded: vLLM's human-readable ints, underscores normalized.
    (
        ["/m", "--max_model_len", "32K", "--max-num-seqs", "64"],
        {"max_model_len": 32768, "max_num_seqs": 64},
        ["--max-model-len", "32K", "--max-num-seqs", "64"],
    ),
    (["/m", "--max-model-len=auto"], {"max_model_len": None}, ["--max-model-len=auto"]),
    (["/m", "--max-model-len", "-1"], {"max_model_len": None}, ["--max-model-len", "-1"]),
    (
        ["--served-model-name", "a", "b", "--tokenizer", "/t", "/m"],
        {"served_model_names": ["a", "b"], "tokenizer": "/t", "model": "/m"},
        ["--served-model-name", "a", "b", "--tokenizer", "/t"],
    ),
    # Supervisor-only flags are not forwarded.
    (
        ["/m", "--engine", "sim", "--sim-step-time", "0.02", "--chat-template", "t.jinja",
         "--shutdown-timeout", "5", "--engine-ready-timeout", "60", "--log-level", "debug"],
        {"engine": "sim", "sim_step_time": 0.02, "chat_template": "t.jinja", "shutdown_timeout": 5.0,
         "engine_ready_timeout": 60.0, "log_level": "debug"},
        [],
    ),
    (["--api-server-count", "4", "/m"], {"workers": 4}, []),
    # A multi-value flag right before the model does not swallow it.
    (
        ["--port", "1", "--served-model-name", "a", "b", "/m"],
        {"served_model_names": ["a", "b"], "model": "/m"},
        ["--served-model-name", "a", "b"],
    ),
    (
        ["--served-model-name", "a", "/m", "--dtype", "half"],
        {"served_model_names": ["a"], "model": "/m"},
        ["--served-model-name", "a", "--dtype", "half"],
    ),
    # Multi-value vLLM flags keep all their values.
    (
        ["/m", "--cudagraph-capture-sizes", "1", "2", "4", "--seed", "1"],
        {"model": "/m"},
        ["--cudagraph-capture-sizes", "1", "2", "4", "--seed", "1"],
    ),
    (["/m", "--", "--weird", "x"], {"model": "/m"}, ["--weird", "x"]),
    # Data parallel: read; layout re-emitted explicitly; address/port go to the handshake only.
    (
        ["/m", "--data-parallel-size", "2"],
        {"data_parallel_size": 2, "local_engine_count": 2, "engine_indices": [0, 1],
         "has_remote_engines": False},
        ["--data-parallel-size", "2", "--data-parallel-size-local", "2"],
    ),
    (
        ["-dp", "4", "-dpl", "0", "-dpa", "10.0.0.5", "-dpp", "13345", "/m"],
        {"data_parallel_size": 4, "local_engine_count": 0, "local_engine_ranks": [],
         "data_parallel_address": "10.0.0.5", "data_parallel_rpc_port": 13345,
         "has_remote_engines": True},
        ["--data-parallel-size", "4", "--data-parallel-size-local", "0"],
    ),
    (
        ["/m", "--data-parallel-size", "4", "--data-parallel-size-local", "2"],
        {"local_engine_ranks": [0, 1], "engine_indices": [0, 1, 2, 3], "data_parallel_rpc_port": 29550},
        ["--data-parallel-size", "4", "--data-parallel-size-local", "2"],
    ),
]


@pytest.mark.parametrize("argv,fields,forwarded", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_parse_table(argv, fields, forwarded):
    opts = parse_args(argv)
    for name, value in fields.items():
        assert getattr(opts, name) == value, name
    assert opts.engine_args == forwarded


def test_workers_default_is_cpu_count():
    assert parse_args(["/m"]).workers == len(os.sched_getaffinity(0))


def test_served_names_default_to_model_as_written():
    assert parse_args(["demo:deepseek-v4"]).served_names == ["demo:deepseek-v4"]
    assert parse_args(["/m", "--served-model-name", "x"]).served_names == ["x"]


@pytest.mark.parametrize(
    "argv",
    [
        [],  # no model
        ["/m", "/n"],  # two models
        ["/m", "--workers", "0"],
        ["/m", "--engine", "tpu"],
        ["/m", "--data-parallel-size", "2", "--data-parallel-size-local", "3"],
        ["/m", "--max-model-len", "lots"],
        ["/m", "--work", "2"],  # no abbreviations: `--work` is a (forwarded) vLLM flag...
    ],
)
def test_usage_errors(argv):
    if argv == ["/m", "--work", "2"]:  # ...so this one parses, and forwards it
        assert parse_args(argv).engine_args == ["--work", "2"]
        return
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_main_returns_usage_error_code(capsys):
    assert main([]) == 2
    assert main(["--help"]) == 0
    assert "vLLM engine flags" in capsys.readouterr().out


def test_split_argv_keeps_order():
    own, model, fwd = split_argv(["--port", "1", "/m", "--max-num-seqs", "8", "--dtype", "half"], build_parser())
    assert own == ["--port", "1", "--max-num-seqs", "8"]
    assert model == "/m"
    assert fwd == ["--max-num-seqs", "8", "--dtype", "half"]


@pytest.mark.parametrize("text,value", [("4096", 4096), ("32k", 32000), ("32K", 32768), ("1.5k", 1500),
                                        ("1M", 1 << 20), ("auto", -1), ("-1", -1)])
def test_human_readable_int(text, value):
    assert human_readable_int(text) == value


def test_resolve_model(tmp_path, monkeypatch):
    assert resolve_model(str(tmp_path), "vllm") == str(tmp_path)
    with pytest.raises(ValueError, match="not a local directory"):
        resolve_model(str(tmp_path / "missing"), "vllm")
    with pytest.raises(ValueError, match="--engine sim"):
        resolve_model("demo:deepseek-v4", "vllm")
    with pytest.raises(ValueError, match="unknown demo"):
        resolve_model("demo:llama", "sim")


def test_resolve_demo_model_materializes_into_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = resolve_model("demo:deepseek-v4", "sim")
    assert path.startswith(str(tmp_path / "vllm-pyfrontend"))
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        assert os.path.isfile(os.path.join(path, name)), name
    json.load(open(os.path.join(path, "config.json")))


# ---------------------------------------------------------------- engine commands


def test_sim_engine_launches_one_process_per_local_rank():
    opts = parse_args(["/m", "--engine", "sim", "-dp", "3", "-dpl", "2", "--sim-step-time", "0.005",
                       "--max-model-len", "2k", "--max-num-seqs", "32", "--max-num-batched-tokens", "512",
                       "--enforce-eager"])
    launches = engine_launches(opts, "127.0.0.1", 4242)
    assert [l.name for l in launches] == ["engine 0", "engine 1"]
    argv = launches[1].argv
    assert argv[1:3] == ["-m", "vllm_pyfrontend.supervisor.sim"]

    def value(flag):
        return argv[argv.index(flag) + 1]

    assert value("--handshake-address") == "tcp://127.0.0.1:4242"
    assert value("--engine-index") == "1"
    assert value("--model") == "/m"
    assert value("--step-time") == "0.005"
    assert value("--max-model-len") == "2000"
    assert value("--max-num-seqs") == "32"
    assert value("--max-num-batched-tokens") == "512"
    assert "--enforce-eager" not in argv


def test_single_sim_engine_is_named_engine():
    launches = engine_launches(parse_args(["/m", "--engine", "sim"]), "127.0.0.1", 1)
    assert [l.name for l in launches] == ["engine"]


def test_no_local_engines_launches_nothing():
    assert engine_launches(parse_args(["/m", "-dp", "2", "-dpl", "0"]), "10.0.0.5", 29550) == []


def test_vllm_engine_uses_build_engine_command(monkeypatch):
    """The engine flags reach `vllm_pyfrontend.supervisor.vllm_headless.build_engine_command` (faked here)."""
    import sys
    import types

    vllm_engine = types.ModuleType("vllm_pyfrontend.supervisor.vllm_headless")
    monkeypatch.setitem(sys.modules, "vllm_pyfrontend.supervisor.vllm_headless", vllm_engine)
    calls = []

    def fake_build(model, address, port, engine_args, python=None):
        calls.append((model, address, port, list(engine_args)))
        return ["vllm-engine"]

    vllm_engine.build_engine_command = fake_build
    opts = parse_args(["/m", "--max-model-len", "4096", "--dtype", "half", "-dp", "2"])
    launches = engine_launches(opts, "127.0.0.1", 5555)
    assert [(l.name, l.argv) for l in launches] == [("engine", ["vllm-engine"])]
    assert calls == [("/m", "127.0.0.1", 5555, ["--max-model-len", "4096", "--dtype", "half",
                                                  "--data-parallel-size", "2", "--data-parallel-size-local", "2"])]


def test_split_sim_flags():
    picked, rest = split_sim_flags(["--dtype", "half", "--enforce-eager", "--seed=3", "-tp", "2",
                                    "--disable-log-stats"])
    assert picked == ["--dtype", "half", "--seed=3", "--disable-log-stats"]
    assert rest == ["--enforce-eager", "-tp", "2"]


def test_options_defaults_are_consistent():
    opts = SupervisorOptions(model="/m")
    assert opts.local_engine_ranks == [0] and not opts.has_remote_engines


@pytest.mark.parametrize("kind", ["tool", "reasoning"])
def test_help_lists_every_registered_parser(kind, capsys):
    """--help names every registered parser (from the registries, not a hand-kept list)."""
    import re

    from vllm_pyfrontend.parsers.reasoning import reasoning_parser_names
    from vllm_pyfrontend.parsers.tool import tool_parser_names

    assert main(["--help"]) == 0
    printed = re.sub(r"-\n\s+", "-", capsys.readouterr().out)  # a hyphenated name may be wrapped
    names = tool_parser_names() if kind == "tool" else reasoning_parser_names()
    assert not set(names) - set(re.findall(r"[\w-]+", printed))


def test_parsing_a_command_line_does_not_load_the_parsers():
    """The registries (every parser module) are loaded for --help only."""
    code = ("import sys; from vllm_pyfrontend.supervisor.cli import build_parser; "
            "build_parser().parse_known_args(['--tool-call-parser', 'hermes', '/m']); "
            "print('vllm_pyfrontend.parsers.tool' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_tokenizer_backend_from_flag_or_environment(monkeypatch, capsys):
    """--tokenizer-backend, else $VLLM_PYFRONTEND_TOKENIZER_BACKEND, else auto; a value of
    neither kind is a usage error naming the choices."""
    monkeypatch.delenv("VLLM_PYFRONTEND_TOKENIZER_BACKEND", raising=False)
    assert parse_args(["/m"]).policy.tokenizer_backend == "auto"
    assert parse_args(["/m", "--tokenizer-backend", "tokenizers"]).policy.tokenizer_backend == "tokenizers"
    monkeypatch.setenv("VLLM_PYFRONTEND_TOKENIZER_BACKEND", "tokenizers")
    assert parse_args(["/m"]).policy.tokenizer_backend == "tokenizers"
    assert parse_args(["/m", "--tokenizer-backend", "fastokens"]).policy.tokenizer_backend == "fastokens"
    monkeypatch.setenv("VLLM_PYFRONTEND_TOKENIZER_BACKEND", "hf")
    with pytest.raises(SystemExit):
        parse_args(["/m"])
    assert "VLLM_PYFRONTEND_TOKENIZER_BACKEND='hf': not one of auto, fastokens, tokenizers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["/m", "--tokenizer-backend", "hf"])
