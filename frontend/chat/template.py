"""Chat templates: messages -> prompt text, with minijinja.

HF-compatible rendering (what ``transformers.apply_chat_template`` does, as
vLLM calls it):
* environment: ``trim_blocks`` + ``lstrip_blocks``, no trailing-newline
  keeping, lenient undefined values, loop controls (``break``/``continue``),
  Python-style methods on strings/dicts/lists (minijinja's ``pycompat``,
  on by default since minijinja 2.x for Python; we set it explicitly);
* ``tojson`` is HF's (``json.dumps`` with ``ensure_ascii=False`` and the
  optional ``indent``/``separators``/``sort_keys``), ``raise_exception`` and
  ``strftime_now`` are globals;
* the context is the tokenizer's special tokens (``bos_token`` ...), then the
  request's ``chat_template_kwargs``, then ``messages``, ``tools``,
  ``documents`` and ``add_generation_prompt`` (those four cannot be
  overridden from kwargs);
* messages are prepared like vLLM's chat parser does before any template
  runs: tool-call ``arguments`` strings become objects (invalid JSON -> {}),
  empty ``tool_calls`` lists are dropped, and an assistant's reasoning is
  visible as both ``reasoning`` and ``reasoning_content``;
* ``continue_final_message`` uses HF's marker technique: a tag is appended to
  the final message's text, the prompt is cut at the tag, so the final turn
  stays open (no end-of-turn tokens).

Bounds (a template is code; a request must not make it run away):
* minijinja fuel: every instruction costs fuel, and so does building large
  strings; the budget is ``BASE_FUEL + FUEL_PER_MESSAGE * len(messages) +
  FUEL_PER_INPUT_CHAR * (characters in the request)``, enough for real
  templates on any sane conversation (see tests) and a hard stop otherwise;
* minijinja's recursion limit (macro/include depth) and its cap on
  ``range()`` sizes;
* the rendered prompt may be at most ``max_output_chars`` characters
  (default 32 Mi); longer output is an error.
Every failure raises ``ChatTemplateError`` with a message fit for a 400.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

import minijinja
import msgspec

from vllm_pyfrontend.text.tokenizer import read_model_chat_template

BASE_FUEL = 5_000_000
FUEL_PER_MESSAGE = 200_000
FUEL_PER_INPUT_CHAR = 50
DEFAULT_MAX_OUTPUT_CHARS = 32 * 1024 * 1024

_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
_BUNDLED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
_RESERVED = ("messages", "tools", "documents", "add_generation_prompt")


class ChatTemplateError(ValueError):
    """A chat template could not be compiled or rendered for this request."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_json_encode = msgspec.json.encode
_PLAIN_JSON = json.JSONEncoder(ensure_ascii=False)  # what json.dumps builds for tojson's defaults


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    if not ensure_ascii and indent is None and separators is None and not sort_keys:
        return _PLAIN_JSON.encode(value)  # (the common call: one encoder, not one per call)
    if isinstance(separators, list):
        separators = tuple(separators)
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
    )


_msgpack_encode = msgspec.msgpack.encode
_TOOL_JSON: dict[bytes, str] = {}
_TOOL_JSON_MAX = 256


def tojson_tool(value: Any) -> str:
    """`_tojson(value)` with default arguments for a tool definition, remembered: requests of
    one application send the same tools again and again. Keyed by the value's msgpack bytes,
    which tell apart everything the JSON text tells apart (and more: 1 from 1.0, NaN from
    None), so an entry is only reused for a value whose JSON text is the same. At most
    `_TOOL_JSON_MAX` entries (then it starts over)."""
    try:
        key = _msgpack_encode(value)
    except (TypeError, ValueError, OverflowError):
        return _tojson(value)  # (not msgpack-able: whatever the encoder makes of it)
    text = _TOOL_JSON.get(key)
    if text is None:
        text = _tojson(value)
        if len(_TOOL_JSON) >= _TOOL_JSON_MAX:
            _TOOL_JSON.clear()
        _TOOL_JSON[key] = text
    return text


def _raise_exception(message: Any) -> None:
    raise ChatTemplateError(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _parse_arguments(arguments: Any) -> dict[str, Any]:
    """vLLM's ``_postprocess_messages`` coercion of tool-call arguments."""
    if not arguments:
        return {}
    if isinstance(arguments, dict):
        return arguments
    parsed: Any = arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            return {}
    return parsed if isinstance(parsed, dict) else {}


def prepare_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copy of ``messages`` shaped as vLLM's chat parser hands them to templates."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        if not isinstance(msg, dict):
            raise ChatTemplateError("each message must be an object")
        if msg.get("role") != "assistant":
            out.append(msg)
            continue
        msg = dict(msg)
        reasoning = msg.get("reasoning")
        if reasoning is None:
            reasoning = msg.get("reasoning_content")
        if reasoning is not None:
            msg["reasoning"] = reasoning
            msg["reasoning_content"] = reasoning
        tool_calls = msg.get("tool_calls")
        if isinstance(tool_calls, list):
            if not tool_calls:
                msg.pop("tool_calls")
            else:
                fixed = []
                for call in tool_calls:
                    if not isinstance(call, dict) or not isinstance(
                        call.get("function"), dict
                    ):
                        raise ChatTemplateError(
                            "assistant tool_calls entries must be objects with a 'function'"
                        )
                    function = dict(call["function"])
                    function["arguments"] = _parse_arguments(function.get("arguments"))
                    fixed.append({**call, "function": function})
                msg["tool_calls"] = fixed
        out.append(msg)
    return out


def _mark_final_message(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Append the continue tag to the final message's text (HF's technique)."""
    if not messages:
        raise ChatTemplateError("continue_final_message needs at least one message")
    final = dict(messages[-1])
    content = final.get("content")
    if content is None:
        raise ChatTemplateError(
            'continue_final_message is set but the final message has no "content" to continue'
        )
    if isinstance(content, (list, tuple)):
        blocks = [dict(b) if isinstance(b, dict) else b for b in content]
        for block in reversed(blocks):
            if isinstance(block, dict) and "text" in block:
                original = str(block["text"])
                block["text"] = original + _CONTINUE_TAG
                break
        else:
            raise ChatTemplateError(
                "continue_final_message is set but the final message has no text to continue"
            )
        final["content"] = blocks
    else:
        original = str(content)
        final["content"] = original + _CONTINUE_TAG
    return [*messages[:-1], final], original


def _input_size(value: Any, budget: int = 1 << 26) -> int:
    """Rough character count of the request data (for the fuel budget): the length of its
    JSON, or where something in it is not JSON, a walk that counts strings' characters."""
    try:
        return len(_json_encode(value))
    except (TypeError, ValueError, OverflowError):
        pass
    stack = [value]
    total = 0
    while stack and total < budget:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
            total += len(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
            total += 1
        else:
            total += 1
    return total


class ChatTemplate:
    """A compiled chat template; ``render`` is safe to call concurrently."""

    def __init__(
        self,
        source: str,
        *,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> None:
        if not isinstance(source, str) or not source:
            raise ChatTemplateError("chat template is empty")
        self.source = source
        self.max_output_chars = max_output_chars
        self._envs: dict[int, minijinja.Environment] = {}
        # A Python renderer of this exact template for the inputs it recognises (chat/renderers).
        from vllm_pyfrontend.chat.renderers import renderer_for

        self._renderer = renderer_for(source)
        # Compile once now so a broken template fails at startup.
        self._env_for(BASE_FUEL)

    def _env_for(self, fuel: int) -> minijinja.Environment:
        # Fuel is an environment setting; bucket it to reuse environments.
        bucket = 1 << max(fuel - 1, 1).bit_length()
        env = self._envs.get(bucket)
        if env is not None:
            return env
        env = minijinja.Environment(
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=False,
            undefined_behavior="lenient",
            pycompat=True,
            fuel=bucket,
        )
        env.add_filter("tojson", _tojson)
        env.add_global("raise_exception", _raise_exception)
        env.add_global("strftime_now", _strftime_now)
        try:
            env.add_template("chat", self.source)
        except minijinja.TemplateError as exc:
            raise ChatTemplateError(f"invalid chat template: {exc.message}") from None
        self._envs[bucket] = env
        return env

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        documents: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        template_vars: dict[str, Any] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> str:
        if continue_final_message and add_generation_prompt:
            raise ChatTemplateError(
                "continue_final_message and add_generation_prompt cannot both be true"
            )
        msgs = prepare_messages(messages)
        final_text: str | None = None
        if continue_final_message:
            msgs, final_text = _mark_final_message(msgs)

        context: dict[str, Any] = dict(template_vars or {})
        if chat_template_kwargs:
            context.update(
                {k: v for k, v in chat_template_kwargs.items() if k not in _RESERVED}
            )
        context["messages"] = msgs
        context["tools"] = tools
        context["documents"] = documents
        context["add_generation_prompt"] = add_generation_prompt

        if self._renderer is not None and final_text is None:
            text = self._renderer(msgs, tools, context)
            if text is not None:
                if len(text) > self.max_output_chars:
                    raise ChatTemplateError(f"rendered prompt exceeds {self.max_output_chars} characters")
                return text

        fuel = (
            BASE_FUEL
            + FUEL_PER_MESSAGE * len(msgs)
            + FUEL_PER_INPUT_CHAR
            * _input_size([msgs, tools, documents, chat_template_kwargs])
        )
        env = self._env_for(fuel)
        try:
            text = env.render_template("chat", **context)
        except ChatTemplateError:
            raise
        except minijinja.TemplateError as exc:
            if exc.kind == "OutOfFuel":
                raise ChatTemplateError(
                    "chat template rendering exceeded its work budget"
                ) from None
            raise ChatTemplateError(f"chat template error: {exc.message}") from None
        except RecursionError:
            raise ChatTemplateError("chat template recursion too deep") from None
        except (TypeError, ValueError, KeyError) as exc:
            raise ChatTemplateError(f"chat template error: {exc}") from None

        if len(text) > self.max_output_chars:
            raise ChatTemplateError(
                f"rendered prompt exceeds {self.max_output_chars} characters"
            )
        if final_text is not None:
            text = self._cut_at_tag(text, final_text)
        return text

    @staticmethod
    def _cut_at_tag(text: str, final_text: str) -> str:
        tag = _CONTINUE_TAG.strip()
        if final_text.strip() not in text or tag not in text:
            raise ChatTemplateError(
                "continue_final_message is set but the chat template does not "
                "render the final message's text"
            )
        loc = text.rindex(tag)
        if text[loc : loc + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
            return text[:loc]
        return text[:loc].rstrip()


def bundled_template_path(name: str) -> str:
    """Path of a template shipped in chat/templates/ (``name`` w/o .jinja)."""
    return os.path.join(_BUNDLED_DIR, f"{name}.jinja")


def load_chat_template(model_dir: str | None, override: str | None = None) -> ChatTemplate | None:
    """The chat template to use for a model.

    ``override`` (``--chat-template``) may be a file path, the name of a
    bundled template (``deepseek_v4``), or inline template text; without it
    the model dir's template (tokenizer_config.json ``chat_template`` or
    ``chat_template.jinja``) is used. None when the model has none.
    """
    if override:
        if os.path.isfile(override):
            with open(override, encoding="utf-8") as f:
                return ChatTemplate(f.read())
        if any(mark in override for mark in ("{{", "{%", "{#")):
            return ChatTemplate(override)
        bundled = bundled_template_path(override)
        if os.path.isfile(bundled):
            with open(bundled, encoding="utf-8") as f:
                return ChatTemplate(f.read())
        raise ChatTemplateError(
            f"chat template {override!r} is neither a file, a bundled template "
            "name, nor template text"
        )
    if model_dir is None:
        return None
    source = read_model_chat_template(model_dir)
    return ChatTemplate(source) if source else None
