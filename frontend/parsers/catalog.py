"""Every registered tool-call and reasoning parser, listed from the registries.

`parser_catalog()` returns one `ParserEntry` per registered name (tool and reasoning), with
the module that registered it and a one-line description: the registration's note, else
the model named in the format's docstring (tool parsers), else the first phrase of the
registering module's docstring. Listings are generated from it instead of kept by hand:

    python -m vllm_pyfrontend.parsers.catalog              # name, kind, module, description
    python -m vllm_pyfrontend.parsers.catalog --markdown   # the README's parser table

and ``frontend-supervisor --help`` names every registered parser (`names_help`).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from typing import Any

# (importing a registry imports its package, whose __init__ imports every registering module)
from vllm_pyfrontend.parsers.reasoning.registry import reasoning_parser_names, reasoning_parser_registration
from vllm_pyfrontend.parsers.tool import registry as tool_registry
from vllm_pyfrontend.parsers.tool.base import ToolFormat

_PACKAGE = "vllm_pyfrontend.parsers."


@dataclass(frozen=True)
class ParserEntry:
    name: str
    #: "tool" (``--tool-call-parser``) or "reasoning" (``--reasoning-parser``)
    kind: str
    #: the registering module, relative to ``vllm_pyfrontend.parsers`` (``tool/json_calls.py``)
    module: str
    description: str


def _module_path(module: str) -> str:
    """``vllm_pyfrontend.parsers.tool.json_calls`` -> ``tool/json_calls.py`` (a package's
    submodule is shown as the package: ``response_template/``); a module outside this
    package (a plugin) keeps its dotted name."""
    if not module.startswith(_PACKAGE):
        return module
    parts = module[len(_PACKAGE):].split(".")
    if parts[0] not in ("tool", "reasoning"):
        mod = sys.modules.get(_PACKAGE + parts[0])
        is_package = mod is not None and hasattr(mod, "__path__")
        return parts[0] + ("/" if is_package else ".py")
    return "/".join(parts) + ".py"


def _phrase(doc: str | None) -> str:
    """The first phrase of a docstring: its first paragraph up to a ``:`` or sentence end."""
    if not doc:
        return ""
    para = " ".join(doc.strip().split("\n\n", 1)[0].split())
    cut = re.search(r"::|: |\.(?: |$)", para)
    return (para[: cut.start()] if cut else para).strip()


def _module_phrase(module: str) -> str:
    mod = sys.modules.get(module)
    return _phrase(getattr(mod, "__doc__", None))


def _tool_description(name: str, note: str, module: str) -> str:
    if note:
        return note
    fmt: Any = tool_registry.tool_format(name)
    if type(fmt) is not ToolFormat:
        phrase = _phrase(type(fmt).__doc__)
        if phrase and not phrase.startswith("``"):
            return phrase
    return _module_phrase(module)


def parser_catalog() -> list[ParserEntry]:
    """Every registered parser, tool parsers first, each kind by name."""
    out = []
    for name in tool_registry.tool_parser_names():
        reg = tool_registry.tool_parser_registration(name)
        out.append(ParserEntry(name, "tool", _module_path(reg.module),
                               _tool_description(name, reg.note, reg.module)))
    for name in reasoning_parser_names():
        reg = reasoning_parser_registration(name)
        out.append(ParserEntry(name, "reasoning", _module_path(reg.module),
                               reg.note or _module_phrase(reg.module)))
    return out


def names_help(kind: str) -> str:
    """The registered names of one kind, comma-separated (for ``--help``)."""
    names = (tool_registry.tool_parser_names() if kind == "tool" else reasoning_parser_names())
    return ", ".join(names)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(entries: list[ParserEntry] | None = None) -> str:
    """The README's parser table (no trailing newline)."""
    rows = [
        "| name | kind | format family / module | note |",
        "| --- | --- | --- | --- |",
    ]
    for e in parser_catalog() if entries is None else entries:
        rows.append(f"| `{e.name}` | {e.kind} | `{_cell(e.module)}` | {_cell(e.description)} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m vllm_pyfrontend.parsers.catalog",
        description="List every registered tool-call and reasoning parser.",
    )
    p.add_argument("--markdown", action="store_true", help="print the README's parser table")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown_table())
        return 0
    for e in parser_catalog():
        print(f"{e.name}\t{e.kind}\t{e.module}\t{e.description}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
