"""The environment is read in one module, `vllm_pyfrontend.environment`, whose docstring names
every variable it reads; anywhere else the tree only copies it for a child or sets variables."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from vllm_pyfrontend import environment

REPO = Path(__file__).resolve().parent.parent
ENVIRONMENT = REPO / "frontend" / "environment.py"


def _environ_uses(path: Path) -> list[str]:
    """`os.environ` / `os.getenv` uses in `path` other than a copy (`dict(os.environ)`), setting a
    variable (`os.environ[k] = v`, `del os.environ[k]`, `os.environ.setdefault(...)`), as
    `file:line` strings."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
                and node.attr in ("environ", "environb", "getenv", "getenvb")):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "dict":
            continue  # a child's environment, copied
        if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, (ast.Store, ast.Del)):
            continue
        if isinstance(parent, ast.Attribute) and parent.attr == "setdefault":
            continue
        found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_only_the_environment_module_reads_the_environment():
    reads = [use for base in ("frontend", "supervisor") for path in sorted((REPO / base).rglob("*.py"))
             if path != ENVIRONMENT for use in _environ_uses(path)]
    assert reads == [], "read the environment through vllm_pyfrontend.environment"


def test_every_variable_it_reads_is_in_its_docstring():
    source = ENVIRONMENT.read_text()
    doc = ast.get_docstring(ast.parse(source)) or ""
    names = set(re.findall(r'"((?:VLLM|PROMETHEUS|OTEL|XDG)_[A-Z0-9_]+)"', source))
    assert len(names) > 20
    assert sorted(n for n in names if f"`{n}`" not in doc) == []


def test_reads_happen_when_called(monkeypatch):
    monkeypatch.setenv("VLLM_MAX_STOP_STRINGS", "7")
    assert environment.max_stop_strings() == 7
    monkeypatch.setenv("VLLM_MAX_STOP_STRINGS", "2")
    assert environment.max_stop_strings() == 2
    assert environment.max_stop_strings({}) == 4  # a mapping given instead: its values
    assert environment.sse_soft_limit({"VLLM_PYFRONTEND_SSE_SOFT_LIMIT": "x"}) == 256 * 1024


def test_the_api_keys_are_taken_out(monkeypatch):
    monkeypatch.setenv(environment.API_KEYS_ENV, json.dumps(["a", "", "b"]))
    assert environment.take_api_keys() == ["a", "b"]
    assert environment.take_api_keys() is None  # gone from the environment


def test_workers_must_be_an_integer():
    assert environment.workers({environment.WORKERS_ENV: "3"}) == 3
    assert environment.workers({environment.WORKERS_ENV: ""}) is None
    with pytest.raises(ValueError, match="VLLM_PYFRONTEND_WORKERS must be an integer"):
        environment.workers({environment.WORKERS_ENV: "three"})
