"""Grammars for JSON-bodied calls: hermes, llama3_json, mistral, deepseek_v3/v31, kimi_k2.

Arguments are the model's own JSON text (the raw slice found by the JSON
scanner), never decoded and re-encoded: what the model wrote is what the
client gets, whitespace and escapes included.
"""

from __future__ import annotations

import json

from vllm_pyfrontend.parsers import combinators
from vllm_pyfrontend.parsers.combinators import (
    NEED,
    Fail,
    Ok,
    P,
    Result,
    choice,
    fmap,
    json_value,
    lit,
    many,
    opt,
    scan_json,
    seq,
    tag,
    take_until,
    ws,
)
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat
from vllm_pyfrontend.parsers.tool.streaming import json_args_partial


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


_WS = " \t\r\n"


class _CallObject(P):
    """``{"name": "...", "<arg key>": {...}, ...}`` -> Call, scanning member by
    member so that a partial object reports its name and arguments so far
    (the first ``name`` member and the first member named by ``arg_keys``
    count; other members are ignored). ``strict``: the arguments member is
    required and must be an object as written (no double-encoded string);
    ``check(name)`` rejects a name (raises ValueError) before it is announced;
    ``name_keys``: the members that may hold the name; without ``encoded`` the
    arguments must be an object as written (optional unless ``strict``)."""

    __slots__ = ("arg_keys", "strict", "check", "name_keys", "encoded")

    def __init__(
        self,
        arg_keys: tuple[str, ...],
        strict: bool = False,
        check=None,
        name_keys: tuple[str, ...] = ("name",),
        encoded: bool = True,
    ) -> None:
        self.arg_keys = arg_keys
        self.strict = strict
        self.check = check
        self.name_keys = name_keys
        self.encoded = encoded and not strict

    def parse(self, s: str, pos: int, eof: bool) -> Result:
        n = len(s)
        if pos >= n:
            return Fail(pos) if eof else NEED
        if s[pos] != "{":
            return Fail(pos)
        name: str | None = None
        args_raw: str | None = None
        i = pos + 1
        first = True
        while True:
            while i < n and s[i] in _WS:
                i += 1
            if i >= n:
                return self._need(s, name, args_raw, -1, eof)
            if first and s[i] == "}":
                i += 1
                break
            first = False
            r = scan_json(s, i, eof)
            if r is NEED:
                return self._need(s, name, args_raw, -1, eof)
            if isinstance(r, Fail) or s[i] != '"':
                return r if isinstance(r, Fail) else Fail(i)
            key = json.loads(r.value)
            i = r.end
            while i < n and s[i] in _WS:
                i += 1
            if i >= n:
                return self._need(s, name, args_raw, -1, eof)
            if s[i] != ":":
                return Fail(i)
            i += 1
            while i < n and s[i] in _WS:
                i += 1
            r = scan_json(s, i, eof)
            is_args = key in self.arg_keys and args_raw is None
            if r is NEED:
                return self._need(s, name, args_raw, i if is_args else -1, eof)
            if isinstance(r, Fail):
                return r
            if key in self.name_keys and name is None:
                if not r.value.startswith('"'):
                    return Fail(i)
                name = json.loads(r.value)
                if not name:
                    return Fail(i)
                if self.check is not None:
                    try:
                        self.check(name)
                    except ValueError:
                        return Fail(i)
            elif is_args:
                args_raw = r.value
                if not self.encoded and not args_raw.startswith("{"):
                    return Fail(i)
                try:
                    _args_from_raw(args_raw)
                except ValueError:
                    return Fail(i)
            i = r.end
            while i < n and s[i] in _WS:
                i += 1
            if i >= n:
                return self._need(s, name, args_raw, -1, eof)
            if s[i] == "}":
                i += 1
                break
            if s[i] != ",":
                return Fail(i)
            i += 1
        if name is None or (self.strict and args_raw is None):
            return Fail(pos)
        return Ok(i, Call(name=name, arguments=_args_from_raw(args_raw)))

    def _need(self, s: str, name: str | None, args_raw: str | None, args_at: int, eof: bool) -> Result:
        if eof:
            return Fail(len(s))
        pr = combinators._probe
        if pr is not None:
            if name is not None:
                pr.events.append(("name", 0, 0, name))
            if args_raw is not None:
                pr.events.append(("args", 0, 0, _args_from_raw(args_raw)))
            elif args_at != -1:
                pr.events.append(("args", args_at, -1, json_args_partial(s, args_at, pr.events)))
        return NEED


def call_object(
    *arg_keys: str,
    strict: bool = False,
    check=None,
    name_keys: tuple[str, ...] = ("name",),
    encoded: bool = True,
) -> P:
    """``{"name": "...", "<arg_key>": {...}}`` -> Call (streamed: see `_CallObject`)."""
    return tag("call", _CallObject(tuple(arg_keys), strict, check, name_keys, encoded))


def json_args() -> P:
    """Arguments written as one JSON object (streamed as the model writes them)."""
    return tag("args", json_value("{"), json_args_partial)


def call(p: P, build) -> P:
    """A call item: ``build(value of p) -> Call``, reported to the engine."""
    return tag("call", fmap(p, build))


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
    return tag(
        "call",
        fmap(
            seq(
                tag("name", fmap(take_until("[ARGS]", "[CALL_ID]", "{", "["), _name_ok)),
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
            call(
                seq(
                    lit(_CALL_BEGIN),
                    take_until(_SEP),
                    lit(_SEP),
                    tag("name", fmap(take_until("\n"), _name_ok)),
                    lit("\n```json\n"),
                    ws(),
                    json_args(),
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
            call(
                seq(
                    lit(_CALL_BEGIN),
                    tag("name", fmap(take_until(_SEP), _name_ok)),
                    lit(_SEP),
                    ws(),
                    json_args(),
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
    # ``functions.api.search:0`` calls ``search``: the last dotted segment
    return _name_ok(base.rsplit(".", 1)[-1])


class KimiK2(ToolFormat):
    """``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
    <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>``.
    The header is the model's own call id and is passed through."""

    _call = call(
        seq(
            lit("<|tool_call_begin|>"),
            tag(
                "name",
                fmap(
                    take_until("<|tool_call_argument_begin|>"),
                    lambda h: (_kimi_name(h), h.strip()),
                ),
            ),
            lit("<|tool_call_argument_begin|>"),
            ws(),
            json_args(),
            ws(),
            lit("<|tool_call_end|>"),
        ),
        lambda v: Call(name=v[1][0], arguments=v[4], id=v[1][1]),
    )
    _section = Section(
        body=fmap(seq(ws(), many(_call, sep=ws(), minimum=1), ws()), lambda v: v[1]),
        ends=("<|tool_calls_section_end|>", "<|tool_call_section_end|>"),
    )
    sections = {
        "<|tool_calls_section_begin|>": _section,
        "<|tool_call_section_begin|>": _section,
    }

