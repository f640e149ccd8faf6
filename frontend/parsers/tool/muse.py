"""MuseGlimmer's tool-call format (ATEM ``<atem:function_calls>`` blocks):
muse_glimmer.
"""

from __future__ import annotations

from vllm_pyfrontend.parsers.combinators import take_until, ws_list
from vllm_pyfrontend.parsers.tool.base import Section
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.xml_calls import JsonOrTextTyping, XmlFormat, XmlParam, named_invoke, named_param


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
        param = XmlParam(named_param("atem:parameter", take_until(">")), "</atem:parameter>")
        body = ws_list(named_invoke("atem:invoke", param, typing, take_until(">")))
        return {"<atem:function_calls>": Section(body=body, ends=("</atem:function_calls>",))}


register_tool_parser("muse_glimmer", lambda tools: MuseGlimmer(tools))
