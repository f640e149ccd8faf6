"""Shared case builder for the case modules pythonic, json_more and xml_more."""

from __future__ import annotations

import json
from typing import Any, Callable

from tests.parsers.cases import Calls, ToolCase
from tests.parsers.corpus import EMPTY, NESTED, ONE, PARALLEL, PLAIN, UNICODE

Render = Callable[[Calls], str]


def j(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False)


def xml_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def standard(
    parser: str,
    render: Render,
    *,
    broken: str,
    expect: Callable[[Calls], Calls] = lambda c: c,
    unicode: Calls = UNICODE,
    nested: Calls = NESTED,
    text_around: bool = True,
) -> list[ToolCase]:
    """The standard set: no call, one, parallel, nested/escaped, empty arguments, unicode,
    text before and after, truncated and broken output (given back as content)."""
    out = [
        ToolCase(parser, "no_call", PLAIN, PLAIN),
        ToolCase(parser, "single", render(ONE), "", expect(ONE)),
        ToolCase(parser, "parallel", render(PARALLEL), "", expect(PARALLEL)),
        ToolCase(parser, "nested_escaped", render(nested), "", expect(nested)),
        ToolCase(parser, "empty_args", render(EMPTY), "", expect(EMPTY)),
        ToolCase(parser, "unicode", render(unicode), "", expect(unicode)),
    ]
    if text_around:
        out.append(
            ToolCase(
                parser,
                "text_before_after",
                "Let me check.\n\n" + render(ONE) + "\n\nDone: 杭州.",
                "Let me check.\n\nDone: 杭州.",
                expect(ONE),
            )
        )
    full = render(ONE)
    truncated = full[: len(full) * 2 // 3]
    out.append(ToolCase(parser, "malformed_truncated", truncated, truncated))
    out.append(ToolCase(parser, "malformed_broken", broken, broken))
    return out
