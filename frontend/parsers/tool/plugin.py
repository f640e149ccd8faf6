"""``--tool-parser-plugin FILE``: load a user's module that registers tool parsers.

As vLLM's flag: the file is imported once per process (the supervisor, to stop the start
on a broken plugin, and every worker, before the configured parser name is looked up), and
the names it registers can be given to ``--tool-call-parser``. The module registers with
this package's registry, e.g.::

    from vllm_pyfrontend.parsers.combinators import fmap, json_value, seq, ws
    from vllm_pyfrontend.parsers.tool import register_tool_parser
    from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat

    class MyCalls(ToolFormat):
        sections = {"<call>": Section(
            body=fmap(seq(ws(), json_value("{"), ws()), lambda v: [Call("f", v[1])]),
            ends=("</call>",))}

    register_tool_parser("my_calls", lambda tools: MyCalls())

A grammar registered this way streams like the built-in ones. A parser that is not a
section grammar can be registered with `register_custom_tool_parser(name, make)`:
``make(tokenizer, tools)`` returns an object with ``feed(text, token_ids=None)``,
``finish()`` (each an `AssistantDelta` or None) and ``n_calls``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

_LOADED: dict[str, ModuleType] = {}


def load_tool_parser_plugin(path: str) -> ModuleType:
    """Import the plugin at ``path`` (a ``.py`` file, or a dotted module name); once per process.

    Raises ValueError with the reason when it cannot be loaded.
    """
    key = os.path.abspath(path) if os.path.exists(path) else path
    if key in _LOADED:
        return _LOADED[key]
    try:
        if os.path.isfile(path):
            name = "vllm_pyfrontend_tool_parser_plugin_" + os.path.splitext(os.path.basename(path))[0]
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"not a Python module: {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        elif path.endswith(".py") or os.sep in path:
            raise FileNotFoundError(f"no such file: {path}")
        else:
            module = importlib.import_module(path)
    except Exception as e:  # any error in the user's module stops the start with its reason
        raise ValueError(f"--tool-parser-plugin {path!r} could not be loaded: {type(e).__name__}: {e}") from e
    _LOADED[key] = module
    return module


def check_tool_parser_plugin(path: str, tool_call_parser: str | None) -> None:
    """At start: the plugin loads, and ``--tool-call-parser`` names a registered parser."""
    from vllm_pyfrontend.parsers.tool import tool_parser_names

    load_tool_parser_plugin(path)
    if tool_call_parser not in (None, "auto") and tool_call_parser not in tool_parser_names():
        raise ValueError(
            f"--tool-call-parser {tool_call_parser!r} is not registered (after loading "
            f"--tool-parser-plugin {path!r}); known: {', '.join(tool_parser_names())}"
        )
