"""Grammars for JSON-bodied calls: hermes, llama3_json, mistral, deepseek_v3/v31, kimi_k2.

Arguments are the model's own JSON text (the raw slice found by the JSON
scanner), never decoded and re-encoded: what the model wrote is what the
client gets, whitespace and escapes included.
"""

from __future__ import annotations

import json

from vllm_pyfrontend.parsers.combinators import (
    P,
    choice,
    fmap,
    json_value,
    lit,
    many,
    opt,
    seq,
    take_until,
    ws,
)
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat


def json_members() -> P:
    """A JSON object as ``{key: raw value text}`` (keys decoded, values raw)."""
    member = fmap(
        seq(json_value('"'), ws(), lit(":"), ws(), json_value(), ws()),
        lambda v: (json.loads(v[0]), v[4]),
    )
    return fmap(
        seq(lit("{"), ws(), many(member, sep=seq(lit(","), ws())), lit("}")),
        lambda v: dict(v[2]),
    )


def _args_from_raw(raw: str | None) -> str:
    """The arguments member: an object as written, a JSON string holding an
    object decoded once (some models double-encode), absent -> ``{}``."""
    if raw is None:
        return "{}"
    if raw.startswith("{"):
        return raw
    if raw.startswith('"'):
        inner = json.loads(raw)
        try:
            if isinstance(json.loads(inner), dict):
                return inner
        except ValueError:
            pass
    raise ValueError("arguments must be a JSON object")


def call_object(*arg_keys: str) -> P:
    """``{"name": "...", "<arg_key>": {...}}`` -> Call."""

    def build(members: dict[str, str]) -> Call:
        name_raw = members.get("name")
        if name_raw is None or not name_raw.startswith('"'):
            raise ValueError("no name")
        name = json.loads(name_raw)
        if not name:
            raise ValueError("empty name")
        raw = next((members[k] for k in arg_keys if k in members), None)
        return Call(name=name, arguments=_args_from_raw(raw))

    return fmap(json_members(), build)


def _name_ok(name: str) -> str:
    name = name.strip()
    if not name or any(c.isspace() or c in "<>{}" for c in name):
        raise ValueError("bad function name")
    return name


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
def _mistral_array() -> P:
    return fmap(
        seq(
            lit("["),
            ws(),
            many(call_object("arguments"), sep=seq(ws(), lit(","), ws())),
            ws(),
            lit("]"),
        ),
        lambda v: v[2],
    )


def _mistral_named() -> P:
    """v11+ tokenizers: ``name[ARGS]{...}`` (or ``name[CALL_ID]id[ARGS]{...}``)."""
    return fmap(
        seq(
            take_until("[ARGS]", "[CALL_ID]", "{", "["),
            opt(seq(lit("[CALL_ID]"), take_until("[ARGS]"))),
            lit("[ARGS]"),
            json_value("{"),
        ),
        lambda v: [Call(name=_name_ok(v[0]), arguments=v[3])],
    )


class Mistral(ToolFormat):
    """``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` or
    ``[TOOL_CALLS]name[ARGS]{...}`` (one section per call)."""

    sections = {
        "[TOOL_CALLS]": Section(
            body=fmap(seq(ws(), choice(_mistral_array(), _mistral_named())), lambda v: v[1])
        )
    }


# --------------------------------------------------------------- deepseek v3
_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
_CALLS_END = "<｜tool▁calls▁end｜>"
_CALL_BEGIN = "<｜tool▁call▁begin｜>"
_CALL_END = "<｜tool▁call▁end｜>"
_SEP = "<｜tool▁sep｜>"


def _deepseek_section(call: P) -> Section:
    return Section(
        body=fmap(seq(ws(), many(call, sep=ws(), minimum=1), ws()), lambda v: v[1]),
        ends=(_CALLS_END,),
    )


class DeepSeekV3(ToolFormat):
    """``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``."""

    sections = {
        _CALLS_BEGIN: _deepseek_section(
            fmap(
                seq(
                    lit(_CALL_BEGIN),
                    take_until(_SEP),
                    lit(_SEP),
                    fmap(take_until("\n"), _name_ok),
                    lit("\n```json\n"),
                    ws(),
                    json_value("{"),
                    ws(),
                    lit("```"),
                    ws(),
                    lit(_CALL_END),
                ),
                lambda v: Call(name=v[3], arguments=v[6]),
            )
        )
    }


class DeepSeekV31(ToolFormat):
    """``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``."""

    sections = {
        _CALLS_BEGIN: _deepseek_section(
            fmap(
                seq(
                    lit(_CALL_BEGIN),
                    fmap(take_until(_SEP), _name_ok),
                    lit(_SEP),
                    ws(),
                    json_value("{"),
                    ws(),
                    lit(_CALL_END),
                ),
                lambda v: Call(name=v[1], arguments=v[4]),
            )
        )
    }


# ------------------------------------------------------------------- kimi k2
def _kimi_name(call_id: str) -> str:
    head = call_id.strip()
    base = head.rsplit(":", 1)[0] if ":" in head else head
    name = base.split(".", 1)[1] if base.startswith("functions.") else base
    return _name_ok(name)


class KimiK2(ToolFormat):
    """``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
    <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>``.
    The header is the model's own call id and is passed through."""

    _call = fmap(
        seq(
            lit("<|tool_call_begin|>"),
            take_until("<|tool_call_argument_begin|>"),
            lit("<|tool_call_argument_begin|>"),
            ws(),
            json_value("{"),
            ws(),
            lit("<|tool_call_end|>"),
        ),
        lambda v: Call(name=_kimi_name(v[1]), arguments=v[4], id=v[1].strip()),
    )
    _section = Section(
        body=fmap(seq(ws(), many(_call, sep=ws(), minimum=1), ws()), lambda v: v[1]),
        ends=("<|tool_calls_section_end|>", "<|tool_call_section_end|>"),
    )
    sections = {
        "<|tool_calls_section_begin|>": _section,
        "<|tool_call_section_begin|>": _section,
    }

