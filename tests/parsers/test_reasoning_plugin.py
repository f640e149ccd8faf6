"""``--reasoning-parser-plugin``: a user's file registers a reasoning parser; the supervisor
checks it at start and every worker loads it before resolving ``--reasoning-parser``."""

from __future__ import annotations

import textwrap

import openai
import pytest

from tests.parsers.harness import run_whole
from tests.stack import Stack
from vllm_pyfrontend.parsers.reasoning import get_reasoning_parser, reasoning_parser_names
from vllm_pyfrontend.parsers.reasoning.plugin import load_reasoning_parser_plugin
from vllm_pyfrontend.supervisor.cli import parse_args

PLUGIN = textwrap.dedent(
    """
    from vllm_pyfrontend.parsers.reasoning import register_reasoning_parser
    from vllm_pyfrontend.parsers.reasoning.think import ThinkStyle

    register_reasoning_parser(
        "plugin_reflect", ThinkStyle(start="<reflect>", end="</reflect>", default_thinking=False)
    )
    """
)


@pytest.fixture(scope="module")
def plugin_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("plugin") / "reflect_plugin.py"
    path.write_text(PLUGIN, encoding="utf-8")
    return str(path)


def test_plugin_file_registers_a_parser(plugin_file: str) -> None:
    assert load_reasoning_parser_plugin(plugin_file) == ["plugin_reflect"]
    assert load_reasoning_parser_plugin(plugin_file) == ["plugin_reflect"]  # once per process
    assert "plugin_reflect" in reasoning_parser_names()
    r = run_whole(lambda: get_reasoning_parser("plugin_reflect"), "<reflect>hm</reflect>Yes.")
    assert (r.reasoning, r.content) == ("hm", "Yes.")


def test_plugin_module_name_and_errors(tmp_path, monkeypatch) -> None:
    (tmp_path / "plugin_by_name.py").write_text(PLUGIN.replace("plugin_reflect", "plugin_named"))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_reasoning_parser_plugin("plugin_by_name") == ["plugin_named"]
    with pytest.raises(ValueError, match="neither a file nor an importable module"):
        load_reasoning_parser_plugin("no_such_plugin_module_anywhere")
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("raise RuntimeError('bad plugin')\n")
    with pytest.raises(RuntimeError, match="bad plugin"):
        load_reasoning_parser_plugin(str(broken))


def test_cli_flag(plugin_file: str, tmp_path) -> None:
    opts = parse_args(["--reasoning-parser-plugin", plugin_file, "--reasoning-parser", "plugin_reflect", "/m"])
    assert opts.policy.reasoning_parser_plugin == plugin_file
    assert opts.engine_args == []  # the workers' flag, not the engine's
    broken = tmp_path / "broken_cli_plugin.py"
    broken.write_text("import no_such_module_anywhere\n")
    with pytest.raises(SystemExit):
        parse_args(["--reasoning-parser-plugin", str(broken), "/m"])


def test_workers_load_the_plugin(plugin_file: str) -> None:
    """End to end on the simulated engine: the plugin's parser splits the scripted output."""
    stack = Stack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "2048",
                   "--reasoning-parser-plugin", plugin_file, "--reasoning-parser", "plugin_reflect",
                   "--served-model-name", "m", "--shutdown-timeout", "5", "demo:deepseek-v4"])
    try:
        client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0, timeout=30)
        resp = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=50,
            extra_body={"vllm_xargs": {"sim_text": "<reflect>thinking it over</reflect>Yes."}},
        )
        msg = resp.choices[0].message
        assert (msg.model_extra or {}).get("reasoning") == "thinking it over"
        assert msg.content == "Yes."
    finally:
        stack.terminate()
