"""StepFun Step-3's tool-call format (``steptml``): step3. (Step-3.5 writes
Qwen3-Coder's format: ``step3p5`` is registered in xml_calls.py.)
"""

from __future__ import annotations

from typing import Any

from vllm_pyfrontend.parsers.combinators import fmap, lit, many, opt, seq, tag, take_until, ws
from vllm_pyfrontend.parsers.tool.arg_values import coerce_value, is_string_param
from vllm_pyfrontend.parsers.tool.base import Section
from vllm_pyfrontend.parsers.tool.registry import register_tool_parser
from vllm_pyfrontend.parsers.tool.xml_calls import (
    SchemaTyping,
    XmlFormat,
    XmlParam,
    call_name,
    xml_args,
    xml_call,
    xml_name,
)


# ---------------------------------------------------------------------- step3
_S3_CALLS_BEGIN = "<｜tool_calls_begin｜>"
_S3_CALLS_END = "<｜tool_calls_end｜>"
_S3_CALL_BEGIN = "<｜tool_call_begin｜>"
_S3_CALL_END = "<｜tool_call_end｜>"
_S3_SEP = "<｜tool_sep｜>"


class Step3(XmlFormat):
    """StepFun Step-3::

        <｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>get_weather
        <steptml:invoke name="get_weather">
        <steptml:parameter name="city">Paris</steptml:parameter>
        </steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>

    The ``function<｜tool_sep｜>NAME`` header is optional; calls may be separated by
    ``<｜tool_sep｜>``. String values are kept as written (whitespace is data for edit
    tools); other values are stripped and typed by the schema.
    """

    def build(self) -> dict[str, Section]:
        typing = _Step3Typing(self.tools)
        param = XmlParam(
            fmap(seq(lit('<steptml:parameter name="'), take_until('"'), lit('">')), lambda v: xml_name(v[1])),
            "</steptml:parameter>",
        )
        make = xml_call(typing)
        header = seq(lit("function"), ws(), lit(_S3_SEP), take_until("<steptml:invoke"))
        call = tag(
            "call",
            fmap(
                seq(
                    lit(_S3_CALL_BEGIN),
                    ws(),
                    opt(header),
                    lit('<steptml:invoke name="'),
                    call_name(take_until('"')),
                    lit('">'),
                    ws(),
                    xml_args(param, typing),
                    ws(),
                    lit("</steptml:invoke>"),
                    ws(),
                    lit(_S3_CALL_END),
                ),
                lambda v: make(v[4], v[7]),
            ),
        )
        sep = seq(ws(), opt(lit(_S3_SEP)), ws())
        body = fmap(seq(ws(), many(call, sep=sep, minimum=1), ws()), lambda v: v[1])
        return {_S3_CALLS_BEGIN: Section(body=body, ends=(_S3_CALLS_END,))}


class _Step3Typing(SchemaTyping):
    """String values are kept as written (whitespace is data for edit tools);
    other values are stripped, then typed by the schema."""

    def _verbatim(self, schema: Any) -> bool:
        return not isinstance(schema, dict) or schema.get("type") in (None, "string")

    def is_string(self, name: str, key: str, meta: Any) -> bool:
        schema = self.props(name).get(key)
        return self._verbatim(schema) and is_string_param(schema)

    def convert(self, name: str, key: str, meta: Any, text: str) -> Any:
        schema = self.props(name).get(key)
        return coerce_value(text if self._verbatim(schema) else text.strip(), schema)


register_tool_parser("step3", lambda tools: Step3(tools))
