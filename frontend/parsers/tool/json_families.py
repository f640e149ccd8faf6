"""JSON-bodied call formats added for every vLLM name (helper 15a): granite, granite4,
granite-20b-fc, jamba, hunyuan_a13b, apertus, internlm, gigachat3, ernie45.

Arguments stay the model's own JSON text (the raw slice found by the scanner),
as in json_calls.py; a body that is not the format's JSON is given back as
content.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from vllm_pyfrontend.parsers.combinators import (
    P,
    fmap,
    json_value,
    lit,
    many,
    opt,
    seq,
    tag,
    ws,
)
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat
from vllm_pyfrontend.parsers.tool.json_calls import call, call_object, json_args
from vllm_pyfrontend.parsers.tool.schema_values import tool_names


def call_array(*arg_keys: str) -> P:
    """``[{"name": ..., "<arg_key>": {...}}, ...]`` (at least one call) -> list[Call]."""
    return fmap(
        seq(
            lit("["),
            ws(),
            many(call_object(*arg_keys), sep=seq(ws(), lit(","), ws()), minimum=1),
            ws(),
            lit("]"),
        ),
        lambda v: v[2],
    )


def _strict_call(*arg_keys: str) -> P:
    """A call object that must carry one of ``arg_keys`` holding an object
    (streamed as written: `call_object`)."""
    return call_object(*arg_keys, strict=True)


def _strict_array(*arg_keys: str) -> P:
    return fmap(
        seq(
            lit("["),
            ws(),
            many(_strict_call(*arg_keys), sep=seq(ws(), lit(","), ws()), minimum=1),
            ws(),
            lit("]"),
        ),
        lambda v: v[2],
    )


def _padded(p: P) -> P:
    """``p`` with optional whitespace around it; value: ``p``'s."""
    return fmap(seq(ws(), p, ws()), lambda v: v[1])


def _one(p: P) -> P:
    return fmap(p, lambda call: [call])


# ------------------------------------------------------------------- granite
class Granite(ToolFormat):
    """Granite 3.0 / 3.1: ``<|tool_call|>[{"name": ..., "arguments": {...}}, ...]``
    (3.1 writes ``<tool_call>`` as text); no closing marker: the array ends it."""

    _body = fmap(seq(ws(), call_array("arguments")), lambda v: v[1])
    sections = {
        "<|tool_call|>": Section(body=_body),
        "<tool_call>": Section(body=_body),
    }


class Granite4(ToolFormat):
    """Granite 4: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (arguments
    may be a JSON string holding the object)."""

    sections = {
        "<tool_call>": Section(body=_padded(_one(call_object("arguments"))), ends=("</tool_call>",))
    }


class Granite20bFC(ToolFormat):
    """granite-20b-functioncalling: ``<function_call> {"name": ..., "arguments": {...}}``
    per call, no closing marker."""

    sections = {
        "<function_call>": Section(body=fmap(seq(ws(), _one(call_object("arguments"))), lambda v: v[1]))
    }


# ------------------------------------------------------- <tool_calls>[...] arrays
class ToolCallsArray(ToolFormat):
    """Jamba and Hunyuan-A13B: ``<tool_calls>[{"name": ..., "arguments": {...}}, ...]</tool_calls>``."""

    sections = {
        "<tool_calls>": Section(body=_padded(_strict_array("arguments")), ends=("</tool_calls>",))
    }


# -------------------------------------------------------------------- apertus
def _apertus_name(raw: str) -> str:
    name = json.loads(raw)
    if not name:
        raise ValueError("empty name")
    return name


def _apertus_call() -> P:
    """``{"get_weather": {...}}``: a one-member object, the key is the name
    (streamed: the name is announced once the arguments object begins)."""
    return call(
        seq(
            lit("{"),
            ws(),
            tag("name", fmap(json_value('"'), _apertus_name)),
            ws(),
            lit(":"),
            ws(),
            json_args(),
            ws(),
            lit("}"),
        ),
        lambda v: Call(name=v[2], arguments=v[6]),
    )


class Apertus(ToolFormat):
    """Apertus: ``<|tools_prefix|>[{"get_weather": {"city": "Paris"}}, ...]<|tools_suffix|>``."""

    sections = {
        "<|tools_prefix|>": Section(
            body=_padded(
                fmap(
                    seq(lit("["), ws(), many(_apertus_call(), sep=seq(ws(), lit(","), ws()), minimum=1), ws(), lit("]")),
                    lambda v: v[2],
                )
            ),
            ends=("<|tools_suffix|>",),
        )
    }


# ------------------------------------------------------------------- internlm
class Internlm(ToolFormat):
    """InternLM2: ``<|action_start|><|plugin|>\\n{"name": ..., "parameters": {...}}<|action_end|>``.
    With tools in the request, a name that is not one of them is not a call."""

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        known = tool_names(tools)

        def check(name: str) -> None:
            if known and name not in known:
                raise ValueError("not one of the request's tools")

        self.sections = {
            "<|action_start|><|plugin|>": Section(
                body=_padded(_one(call_object("parameters", "arguments", check=check))),
                ends=("<|action_end|>",),
            )
        }


# ------------------------------------------------------------------ gigachat3
class GigaChat3(ToolFormat):
    """GigaChat 3: ``function call<|role_sep|>\\n{"name": ..., "arguments": {...}}``
    (after ``<|message_sep|>``), or ``<|function_call|>{...}``; one call, to the end."""

    # the end of sequence may follow the call as text
    _call = fmap(seq(_one(_strict_call("arguments")), opt(seq(ws(), lit("</s>")))), lambda v: v[0])
    sections = {
        "<|function_call|>": Section(body=fmap(seq(ws(), _call), lambda v: v[1])),
        "function call<|role_sep|>": Section(body=fmap(seq(ws(), _call), lambda v: v[1])),
        "<|message_sep|>": Section(
            body=fmap(seq(ws(), lit("function call<|role_sep|>"), ws(), _call), lambda v: v[3])
        ),
    }


# -------------------------------------------------------------------- ernie45
class Ernie45(ToolFormat):
    """ERNIE 4.5: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``."""

    sections = {
        "<tool_call>": Section(body=_padded(_one(call_object("arguments"))), ends=("</tool_call>",))
    }
