"""Chat messages checked and normalised before a template sees them: roles, content shapes, text
parts flattened to strings (the form chat templates expect)."""

from __future__ import annotations

from typing import Any

from vllm_pyfrontend.errors import APIError


# OpenAI's roles. Any other string is a custom role, passed to the chat template as vLLM passes
# it (its CustomChatCompletionMessageParam); the template decides what it means.
VALID_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Check roles and content shapes; flatten text content parts to strings for templates."""
    if not messages:
        raise APIError(400, "`messages` must contain at least one message.", "messages")
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if not isinstance(role, str) or not role:
            raise APIError(400, f"messages[{i}].role must be a non-empty string, got {role!r}.", "messages")
        m = dict(msg)
        content = msg.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") not in ("text", "input_text"):
                    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                    raise APIError(
                        400,
                        f"messages[{i}].content: content part type {kind!r} is not supported "
                        "by this text-only model.",
                        "messages",
                    )
                text = part.get("text")
                if not isinstance(text, str):
                    raise APIError(400, f"messages[{i}].content: text part without a string `text`.", "messages")
                texts.append(text)
            m["content"] = "\n".join(texts)
        elif content is not None and not isinstance(content, str):
            raise APIError(400, f"messages[{i}].content must be a string or a list of parts.", "messages")
        elif content is None and role not in ("assistant",):
            raise APIError(400, f"messages[{i}].content is required for role {role!r}.", "messages")
        out.append(m)
    return out
