"""`AssistantPipeline`'s interface over one stream that does the reasoning and the tool parser's
work at once (harmony, response templates)."""

from __future__ import annotations

from typing import Any

from vllm_pyfrontend.chat.assistant import AssistantDelta


class JointStream:
    """What such a stream found since its last delta (content, reasoning, tool calls), taken
    at once (`_take`), and its counts (`n_calls`, `reasoning_tokens`)."""

    def __init__(self) -> None:
        self._n_calls = 0
        self.reasoning_tokens = 0
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[dict[str, Any]] = []

    @property
    def n_calls(self) -> int:
        return self._n_calls

    def _take(self) -> AssistantDelta | None:
        content, reasoning, calls = "".join(self._content), "".join(self._reasoning), self._calls
        self._content, self._reasoning, self._calls = [], [], []
        if not content and not reasoning and not calls:
            return None
        return AssistantDelta(content=content or None, reasoning=reasoning or None, tool_calls=calls)


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
