"""The bundled DeepSeek V4 template (chat/templates/deepseek_v4.jinja) in Python, for a
single-turn conversation: a user message, optionally after a system message, string contents,
with or without tools. Anything else (history, tool results, content parts, tasks,
developer messages) is left to the template.

For those inputs the template writes: BOS, the reasoning-effort prompt in thinking mode, the
system text (empty when tools come without one) followed by the tools section, the user turn,
and the assistant's opening with <think> in thinking mode or </think> in chat mode. The
strings are read from the template itself, so the two cannot drift apart; when they cannot be
read, no renderer is registered. tests/chat/test_template_renderers.py checks the result
against the template.
"""

from __future__ import annotations

import json
import re
from typing import Any

from vllm_pyfrontend.chat import renderers
from vllm_pyfrontend.chat.template import bundled_template_path, tojson_tool

_NAMES = ("BOS", "USER", "ASSISTANT", "THINK_START", "THINK_END", "EFFORT_PROMPTS", "TOOLS_HEAD", "TOOLS_TAIL")
_LOW_EFFORTS = ("low", "minimal", "medium")


def _constants(source: str) -> dict[str, Any] | None:
    """The template's string constants (`{%- set NAME = <JSON literal> -%}`)."""
    found: dict[str, Any] = {}
    for name in _NAMES:
        m = re.search(r"\{%- set " + name + r" = (.*?) -%\}\n", source)
        if m is None:
            return None
        try:
            found[name] = json.loads(m.group(1))
        except ValueError:
            return None
    prompts = found["EFFORT_PROMPTS"]
    if not isinstance(prompts, dict) or not all(isinstance(prompts.get(k), str) for k in ("low", "high", "max")):
        return None
    return found


def _make(c: dict[str, Any]):
    bos, user_tag, assistant = c["BOS"], c["USER"], c["ASSISTANT"]
    think_start, think_end = c["THINK_START"], c["THINK_END"]
    prompts, tools_head, tools_tail = c["EFFORT_PROMPTS"], c["TOOLS_HEAD"], c["TOOLS_TAIL"]

    def render(messages: list[dict[str, Any]], tools: Any, ctx: dict[str, Any]) -> str | None:
        if len(messages) == 1:
            system, user = None, messages[0]
        elif len(messages) == 2:
            system, user = messages
            if system.get("role") != "system" or "task" in system or type(system.get("content")) is not str:
                return None
        else:
            return None
        if user.get("role") != "user" or "task" in user:
            return None
        text = user.get("content")
        if type(text) is not str:
            return None
        tools_text = ""
        if tools:
            if type(tools) is not list:
                return None
            parts = []
            for t in tools:
                fn = t.get("function") if type(t) is dict else None
                if type(fn) is not dict:
                    return None
                parts.append(tojson_tool(fn))  # the template's `t.function | tojson`
            tools_text = "\n\n" + tools_head + "\n".join(parts) + tools_tail
        # thinking mode and effort, as the template's options block decides them
        if "thinking" in ctx or "enable_thinking" in ctx:
            thinking = bool(ctx.get("thinking")) or bool(ctx.get("enable_thinking"))
        else:
            thinking = True
        effort = ctx.get("reasoning_effort")
        if type(effort) is not str:
            level = "high" if thinking else "low"
        elif effort == "none":
            thinking, level = False, "low"
        elif effort == "max":
            level = "max"
        elif effort in _LOW_EFFORTS:
            level = "low"
        else:
            level = "high"
        out = bos + prompts[level] if thinking else bos
        if system is not None or tools_text:
            out += (system["content"] if system is not None else "") + tools_text
        return out + user_tag + text + assistant + (think_start if thinking else think_end)

    return render


def _register() -> None:
    with open(bundled_template_path("deepseek_v4"), encoding="utf-8") as f:
        source = f.read()
    c = _constants(source)
    if c is not None:
        renderers.register(source, _make(c))


_register()
