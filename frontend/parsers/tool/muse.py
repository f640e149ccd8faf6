"""MuseGlimmer's tool-call format (ATEM ``<atem:function_calls>`` blocks):
muse_glimmer.
"""

from __future__ import annotations

from vllm_pyfrontend.parsers.combinators import fmap, lit, seq, tag, take_until, ws, ws_list
from vllm_pyfrontend.parsers.tool.base import Section
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.xml_calls import (
    JsonOrTextTyping,
    XmlFormat,
    XmlParam,
    attr_value,
    call_name,
    xml_args,
    xml_call,
    xml_name,
)


class MuseGlimmer(XmlFormat):
    """MuseGlimmer (ATEM)::

        <atem:function_calls>
        <atem:invoke name="get_weather">
        <atem:parameter name="city">Paris</atem:parameter>
        </atem:invoke>
        </atem:function_calls>

    Values are JSON where they parse, else text. Only the ATEM block; the
    channel framing (``<|start|>assistant to=…<|message|>``) is not parsed here.
    """

    def build(self) -> dict[str, Section]:
        typing = JsonOrTextTyping()
        param = XmlParam(
            fmap(
                seq(lit("<atem:parameter"), ws(1), lit("name="), attr_value(), take_until(">"), lit(">")),
                lambda v: xml_name(v[3]),
            ),
            "</atem:parameter>",
        )
        make = xml_call(typing)
        invoke = tag(
            "call",
            fmap(
                seq(
                    lit("<atem:invoke"),
                    ws(1),
                    lit("name="),
                    call_name(attr_value()),
                    take_until(">"),
                    lit(">"),
                    ws(),
                    xml_args(param, typing),
                    ws(),
                    lit("</atem:invoke>"),
                ),
                lambda v: make(v[3], v[7]),
            ),
        )
        body = ws_list(invoke)
        return {"<atem:function_calls>": Section(body=body, ends=("</atem:function_calls>",))}


register_tool_parser("muse_glimmer", lambda tools: MuseGlimmer(tools))
