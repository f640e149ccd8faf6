"""``--reasoning-parser-plugin``: a user's module that registers reasoning parsers.

As vLLM's flag: the value is a module name (importable from ``sys.path``) or the path of
a Python file. Importing it runs its registrations; here a plugin registers with this
project's registry::

    from vllm_pyfrontend.parsers.reasoning import register_reasoning_parser
    from vllm_pyfrontend.parsers.reasoning.think import ThinkStyle

    register_reasoning_parser("my_model", ThinkStyle(start="<reflect>", end="</reflect>"))

(or a maker with `get_reasoning_parser`'s signature returning a parser object with
``feed`` / ``finish`` / ``reasoning_tokens``). Every worker and the supervisor (to fail at
start, not at the first request) load it before ``--reasoning-parser`` is resolved. Unlike
vLLM, which logs a plugin that fails to import and starts anyway, a broken plugin stops
the start with the error.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from vllm_pyfrontend.parsers.reasoning import reasoning_parser_names

_LOADED: dict[str, list[str]] = {}


def load_reasoning_parser_plugin(plugin: str | None) -> list[str]:
    """Import ``plugin`` once per process; the reasoning parser names it registered."""
    if not plugin:
        return []
    if plugin in _LOADED:
        return _LOADED[plugin]
    before = set(reasoning_parser_names())
    if os.path.isfile(plugin):
        _import_file(plugin)
    else:
        try:
            importlib.import_module(plugin)
        except ModuleNotFoundError as e:
            if e.name != plugin:
                raise
            raise ValueError(
                f"--reasoning-parser-plugin {plugin!r}: neither a file nor an importable module"
            ) from None
    _LOADED[plugin] = sorted(set(reasoning_parser_names()) - before)
    return _LOADED[plugin]


def _import_file(path: str) -> None:
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"--reasoning-parser-plugin {path!r}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
