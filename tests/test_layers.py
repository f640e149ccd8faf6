"""The layer order holds by construction: no import goes up a layer (`vllm_pyfrontend.layers`),
no API style imports another, and docs/ARCHITECTURE.md's layer table is the one printed from it."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from vllm_pyfrontend import layers

REPO = Path(__file__).resolve().parents[1]


def test_no_import_goes_up_a_layer():
    problems = layers.violations(REPO / "frontend", REPO / "supervisor")
    assert problems == [], "\n".join(problems)


def test_every_package_has_a_layer():
    packages = {p.name for p in (REPO / "frontend").iterdir()
                if (p / "__init__.py").exists() or (p.suffix == ".py" and p.stem not in ("__init__", "layers"))}
    for name in sorted(packages):
        layers.layer_of(name.removesuffix(".py"))


def test_architecture_page_shows_the_layer_table():
    page = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    start, end = "<!-- layers:start -->", "<!-- layers:end -->"
    assert start in page and end in page
    shown = page.split(start, 1)[1].split(end, 1)[0].strip()
    assert shown == layers.markdown(), "run: python -m vllm_pyfrontend.layers --markdown"


def _check(tmp_path: Path, files: dict[str, str]) -> list[str]:
    for name, text in files.items():
        path = tmp_path / "frontend" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (tmp_path / "supervisor").mkdir(exist_ok=True)
    (tmp_path / "supervisor" / "__init__.py").write_text("")
    return layers.violations(tmp_path / "frontend", tmp_path / "supervisor")


@pytest.mark.parametrize("source, expected", [
    ("from vllm_pyfrontend.server import app\n", "imports a layer above its own"),
    ("def f():\n    import vllm_pyfrontend.server.app\n", "imports a layer above its own"),
    ("from vllm_pyfrontend.api.other import schemas\n", "one API style imports another"),
    ("from vllm_pyfrontend.api.mine.routes import handle\n", None),
])
def test_the_check_sees_each_kind_of_break(tmp_path, source, expected):
    files = {
        "__init__.py": "", "server/__init__.py": "", "server/app.py": "",
        "api/__init__.py": "", "api/other/__init__.py": "", "api/other/schemas.py": "",
        "api/mine/__init__.py": "", "api/mine/routes.py": "handle = None\n",
        "api/mine/lowering.py": source,
    }
    problems = _check(tmp_path, files)
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1 and expected in problems[0], problems


def test_a_lower_layer_importing_a_route_module_is_caught(tmp_path):
    problems = _check(tmp_path, {
        "__init__.py": "", "api/__init__.py": "", "api/mine/__init__.py": "",
        "api/mine/routes.py": "", "serving/__init__.py": "",
        "serving/state.py": "from vllm_pyfrontend.api.mine import routes\n",
    })
    assert any("imports a layer above its own" in p for p in problems), problems


def test_imports_are_read_from_the_whole_tree():
    tree = ast.parse("if x:\n    from vllm_pyfrontend.chat import template\n")
    assert layers._imports(tree, "vllm_pyfrontend.server.app", False) == {"vllm_pyfrontend.chat.template"}
