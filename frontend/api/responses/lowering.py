"""A Responses request lowered to what the chat layer takes: chat messages, chat-style tools and
tool choice, a `response_format`, template kwargs.

Input items (vLLM's `construct_input_messages`): a string is one user message; message items
with `input_text` / `output_text` parts become messages (`input_image` parts, for a model
that takes images, `image_url` parts); `reasoning`, `function_call` items
join the assistant message before them (or start one); `function_call_output` items become
tool messages. A follow-up (`previous_response_id`) sees the previous request's messages, then
the previous output items, then its own input, under its own instructions.
"""

from __future__ import annotations

from typing import Any

from vllm_pyfrontend.errors import APIError

_TEXT_PARTS = ("input_text", "output_text", "text")
_BUILTIN_TOOLS = {
    "web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26",
    "file_search", "code_interpreter", "computer_use_preview", "computer_use", "image_generation",
    "local_shell", "shell", "mcp", "apply_patch", "custom", "namespace",
}


def image_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    """An `input_image` part as a chat `image_url` part (vLLM's chat parser reads the part's
    `image_url` string, an http(s) or data URL); `file_id` needs the Files API, not served."""
    url = part.get("image_url")
    if isinstance(url, dict):  # the chat form, accepted as vLLM's parser does
        url = url.get("url")
    if not isinstance(url, str) or not url:
        if part.get("file_id"):
            raise APIError(400, f"{where}: input_image with a file_id is not supported (there is no Files "
                                "API here); give image_url (an http(s) or data: URL).", "input")
        raise APIError(400, f"{where}: an input_image part needs an `image_url` string.", "input")
    return {"type": "image_url", "image_url": {"url": url}}


def _text_of(content: Any, where: str, allow_media: bool = False) -> str | list[dict[str, Any]]:
    """A message's content: its text (parts joined by newlines), or, when the model takes
    images and the message has some, its parts (text and `image_url`) in order."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, f"{where}.content must be a string or a list of parts.", "input")
    texts = []
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_image" and allow_media:
            parts.append(image_part(part, where))
            continue
        if kind not in _TEXT_PARTS or not isinstance(part.get("text"), str):
            raise APIError(400, f"{where}: content part type {kind!r} is not supported by this text-only "
                                "model (input_text and output_text are).", "input")
        texts.append(part["text"])
        parts.append({"type": "text", "text": part["text"]})
    if len(parts) > len(texts):
        return parts
    return "\n".join(texts) if len(texts) != 1 else texts[0]


def _assistant_to_extend(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    last = messages[-1] if messages else None
    return last if last is not None and last.get("role") == "assistant" else None


def items_to_messages(items: list[dict[str, Any]], messages: list[dict[str, Any]],
                      allow_media: bool = False) -> None:
    """Append the chat messages of Responses input (or output) items to `messages`.
    `allow_media`: the model takes images (a user's `input_image` parts become `image_url`
    parts; else they are refused)."""
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise APIError(400, f"{where} must be an object.", "input")
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"
        prev = _assistant_to_extend(messages)
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise APIError(400, f"{where}.role must be user, system, developer or assistant, got {role!r}.",
                               "input")
            text = _text_of(item.get("content"), where, allow_media and role != "assistant")
            if role == "assistant" and prev is not None and prev.get("content") is None:
                prev["content"] = text
            else:
                messages.append({"role": role, "content": text})
        elif kind == "reasoning":
            if item.get("encrypted_content"):
                raise APIError(400, "Encrypted content is not supported.", "input")
            parts = item.get("content") or item.get("summary") or []
            if not isinstance(parts, list):
                raise APIError(400, f"{where}: reasoning content must be a list of parts.", "input")
            text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
            if prev is not None and prev.get("reasoning") is None and prev.get("content") is None \
                    and not prev.get("tool_calls"):
                prev["reasoning"] = text
            else:
                messages.append({"role": "assistant", "content": None, "reasoning": text})
        elif kind == "function_call":
            name, call_id, args = item.get("name"), item.get("call_id"), item.get("arguments")
            if not isinstance(name, str) or not isinstance(call_id, str) or not isinstance(args, str):
                raise APIError(400, f"{where}: a function_call needs string `call_id`, `name` and `arguments`.",
                               "input")
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            if prev is not None:
                prev.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            if not isinstance(item.get("call_id"), str):
                raise APIError(400, f"{where}: a function_call_output needs a string `call_id`.", "input")
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": _text_of(output, where) if output is not None else ""})
        else:
            raise APIError(400, f"Unsupported input item type: {kind!r}.", "input")


def continues_final_message(items: str | list[dict[str, Any]]) -> bool:
    """A last assistant message (or reasoning) item still in progress is continued (vLLM)."""
    if isinstance(items, str) or not items:
        return False
    last = items[-1]
    if not isinstance(last, dict) or last.get("type", "message") not in ("message", "reasoning"):
        return False
    return last.get("status") in ("in_progress", "incomplete")


def build_messages(instructions: str | None, input_: str | list[dict[str, Any]],
                   previous: dict[str, Any] | None, allow_media: bool = False) -> list[dict[str, Any]]:
    """The chat messages of one request: instructions, the previous turn's conversation (its
    messages without their system message, then its output items), then the new input."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if previous is not None:
        messages.extend(dict(m) for m in previous.get("messages") or [] if m.get("role") != "system")
        items_to_messages(previous["response"].get("output") or [], messages)
    if isinstance(input_, str):
        messages.append({"role": "user", "content": input_})
    else:
        items_to_messages(input_, messages, allow_media)
    if not messages:
        raise APIError(400, "`input` must contain at least one item.", "input")
    return messages


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Responses function tools (flat) as chat tools; built-in tools are refused."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            if kind in _BUILTIN_TOOLS or isinstance(kind, str):
                raise APIError(400, f"tools[{i}]: the built-in tool type {kind!r} is not supported here; "
                                    "only function tools are.", "tools")
            raise APIError(400, f"tools[{i}] must be an object with a `type`.", "tools")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise APIError(400, f"tools[{i}].name is required.", "tools")
        fn = {"name": name}
        if tool.get("description") is not None:
            fn["description"] = tool["description"]
        if tool.get("parameters") is not None:
            fn["parameters"] = tool["parameters"]
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: Any, has_tools: bool) -> Any:
    if choice is None or choice == "auto":
        return "auto" if has_tools else "none"
    if choice in ("none", "required"):
        return choice
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "function":
            return {"type": "function", "function": {"name": choice.get("name")}}
        raise APIError(400, f"tool_choice type {kind!r} is not supported here; only function tools are.",
                       "tool_choice")
    raise APIError(400, 'tool_choice must be "none", "auto", "required" or {"type": "function", "name": ...}.',
                   "tool_choice")


def response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """`text.format` as chat's `response_format` (json_schema is lowered to structured outputs)."""
    fmt = (text or {}).get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise APIError(400, "text.format.schema must be a JSON schema object.", "text")
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name"), "schema": fmt["schema"]}}
    raise APIError(400, f"text.format type {kind!r} is not supported.", "text")
