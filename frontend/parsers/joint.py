"""`AssistantPipeline`'s interface over one stream that does the reasoning and the tool parser's
work at once (harmony, response templates)."""

from __future__ import annotations

from typing import Any


class JointPipeline:
    """`stream` splits the output (it counts `reasoning_tokens` and `n_calls`); `tool` is set by
    the caller to a forced-call parser (tool_choice required or named). `reasoning` is None:
    there is no separate reasoning parser."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.reasoning = None
        self.tool: Any = None

    @property
    def reasoning_tokens(self) -> int:
        return self.stream.reasoning_tokens

    @property
    def n_tool_calls(self) -> int:
        return self.tool.n_calls if self.tool is not None else self.stream.n_calls
