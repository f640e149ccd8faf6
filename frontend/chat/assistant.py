"""Text deltas of one choice -> assistant message events.

This is the seam where reasoning and tool-call parsers (frontend/parsers) plug in: each is an
incremental transformer over the released text. Without a parser configured, all text is
`content`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class AssistantDelta:
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not self.content and not self.reasoning and not self.tool_calls


class AssistantStream:
    """Plain content stream (no reasoning / tool parser)."""

    __slots__ = ()

    reasoning_tokens = 0
    n_tool_calls = 0

    def feed(self, text: str, token_ids=None) -> AssistantDelta | None:
        return AssistantDelta(content=text) if text else None

    def finish(self) -> AssistantDelta | None:
        return None
