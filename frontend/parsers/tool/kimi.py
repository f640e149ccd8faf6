"""Kimi's tool-call formats: kimi_k2 (a JSON object after the model's own call
id) and kimi_k3 (XTML channels, whose response markers are not content).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from vllm_pyfrontend.parsers.combinators import fmap, lit, seq, tag, take_until, ws, ws_list
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat
from vllm_pyfrontend.parsers.tool.channels import MarkerDropFormat
from vllm_pyfrontend.parsers.tool.json_grammar import call, json_args, name_ok
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.xml_calls import XmlParam, call_element, xml_args, xml_call


# ------------------------------------------------------------------- kimi k2
def _kimi_name(call_id: str) -> str:
    head = call_id.strip()
    base = head.rsplit(":", 1)[0] if ":" in head else head
    # ``functions.api.search:0`` calls ``search``: the last dotted segment
    return name_ok(base.rsplit(".", 1)[-1])


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
        body=ws_list(_call),
        ends=("<|tool_calls_section_end|>", "<|tool_call_section_end|>"),
    )
    sections = {
        "<|tool_calls_section_begin|>": _section,
        "<|tool_call_section_begin|>": _section,
    }


# ------------------------------------------------------------------- kimi k3
O, C, S = "<|open|>", "<|close|>", "<|sep|>"


def _attrs(text: str) -> dict[str, str]:
    """``tool="x" index="1"`` -> dict (``&quot;`` and ``&amp;`` decoded)."""
    out: dict[str, str] = {}
    rest = text
    while True:
        rest = rest.lstrip()
        eq = rest.find('="')
        if eq <= 0:
            break
        key = rest[:eq]
        end = rest.find('"', eq + 2)
        if end == -1 or not key.replace("_", "").isalnum():
            raise ValueError("bad attribute")
        out[key] = rest[eq + 2 : end].replace("&quot;", '"').replace("&amp;", "&")
        rest = rest[end + 1 :]
    if rest.strip():
        raise ValueError("bad attribute")
    return out


class _K3Typing:
    """``type="string"`` values are the raw text; other types JSON (raw text when not)."""

    def is_string(self, name: str, key: str, meta: Any) -> bool:
        return meta == "string"

    def streams(self, name: str, key: str, meta: Any, raw: str) -> bool:
        return meta == "string"

    def convert(self, name: str, key: str, meta: Any, text: str) -> Any:
        if meta == "string":
            return text
        try:
            return json.loads(text)
        except ValueError:
            return text


class KimiK3(MarkerDropFormat):
    """Kimi K3 (XTML)::

        <|open|>response<|sep|>Let me check.<|close|>response<|sep|>
        <|open|>tools<|sep|>
        <|open|>call tool="get_weather" index="1"<|sep|>
        <|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
        <|close|>call<|sep|>
        <|close|>tools<|sep|>

    ``type="string"`` values are the raw text; other types are JSON (raw text
    when not). The response channel's markers are not content.
    """

    drop = (f"{O}response{S}", f"{C}response{S}", f"{C}message{S}")

    def __init__(self, tools: Sequence[Any] = ()) -> None:
        # streamed as the arguments arrive (`xml_args`): string-typed values as text
        def head(v: list[Any]) -> tuple[str, str]:
            attrs = _attrs(v[2])
            return attrs.get("key", ""), attrs.get("type", "string")

        param = XmlParam(
            fmap(seq(lit(f"{O}argument"), ws(1), take_until(S), lit(S)), head),
            f"{C}argument{S}",
        )

        def tool_name(v: list[Any]) -> str:
            name = _attrs(v).get("tool", "")
            if not name:
                raise ValueError("no tool name")
            return name

        typing = _K3Typing()
        call = call_element(
            (lit(f"{O}call"), ws(1)),
            tag("name", fmap(take_until(S), tool_name)),
            (lit(S),),
            xml_args(param, typing),
            f"{C}call{S}",
            xml_call(typing),
        )
        self.sections = {f"{O}tools{S}": Section(body=ws_list(call), ends=(f"{C}tools{S}",))}


register_tool_parser("kimi_k2", lambda tools: KimiK2(), note="Kimi K2")
register_tool_parser("kimi_k3", lambda tools: KimiK3(tools))
