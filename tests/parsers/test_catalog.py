"""The parser listings are generated from the registries (parsers/catalog.py)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest

from vllm_pyfrontend.parsers.catalog import markdown_table, parser_catalog
from vllm_pyfrontend.parsers.reasoning import reasoning_parser_names
from vllm_pyfrontend.parsers.tool import tool_parser_names

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
START, END = "<!-- parser-table:start -->", "<!-- parser-table:end -->"


def test_catalog_lists_every_registered_name_once():
    entries = parser_catalog()
    assert [e.name for e in entries if e.kind == "tool"] == tool_parser_names()
    assert [e.name for e in entries if e.kind == "reasoning"] == reasoning_parser_names()
    for e in entries:
        assert e.description and "\n" not in e.description, e
        assert e.module, e


def test_catalog_names_the_defining_module():
    by = {(e.kind, e.name): e.module for e in parser_catalog()}
    assert by["tool", "hermes"] == "tool/json_calls.py"
    assert by["tool", "deepseek_v4"] == "tool/deepseek.py"
    assert by["tool", "openai"] == "harmony.py"
    assert by["tool", "hf"] == "response_template/"
    assert by["reasoning", "qwen3"] == "reasoning/think_styles.py"
    assert by["reasoning", "mistral"] == "reasoning/families.py"


def test_markdown_table_has_a_row_per_parser():
    rows = markdown_table().splitlines()
    assert rows[0] == "| name | kind | format family / module | note |"
    assert len(rows) == 2 + len(tool_parser_names()) + len(reasoning_parser_names())
    assert all(r.count(" | ") == 3 for r in rows[2:])  # no unescaped pipe in a cell


@functools.cache
def _fresh(*args: str) -> str:
    """What a fresh interpreter prints: other tests in this process may have registered parsers
    of their own (plugins under test), which the built-in listing must not show."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, check=True).stdout


def test_catalog_command_prints_the_table():
    out = _fresh("-m", "vllm_pyfrontend.parsers.catalog", "--markdown")
    assert out == _fresh("-c", "from vllm_pyfrontend.parsers.catalog import markdown_table; "
                               "print(markdown_table())")


def test_readme_table_is_the_generated_one():
    """The README's table, between its markers, is the catalog's (regenerate it with
    ``python -m vllm_pyfrontend.parsers.catalog --markdown``)."""
    try:
        with open(README, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        pytest.skip("no README.md")
    if START not in text or END not in text:
        pytest.skip("README.md has no parser-table markers")
    inside = text.split(START, 1)[1].split(END, 1)[0]
    assert inside.strip() == _fresh("-m", "vllm_pyfrontend.parsers.catalog", "--markdown").strip()
