"""Python renderers of known chat templates (a registry of plug-ins).

A chat template is rendered by minijinja; for a template this project ships, a plug-in may
register a Python function that produces the same text for the inputs it recognises (the
common single-turn request) and answers None for anything else, which the template then
renders. It is keyed by the template's exact source, so an edited template never meets a
renderer written for another text. Each plug-in is tested equal to its template.

A renderer is called as ``renderer(messages, tools, context)``: the prepared messages, the
request's tools (or None) and the template's whole context (template variables and
chat_template_kwargs included).
"""

from __future__ import annotations

import hashlib
import importlib
from typing import Any, Callable

Renderer = Callable[[list[dict[str, Any]], Any, dict[str, Any]], "str | None"]

#: Plug-in modules, imported on first lookup; each calls `register`.
PLUGINS = ("vllm_pyfrontend.chat.renderers.deepseek_v4",)

_by_source: dict[str, Renderer] = {}
_loaded = False


def _key(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def register(source: str, renderer: Renderer) -> None:
    """`renderer` renders templates whose source is exactly `source`."""
    _by_source[_key(source)] = renderer


def renderer_for(source: str) -> Renderer | None:
    global _loaded
    if not _loaded:
        _loaded = True
        for name in PLUGINS:
            importlib.import_module(name)
    return _by_source.get(_key(source))
