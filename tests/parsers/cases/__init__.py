"""Cases for the differential test of every parser name against vLLM's installed parsers.

Each module in this package covers some parser names and defines any of:

- ``TOOL_CASES: list[ToolCase]``: a model output for a tool-call parser name and what it
  must give (content, calls with decoded arguments);
- ``REASONING_CASES: list[ReasoningCase]``: an output for a reasoning parser name and its
  split (reasoning, content);
- ``DIFFERENCES: dict[str, str]``: case id -> why vLLM's installed parser answers otherwise.
  Only deliberate, explained differences; the test checks vLLM still differs there (a stale
  entry fails);
- ``COMMITTED: dict[str, tuple[str, Calls]]``: case id -> (content, calls) replacing a
  malformed case's expectation where the commit rule applies (see committed.py); with
  ``WHY`` as the documented difference from vLLM, except for the ids in ``AGREES``;
- ``EXTRA_TOKENS: list[str]``: markers vLLM's parsers look up in the vocabulary (they are
  added to the test tokenizer so that vLLM's parser classes can be built);
- ``OVERRIDES: dict[str, tuple]``: case id -> the expected result that replaces the one its
  module wrote ((content, calls) for a tool case, (reasoning, content) for a reasoning case),
  where a later change to the shared parser core deliberately changed that result;
- ``KNOWN_GAPS: dict[str, str]``: "tool:NAME" / "reasoning:NAME" -> why vLLM's parser of that
  name is not registered here (the every-name tests check exactly these are missing).

``tests/parsers/test_every_parser_vs_vllm.py`` runs every case, whole and streamed under
several splits, against ours and vLLM's.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any

Calls = list[tuple[str, Any]]


@dataclass
class ToolCase:
    parser: str
    name: str
    text: str
    content: str
    calls: Calls = field(default_factory=list)
    #: the request's tools (OpenAI dicts); None: tests.parsers.corpus.TOOLS
    tools: list[dict[str, Any]] | None = None
    #: the model's response_template (tokenizer_config.json), for the ``hf`` parser
    template: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        return f"tool:{self.parser}:{self.name}"


@dataclass
class ReasoningCase:
    parser: str
    name: str
    text: str
    reasoning: str
    content: str
    #: chat_template_kwargs of the request (e.g. {"enable_thinking": False})
    kwargs: dict[str, Any] | None = None
    #: the model's response_template (tokenizer_config.json), for the ``hf`` parser
    template: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        return f"reasoning:{self.parser}:{self.name}"


@dataclass
class Loaded:
    tool_cases: list[ToolCase] = field(default_factory=list)
    reasoning_cases: list[ReasoningCase] = field(default_factory=list)
    differences: dict[str, str] = field(default_factory=dict)
    extra_tokens: list[str] = field(default_factory=list)
    known_gaps: dict[str, str] = field(default_factory=dict)


def load() -> Loaded:
    """Every case module of this package, merged."""
    out = Loaded()
    overrides: dict[str, tuple[Any, Any]] = {}
    committed: dict[str, Any] = {}
    agrees: set[str] = set()
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        out.tool_cases += getattr(mod, "TOOL_CASES", [])
        out.reasoning_cases += getattr(mod, "REASONING_CASES", [])
        for key, why in getattr(mod, "DIFFERENCES", {}).items():
            assert key not in out.differences, f"{key} documented twice"
            out.differences[key] = why
        out.extra_tokens += [t for t in getattr(mod, "EXTRA_TOKENS", []) if t not in out.extra_tokens]
        out.known_gaps.update(getattr(mod, "KNOWN_GAPS", {}))
        overrides.update(getattr(mod, "OVERRIDES", {}))
        committed.update({k: (v, getattr(mod, "WHY", "")) for k, v in getattr(mod, "COMMITTED", {}).items()})
        agrees |= set(getattr(mod, "AGREES", ()))
    for c in out.tool_cases:
        if c.id in overrides:
            c.content, c.calls = overrides.pop(c.id)
    for r in out.reasoning_cases:
        if r.id in overrides:
            r.reasoning, r.content = overrides.pop(r.id)
    assert not overrides, f"overrides for unknown cases: {sorted(overrides)}"
    ids = [c.id for c in out.tool_cases + out.reasoning_cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    by_id = {c.id: c for c in out.tool_cases}
    for key, ((content, calls), why) in committed.items():
        by_id[key].content, by_id[key].calls = content, [tuple(c) for c in calls]
        out.differences[key] = why
    for key in agrees:
        out.differences.pop(key, None)
    return out
