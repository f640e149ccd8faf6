"""More JSON-bodied call formats: longcat, phi4_mini_json, xlam, plamo3.

Built from the same pieces as json_calls.py: arguments are the model's own
JSON text.
"""

from __future__ import annotations

from vllm_pyfrontend.parsers.combinators import (
    fmap,
    lit,
    many,
    opt,
    seq,
    tag,
    take_until,
    ws,
)
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat
from vllm_pyfrontend.parsers.tool.json_calls import _name_ok, call, call_object, json_args
from vllm_pyfrontend.parsers.tool.json_families import call_array


class Longcat(ToolFormat):
    """LongCat-Flash: hermes with ``<longcat_tool_call>`` … ``</longcat_tool_call>``."""

    sections = {
        "<longcat_tool_call>": Section(
            body=fmap(seq(ws(), call_object("arguments", "parameters"), ws()), lambda v: [v[1]]),
            ends=("</longcat_tool_call>",),
        )
    }


class Phi4MiniJson(ToolFormat):
    """Phi-4-mini: ``functools[{"name": ..., "arguments": {...}}, ...]``."""

    sections = {
        "functools": Section(
            body=fmap(seq(ws(), call_array("arguments", "parameters")), lambda v: v[1])
        )
    }


class Xlam(ToolFormat):
    """Salesforce xLAM: the output is a JSON array of ``{"name", "arguments"}``,
    bare, after ``[TOOL_CALLS]``, in a ```` ```json ```` block or inside ``<tool_call>`` …
    ``</tool_call>``. Only at the start of the output: a JSON
    block quoted in the middle of an answer is not a call."""

    only_at_start = True
    _array = call_array("arguments")
    sections = {
        # "[TOOL_CALLS]" begins with "[": one section, so that no split can tell them apart early
        "[": Section(
            body=fmap(seq(opt(seq(lit("[TOOL_CALLS]"), ws())), _array, ws()), lambda v: v[1]),
            keep_start=True,
        ),
        "```": Section(
            body=fmap(seq(opt(lit("json")), ws(), _array, ws()), lambda v: v[2]), ends=("```",)
        ),
        "<tool_call>": Section(body=fmap(seq(ws(), _array, ws()), lambda v: v[1]), ends=("</tool_call>",)),
    }


# -------------------------------------------------------------------- plamo3
_P = "<|plamo:"
PLAMO_BEGIN_REQUESTS = f"{_P}begin_tool_requests:plamo|>"
PLAMO_END_REQUESTS = f"{_P}end_tool_requests:plamo|>"
PLAMO_BEGIN_REQUEST = f"{_P}begin_tool_request:plamo|>"
PLAMO_END_REQUEST = f"{_P}end_tool_request:plamo|>"
PLAMO_BEGIN_NAME = f"{_P}begin_tool_name:plamo|>"
PLAMO_END_NAME = f"{_P}end_tool_name:plamo|>"
PLAMO_BEGIN_ARGS = f"{_P}begin_tool_arguments:plamo|>{_P}constrain|>json{_P}msg|>"
PLAMO_END_ARGS = f"{_P}end_tool_arguments:plamo|>"


class Plamo3(ToolFormat):
    """PLaMo 3::

        <|plamo:begin_tool_requests:plamo|><|plamo:begin_tool_request:plamo|>
        <|plamo:begin_tool_name:plamo|>NAME<|plamo:end_tool_name:plamo|>
        <|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>{...}
        <|plamo:end_tool_arguments:plamo|><|plamo:end_tool_request:plamo|>
        <|plamo:end_tool_requests:plamo|>
    """

    _call = call(
        seq(
            lit(PLAMO_BEGIN_REQUEST),
            ws(),
            lit(PLAMO_BEGIN_NAME),
            tag("name", fmap(take_until(PLAMO_END_NAME), _name_ok)),
            lit(PLAMO_END_NAME),
            ws(),
            lit(PLAMO_BEGIN_ARGS),
            ws(),
            opt(json_args()),
            ws(),
            lit(PLAMO_END_ARGS),
            ws(),
            lit(PLAMO_END_REQUEST),
        ),
        lambda v: Call(name=v[3], arguments=v[8] or "{}"),
    )
    sections = {
        PLAMO_BEGIN_REQUESTS: Section(
            body=fmap(seq(ws(), many(_call, sep=ws(), minimum=1), ws()), lambda v: v[1]),
            ends=(PLAMO_END_REQUESTS,),
        )
    }
