"""Outputs forced by ``tool_choice`` through structured outputs (JSON schema).

vLLM's schemas (vllm/tool_parsers/utils.py ``get_json_schema_from_tools``):
``"required"`` makes the whole output a JSON array of
``{"name": ..., "parameters": {...}}`` (``maxItems: 1`` without parallel
calls); a named function makes the whole output that function's arguments
object. The same streaming engine parses both, so a truncated output (max
tokens) comes back as content rather than as a broken call.
"""

from __future__ import annotations

from vllm_pyfrontend.parsers.combinators import const, fmap, lit, many, seq, tag, ws
from vllm_pyfrontend.parsers.tool.base import Call, Section, SectionToolParser, ToolFormat
from vllm_pyfrontend.parsers.tool.json_grammar import call_object, json_args


class RequiredCalls(ToolFormat):
    """``[{"name": "f", "parameters": {...}}, ...]`` (tool_choice "required")."""

    only_at_start = True
    sections = {
        "[": Section(
            body=fmap(
                seq(
                    lit("["),
                    ws(),
                    many(call_object("parameters", "arguments"), sep=seq(ws(), lit(","), ws()), minimum=1),
                    ws(),
                    lit("]"),
                    ws(),
                ),
                lambda v: v[2],
            ),
            keep_start=True,
        )
    }


class NamedCall(ToolFormat):
    """``{...}``: the arguments of the one function the request named."""

    only_at_start = True

    def __init__(self, name: str) -> None:
        self.sections = {
            "{": Section(
                body=tag(
                    "call",
                    fmap(
                        seq(tag("name", const(name)), json_args(), ws()),
                        lambda v: [Call(name=name, arguments=v[1])],
                    ),
                ),
                keep_start=True,
            )
        }


def forced_tool_parser(tool_choice_name: str | None) -> SectionToolParser:
    """Parser for output forced by structured outputs: ``tool_choice`` "required"
    (``tool_choice_name=None``) or a named function. Not a ``--tool-call-parser``:
    with a forced choice the model's own call syntax is not used (as in vLLM)."""
    fmt = RequiredCalls() if tool_choice_name is None else NamedCall(tool_choice_name)
    return SectionToolParser(fmt)
