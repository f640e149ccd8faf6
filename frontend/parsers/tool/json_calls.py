"""JSON-object call formats: a JSON call object (or an array of them) inside
the model's markers.

hermes / qwen3_json, llama3_json / llama4_json, mistral, granite, granite4,
granite-20b-fc, jamba / hunyuan_a13b, apertus, internlm, gigachat3, ernie45,
longcat, phi4_mini_json, xlam, plamo3. Built from json_grammar.py: arguments
are the model's own JSON text. (DeepSeek's and Kimi's JSON formats live in
deepseek.py and kimi.py.)
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from vllm_pyfrontend.parsers.combinators import (
    P,
    choice,
    fmap,
    json_value,
    lit,
    many,
    opt,
    seq,
    tag,
    take_until,
    ws,
    ws_list,
)
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat
from vllm_pyfrontend.parsers.tool.json_grammar import call, call_object, json_args, name_ok
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.schema_values import tool_names


def json_array(item: P, minimum: int = 1) -> P:
    """``[item, item, ...]`` (at least ``minimum`` items) -> the items' values."""
    return fmap(
        seq(lit("["), ws(), many(item, sep=seq(ws(), lit(","), ws()), minimum=minimum), ws(), lit("]")),
        lambda v: v[2],
    )


def call_array(*arg_keys: str) -> P:
    """``[{"name": ..., "<arg_key>": {...}}, ...]`` (at least one call) -> list[Call]."""
    return json_array(call_object(*arg_keys))


def _strict_call(*arg_keys: str) -> P:
    """A call object that must carry one of ``arg_keys`` holding an object
    (streamed as written: `call_object`)."""
    return call_object(*arg_keys, strict=True)


def _padded(p: P) -> P:
    """``p`` with optional whitespace around it; value: ``p``'s."""
    return fmap(seq(ws(), p, ws()), lambda v: v[1])


def _one(p: P) -> P:
    return fmap(p, lambda call: [call])


# -------------------------------------------------------------------- hermes
class Hermes(ToolFormat):
    """Qwen2.5 / QwQ / Hermes: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""

    sections = {
        "<tool_call>": Section(
            body=fmap(
                seq(ws(), call_object("arguments", "parameters"), ws()),
                lambda v: [v[1]],
            ),
            ends=("</tool_call>",),
        )
    }


# --------------------------------------------------------------- llama3_json
class Llama3Json(ToolFormat):
    """Llama 3.x JSON calls: the output *is* ``{"name": ..., "parameters": {...}}``
    (several joined by ``;``), optionally after ``<|python_tag|>``."""

    only_at_start = True
    _calls = fmap(
        seq(
            many(call_object("parameters", "arguments"), sep=seq(ws(), lit(";"), ws()), minimum=1),
            ws(),
        ),
        lambda v: v[0],
    )
    sections = {
        "<|python_tag|>": Section(body=fmap(seq(ws(), _calls), lambda v: v[1])),
        "{": Section(body=_calls, keep_start=True),
    }


# ------------------------------------------------------------------- mistral
def _mistral_named() -> P:
    """v11+ tokenizers: ``name[ARGS]{...}`` (or ``name[CALL_ID]id[ARGS]{...}``)."""
    return tag(
        "call",
        fmap(
            seq(
                tag("name", fmap(take_until("[ARGS]", "[CALL_ID]", "{", "["), name_ok)),
                opt(seq(lit("[CALL_ID]"), take_until("[ARGS]"))),
                lit("[ARGS]"),
                json_args(),
            ),
            lambda v: [Call(name=v[0], arguments=v[3])],
        ),
    )


class Mistral(ToolFormat):
    """``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` or
    ``[TOOL_CALLS]name[ARGS]{...}`` (one section per call)."""

    sections = {
        "[TOOL_CALLS]": Section(
            body=fmap(
                seq(ws(), choice(json_array(call_object("arguments"), minimum=0), _mistral_named())), lambda v: v[1]
            )
        )
    }


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
        "<tool_calls>": Section(body=_padded(json_array(_strict_call("arguments"))), ends=("</tool_calls>",))
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


# ---------------------------------------------------------- longcat, phi4, xlam
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
            tag("name", fmap(take_until(PLAMO_END_NAME), name_ok)),
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
            body=ws_list(_call),
            ends=(PLAMO_END_REQUESTS,),
        )
    }


# the formats above but InternLM's do not read the request's tools: (name, format, note)
for _name, _format, _note in (
    ("hermes", Hermes, ""),
    ("qwen3_json", Hermes, "Hermes' format"),
    ("llama3_json", Llama3Json, ""),
    ("llama4_json", Llama3Json, "Llama 3's JSON format"),
    ("mistral", Mistral, "Mistral ([TOOL_CALLS])"),
    ("granite", Granite, ""),
    ("granite4", Granite4, ""),
    ("granite-20b-fc", Granite20bFC, ""),
    ("jamba", ToolCallsArray, ""),
    ("hunyuan_a13b", ToolCallsArray, ""),
    ("apertus", Apertus, ""),
    ("gigachat3", GigaChat3, ""),
    ("ernie45", Ernie45, ""),
    ("longcat", Longcat, ""),
    ("phi4_mini_json", Phi4MiniJson, ""),
    ("xlam", Xlam, ""),
    ("plamo3", Plamo3, ""),
):
    register_tool_parser(_name, lambda tools, fmt=_format: fmt(), note=_note)
register_tool_parser("internlm", lambda tools: Internlm(tools))
