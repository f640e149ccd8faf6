"""A user's --tool-parser-plugin (tests/server/test_tool_parser_plugin.py): a made-up call syntax
``<<call NAME>>{...}<</call>>`` registered under the name ``example_calls``."""

from vllm_pyfrontend.parsers.combinators import fmap, json_value, lit, seq, take_until, ws
from vllm_pyfrontend.parsers.tool import register_tool_parser
from vllm_pyfrontend.parsers.tool.base import Call, Section, ToolFormat


class ExampleCalls(ToolFormat):
    sections = {
        "<<call ": Section(
            body=fmap(
                seq(take_until(">>"), lit(">>"), ws(), json_value("{"), ws()),
                lambda v: [Call(name=v[0].strip(), arguments=v[3])],
            ),
            ends=("<</call>>",),
        )
    }


register_tool_parser("example_calls", lambda tools: ExampleCalls())
