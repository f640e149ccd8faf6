"""GLM's tool-call format (``<arg_key>`` / ``<arg_value>`` pairs): glm45, glm47,
and the models that reuse it: ling3 (GLM-4.7's format), poolside_v1 (GLM-4's).
"""

from __future__ import annotations

from vllm_pyfrontend.parsers.combinators import fmap, lit, seq, tag, take_until, ws
from vllm_pyfrontend.parsers.tool.base import Section
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.xml_calls import XmlFormat, XmlParam, call_name, xml_args, xml_call, xml_name


# --------------------------------------------------------------------- glm45
class Glm45(XmlFormat):
    """GLM-4.5 / 4.6 / 4.7::

        <tool_call>get_weather
        <arg_key>city</arg_key>
        <arg_value>Paris</arg_value>
        </tool_call>
    """

    def build(self) -> dict[str, Section]:
        param = XmlParam(
            fmap(
                seq(lit("<arg_key>"), take_until("</arg_key>"), lit("</arg_key>"), ws(), lit("<arg_value>")),
                lambda v: xml_name(v[1]),
            ),
            "</arg_value>",
        )
        make = xml_call(self.typing)
        body = fmap(
            seq(
                ws(),
                tag(
                    "call",
                    fmap(
                        seq(
                            call_name(take_until("<arg_key>", at_eof=True, minimum=1)),
                            xml_args(param, self.typing),
                        ),
                        lambda v: make(v[0], v[1]),
                    ),
                ),
                ws(),
            ),
            lambda v: [v[1]],
        )
        return {"<tool_call>": Section(body=body, ends=("</tool_call>",), eof_closes=False)}


register_tool_parser("glm45", lambda tools: Glm45(tools))
register_tool_parser("glm47", lambda tools: Glm45(tools))
register_tool_parser("ling3", lambda tools: Glm45(tools), note="GLM-4.7's format")
register_tool_parser("poolside_v1", lambda tools: Glm45(tools), note="GLM-4's format")
