"""Cases converted from vLLM's Rust frontend parser tests (vllm-project/vllm, ``rust/src/
tool-parser/src/<format>.rs`` and ``rust/src/reasoning-parser/src/<format>.rs``, their
``#[cfg(test)] mod tests``), named ``vllm_rs_<test>``. Only the tests that map a model output
to a result (text, calls, reasoning) convert: tests of errors the Rust API raises (an
incomplete call at ``finish``), of internal state or of chunk-by-chunk delta shapes do not
(the harness checks every case under every split anyway). The tools are the Rust tests'
``test_utils::test_tools()``.
"""

from __future__ import annotations

import json
from typing import Any

from tests.parsers.cases import ReasoningCase, ToolCase


def _fn(name: str, **props: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}


S, I, N, B, O, A = ({"type": t} for t in ("string", "integer", "number", "boolean", "object", "array"))
#: rust/src/tool-parser/src/test_utils.rs: test_tools()
RS_TOOLS = [
    _fn("get_weather", location=S, city=S, state=S, unit=S, date=S, days=I),
    _fn("add", x=I, y=I),
    _fn("convert", whole=N, flag=B, payload=O, items=A, empty=S),
    _fn("calculate_area", shape=S, dimensions=O, precision=I),
    _fn("update_record", data={"anyOf": [O, {"type": "null"}]}),
]

TOOL_CASES: list[ToolCase] = []
REASONING_CASES: list[ReasoningCase] = []
DIFFERENCES: dict[str, str] = {}


def tc(parser: str, test: str, text: str, content: str, calls: list[tuple[str, Any]] | None = None,
       tools: list[dict[str, Any]] | None = RS_TOOLS, differs: str | None = None) -> None:
    c = ToolCase(parser, f"vllm_rs_{test}", text, content, list(calls or []), tools)
    TOOL_CASES.append(c)
    if differs:
        DIFFERENCES[c.id] = differs


def rc(parser: str, test: str, text: str, reasoning: str, content: str, kwargs: dict[str, Any] | None = None,
       differs: str | None = None) -> None:
    c = ReasoningCase(parser, f"vllm_rs_{test}", text, reasoning, content, kwargs)
    REASONING_CASES.append(c)
    if differs:
        DIFFERENCES[c.id] = differs


_FRAMING = ("whitespace next to a call is framing and is dropped (the Rust parser keeps it); vLLM's Python "
            "parser keeps it")
_KEEP_AFTER = ("text after the calls is kept as content (the Rust parser drops it and so does vLLM's Python "
               "parser): a deliberate difference")
_AFTER = "text after and between calls is kept, as vLLM's Rust parser does; vLLM's Python parser drops it"


def _j(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)


# --------------------------------------------------------------------- hermes (json/hermes.rs)
def _hermes(name: str, args: str) -> str:
    return f'<tool_call>{{"name":"{name}","arguments":{args}}}</tool_call>'


tc("hermes", "hermes_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("hermes", "hermes_parse_complete_extracts_raw_json_arguments",
   "Let me check.\n" + _hermes("get_weather", '{ "location": "Tokyo", "days": "3" }'), "Let me check.",
   [("get_weather", {"location": "Tokyo", "days": "3"})])
tc("hermes", "hermes_accepts_newline_after_tool_call_start",
   '<tool_call>\n{"name":"get_weather","arguments":{}}</tool_call>', "", [("get_weather", {})])
tc("hermes", "hermes_streaming_emits_argument_deltas",
   'preface <tool_call>{"name":"get_weather","arguments":{"location":"Beijing"}}</tool_call> suffix',
   "preface suffix", [("get_weather", {"location": "Beijing"})], differs=_FRAMING)
tc("hermes", "hermes_streaming_handles_split_markers", "hello " + _hermes("get_weather", '{"location":"Tokyo"}'),
   "hello", [("get_weather", {"location": "Tokyo"})])
tc("hermes", "hermes_streaming_extracts_multiple_tool_calls",
   _hermes("get_weather", '{"location":"Shanghai"}') + _hermes("add", '{"x":1,"y":2}'), "",
   [("get_weather", {"location": "Shanghai"}), ("add", {"x": 1, "y": 2})])


# -------------------------------------------------------------- qwen3_coder (qwen_coder.rs)
def _qc(name: str, params: list[tuple[str, str]]) -> str:
    ps = "\n".join(f"<parameter={k}>{v}</parameter>" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{ps}\n</function>\n</tool_call>"


tc("qwen3_coder", "qwen_coder_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("qwen3_coder", "qwen_coder_parse_complete_extracts_single_tool_call",
   _qc("get_weather", [("location", "SF"), ("date", "2026-04-29")]), "",
   [("get_weather", {"location": "SF", "date": "2026-04-29"})])
tc("qwen3_coder", "qwen_coder_parse_complete_preserves_prefix_text",
   "Thinking... " + _qc("get_weather", [("location", "NYC")]), "Thinking...", [("get_weather", {"location": "NYC"})])
tc("qwen3_coder", "qwen_coder_parse_complete_converts_schema_types",
   _qc("convert", [("whole", "5.0"), ("flag", "true"), ("payload", '{"nested":true}'), ("items", "[1,2]"),
                   ("empty", "42")]), "",
   [("convert", {"whole": 5.0, "flag": True, "payload": {"nested": True}, "items": [1, 2], "empty": "42"})])
tc("qwen3_coder", "qwen_coder_parse_complete_extracts_empty_arguments", _qc("get_weather", []), "",
   [("get_weather", {})])
tc("qwen3_coder", "qwen_coder_parse_complete_handles_upstream_multiline_typed_params",
   "<tool_call>\n<function=calculate_area>\n<parameter=shape>\nrectangle\n</parameter>\n<parameter=dimensions>\n"
   '{"width": 10,\n "height": 20}\n</parameter>\n<parameter=precision>\n2\n</parameter>\n</function>\n</tool_call>', "",
   [("calculate_area", {"shape": "rectangle", "dimensions": {"width": 10, "height": 20}, "precision": 2})])
tc("qwen3_coder", "qwen_coder_parse_complete_handles_nested_json_parameter",
   _qc("convert", [("payload", '{"nested":{"value":[1,2,3],"child":{"enabled":true}}}')]), "",
   [("convert", {"payload": {"nested": {"value": [1, 2, 3], "child": {"enabled": True}}}})])
tc("qwen3_coder", "qwen_coder_parse_complete_preserves_xml_like_parameter_values",
   _qc("process", [("html_content", '<div class="test"><span>Hello</span></div>'),
                   ("xml_snippet", '<root><child attr="value"/></root>')]), "",
   [("process", {"html_content": '<div class="test"><span>Hello</span></div>',
                 "xml_snippet": '<root><child attr="value"/></root>'})])
tc("qwen3_coder", "qwen_coder_parse_complete_unescapes_literal_closing_tags_in_parameter_value",
   _qc("get_weather", [("location", "杭州 &lt;/parameter&gt;&lt;/function&gt;&lt;/tool_call&gt;"),
                       ("date", "2026-05-08")]), "",
   # the Rust parser undoes XML escapes; vLLM's Python parser and this one keep the text as written
   [("get_weather", {"location": "杭州 &lt;/parameter&gt;&lt;/function&gt;&lt;/tool_call&gt;", "date": "2026-05-08"})])
tc("qwen3_coder", "qwen_coder_parse_complete_does_not_double_encode_anyof_object",
   _qc("update_record", [("data", '{"key":"value","count":42}')]), "",
   [("update_record", {"data": {"key": "value", "count": 42}})])
tc("qwen3_coder", "qwen_coder_streaming_extracts_single_tool_call",
   "<tool_call>\n<function=get_weather>\n<parameter=location>SF</parameter>\n</function>\n</tool_call>", "",
   [("get_weather", {"location": "SF"})])
tc("qwen3_coder", "qwen_coder_streaming_without_tool_call_emits_text_incrementally", "Hello, world!", "Hello, world!")
tc("qwen3_coder", "qwen_coder_streaming_extracts_multiple_tool_calls_in_order",
   _qc("get_weather", [("location", "SF")]) + "\n" + _qc("get_weather", [("location", "NYC")]), "",
   [("get_weather", {"location": "SF"}), ("get_weather", {"location": "NYC"})])
tc("qwen3_coder", "qwen_coder_streaming_preserves_text_between_tool_calls",
   "I'll check two cities." + _qc("get_weather", [("city", "Dallas"), ("state", "TX")]) + "Between calls."
   + _qc("get_weather", [("city", "Orlando"), ("state", "FL")]) + "Done.",
   "I'll check two cities.Between calls.Done.",
   [("get_weather", {"city": "Dallas", "state": "TX"}), ("get_weather", {"city": "Orlando", "state": "FL"})],
   differs=_AFTER)
tc("qwen3_coder", "qwen_coder_parse_function_body_trims_one_wrapping_newline",
   "<tool_call>\n<function=get_weather>\n<parameter=location>\nHangzhou\n</parameter>\n</function>\n</tool_call>", "",
   [("get_weather", {"location": "Hangzhou"})])


# --------------------------------------------------------------- llama3_json (json/llama.rs)
def _ll(name: str, params: str) -> str:
    return f'{{"name":"{name}","parameters":{params}}}'


tc("llama3_json", "llama_json_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("llama3_json", "llama_json_passthrough_never_reenters_tool_parsing",
   "plain text first " + _ll("get_weather", '{"location":"Tokyo"}'),
   "plain text first " + _ll("get_weather", '{"location":"Tokyo"}'),
   differs="text before the JSON means the output is no call (as in vLLM's Rust parser); vLLM's Python "
   "parser finds the call later in the text")
# the Rust parser refuses these two as text; vLLM's Python parser and this one read the call
# (Llama 3.1 writes <|python_tag|> before its JSON; leading whitespace is framing)
tc("llama3_json", "llama_json_does_not_support_python_tag_prefix",
   "<|python_tag|>" + _ll("get_weather", '{"location":"Tokyo"}'), "", [("get_weather", {"location": "Tokyo"})])
tc("llama3_json", "llama_json_rejects_leading_whitespace_before_tool_call",
   "\n  " + _ll("get_weather", '{"location":"Tokyo"}'), "", [("get_weather", {"location": "Tokyo"})])
tc("llama3_json", "llama_json_extracts_raw_parameters_object", _ll("get_weather", '{ "location": "Tokyo", "days": 3 }'),
   "", [("get_weather", {"location": "Tokyo", "days": 3})])
tc("llama3_json", "llama_json_extracts_multiple_semicolon_separated_calls",
   _ll("get_weather", '{"location":"Shanghai"}') + " \n; " + _ll("add", '{"x":1,"y":2}'), "",
   [("get_weather", {"location": "Shanghai"}), ("add", {"x": 1, "y": 2})])
tc("llama3_json", "llama_json_streaming_emits_argument_deltas", _ll("get_weather", '{"location":"Beijing"}'), "",
   [("get_weather", {"location": "Beijing"})])
tc("llama3_json", "llama_json_streaming_handles_split_objects_and_separator",
   _ll("get_weather", '{"location":"Dallas","state":"TX"}') + ";" + _ll("add", '{"x":4,"y":5}'), "",
   [("get_weather", {"location": "Dallas", "state": "TX"}), ("add", {"x": 4, "y": 5})])
tc("llama3_json", "llama_json_handles_nested_multiline_and_escaped_string_parameters",
   _ll("convert", '{\n  "payload": {"items": [1, {"value": "literal { brace } and \\"quote\\""}]},\n  "flag": true\n}'), "",
   [("convert", {"payload": {"items": [1, {"value": 'literal { brace } and "quote"'}]}, "flag": True})])
tc("llama3_json", "llama_json_keeps_trailing_whitespace_after_tool_call",
   _ll("get_weather", '{"location":"Tokyo"}') + "\n\t ", "", [("get_weather", {"location": "Tokyo"})])


# ------------------------------------------------------------------ mistral (json/mistral.rs)
def _mi(*calls: str) -> str:
    return "[TOOL_CALLS] [" + ",".join(calls) + "]"


def _mc(name: str, args: str) -> str:
    return f'{{"name":"{name}","arguments":{args}}}'


tc("mistral", "mistral_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
_MI = ("the JSON array after `[TOOL_CALLS] ` is read as the calls (as vLLM's Rust parser does); vLLM's "
       "Python parser, with a tokenizer that is not Mistral's, takes the `[` for a function name")
tc("mistral", "mistral_parse_complete_extracts_raw_json_arguments",
   "Let me check.\n" + _mi(_mc("get_weather", '{ "location": "Tokyo", "days": "3" }')), "Let me check.",
   [("get_weather", {"location": "Tokyo", "days": "3"})], differs=_MI)
tc("mistral", "mistral_parse_complete_extracts_pretty_multiple_tool_calls",
   'I\'ll help.\n[TOOL_CALLS] [\n    {"name": "get_weather", "arguments": {"city": "Tokyo", "units": "celsius"}}\n    ,\n'
   '    {"name": "add", "arguments": {"x": 1, "y": 2}}\n]', "I'll help.",
   [("get_weather", {"city": "Tokyo", "units": "celsius"}), ("add", {"x": 1, "y": 2})], differs=_MI)
tc("mistral", "mistral_streaming_emits_argument_deltas",
   'preface [TOOL_CALLS] [{"name":"get_weather","arguments":{"location":"Beijing"}}] suffix', "preface suffix",
   [("get_weather", {"location": "Beijing"})], differs=_MI)
tc("mistral", "mistral_streaming_handles_split_markers", "hello " + _mi(_mc("get_weather", '{"location":"Tokyo"}')),
   "hello", [("get_weather", {"location": "Tokyo"})], differs=_MI)
tc("mistral", "mistral_keeps_array_bracket_literal_inside_json_string",
   _mi(_mc("echo", '{"text":"Array notation: arr[0] = value[1]"}')), "",
   [("echo", {"text": "Array notation: arr[0] = value[1]"})], differs=_MI)


# ------------------------------------------------------------------------- kimi_k2 (kimi_k2.rs)
_KS, _KE, _KC, _KA, _KCE = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                            "<|tool_call_argument_begin|>", "<|tool_call_end|>")


def _kc(name: str, index: int, args: str) -> str:
    return f"{_KC}functions.{name}:{index}{_KA}{args}{_KCE}"


def _ks(*calls: str) -> str:
    return _KS + "".join(calls) + _KE


tc("kimi_k2", "kimi_k2_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("kimi_k2", "kimi_k2_parse_complete_extracts_raw_json_arguments",
   "Checking. " + _ks(_kc("get_weather", 0, '{ "location": "NYC", "days": "3" }')) + " trailing text",
   "Checking. trailing text", [("get_weather", {"location": "NYC", "days": "3"})], differs=_KEEP_AFTER)
tc("kimi_k2", "kimi_k2_streaming_emits_argument_deltas", _ks(_kc("get_weather", 0, '{"location":"Paris"}')), "",
   [("get_weather", {"location": "Paris"})])
tc("kimi_k2", "kimi_k2_streaming_holds_back_split_markers", "hello " + _ks(_kc("get_weather", 0, '{"location":"NYC"}')),
   "hello", [("get_weather", {"location": "NYC"})])
tc("kimi_k2", "kimi_k2_keeps_end_marker_literal_inside_json_string",
   _ks(_kc("echo", 0, '{"text":"literal <|tool_call_end|> inside"}')), "",
   [("echo", {"text": "literal <|tool_call_end|> inside"})],
   differs="an end marker inside a JSON string is text (as in the Rust parser); vLLM's Python parser cuts the "
   "arguments there")
tc("kimi_k2", "kimi_k2_streaming_extracts_multiple_tool_calls",
   _ks(_kc("get_weather", 0, '{"location":"Shanghai"}'), _kc("add", 1, '{"x":1,"y":2}')), "",
   [("get_weather", {"location": "Shanghai"}), ("add", {"x": 1, "y": 2})])
tc("kimi_k2", "kimi_k2_accepts_non_functions_header_prefix", f"{_KS}{_KC}api.tools.search:42{_KA}{{}}{_KCE}{_KE}", "",
   [("search", {})], differs="the name is the last dotted segment (issue 15, as the Rust parser); vLLM's Python "
   "parser strips only 'functions.'")


# ---------------------------------------------------------- deepseek_v3 (deepseek_json/deepseek_v3.rs)
_DS, _DE, _DC, _DSEP, _DCE = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                              "<｜tool▁sep｜>", "<｜tool▁call▁end｜>")


def _d3(name: str, args: str) -> str:
    return f"{_DC}function{_DSEP}{name}\n```json\n{args}\n```{_DCE}"


def _d31(name: str, args: str) -> str:
    return f"{_DC}{name}{_DSEP}{args}{_DCE}"


def _ds(*calls: str) -> str:
    return _DS + "".join(calls) + _DE


tc("deepseek_v3", "deepseek_v3_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("deepseek_v3", "deepseek_v3_parse_complete_extracts_raw_json_arguments",
   "Let me check.\n" + _ds(_d3("get_weather", '{ "location": "Tokyo", "days": "3" }')) + " trailing text",
   "Let me check. trailing text", [("get_weather", {"location": "Tokyo", "days": "3"})], differs=_KEEP_AFTER)
tc("deepseek_v3", "deepseek_v3_streaming_emits_argument_deltas", _ds(_d3("get_weather", '{"location":"Beijing"}')), "",
   [("get_weather", {"location": "Beijing"})])
tc("deepseek_v3", "deepseek_v3_streaming_handles_split_markers", "hello " + _ds(_d3("get_weather", '{"location":"Tokyo"}')),
   "hello", [("get_weather", {"location": "Tokyo"})])
tc("deepseek_v3", "deepseek_v3_keeps_fenced_end_marker_literal_inside_json_string",
   _ds(_d3("echo", '{"text":"literal \\n```<｜tool▁call▁end｜> inside"}')), "",
   [("echo", {"text": "literal \n```<｜tool▁call▁end｜> inside"})])
tc("deepseek_v3", "deepseek_v3_streaming_extracts_multiple_tool_calls",
   _ds(_d3("get_weather", '{"location":"Shanghai"}'), _d3("add", '{"x":1,"y":2}')), "",
   [("get_weather", {"location": "Shanghai"}), ("add", {"x": 1, "y": 2})])


# ------------------------------------------------------- deepseek_v31 (deepseek_json/deepseek_v31.rs)
tc("deepseek_v31", "deepseek_v31_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("deepseek_v31", "deepseek_v31_parse_complete_extracts_raw_json_arguments",
   "Let me check." + _ds(_d31("get_weather", '{ "location": "Tokyo", "days": "3" }')) + " trailing text",
   "Let me check. trailing text", [("get_weather", {"location": "Tokyo", "days": "3"})], differs=_KEEP_AFTER)
tc("deepseek_v31", "deepseek_v31_streaming_emits_argument_deltas", _ds(_d31("get_weather", '{"location":"Beijing"}')),
   "", [("get_weather", {"location": "Beijing"})])
tc("deepseek_v31", "deepseek_v31_streaming_handles_split_markers",
   "hello " + _ds(_d31("get_weather", '{"location":"Tokyo"}')), "hello", [("get_weather", {"location": "Tokyo"})])
tc("deepseek_v31", "deepseek_v31_keeps_end_marker_literal_inside_json_string",
   _ds(_d31("echo", '{"text":"literal <｜tool▁call▁end｜> inside"}')), "",
   [("echo", {"text": "literal <｜tool▁call▁end｜> inside"})],
   differs="an end marker inside a JSON string is text (as in the Rust parser); vLLM's Python parser cuts the "
   "arguments there")
tc("deepseek_v31", "deepseek_v31_streaming_extracts_multiple_tool_calls",
   _ds(_d31("get_weather", '{"location":"Shanghai"}'), _d31("add", '{"x":1,"y":2}')), "",
   [("get_weather", {"location": "Shanghai"}), ("add", {"x": 1, "y": 2})])
tc("deepseek_v31", "deepseek_v31_streaming_drops_eos_after_complete_tool_calls",
   _ds(_d31("get_weather", '{"location":"Tokyo"}')) + "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
   [("get_weather", {"location": "Tokyo"})],
   differs="the end-of-sentence text after the calls is content here (the engine stops on the EOS token, "
   "so it reaches a parser only as text written out); the Rust and Python parsers drop text after the calls")


# ------------------------------------------------------------------- minimax_m2 (minimax_m2.rs)
def _mm(*invokes: tuple[str, list[tuple[str, str]]]) -> str:
    body = "".join(f'<invoke name="{n}">' + "".join(f'<parameter name="{k}">{v}</parameter>' for k, v in ps)
                   + "</invoke>" for n, ps in invokes)
    return f"<minimax:tool_call>{body}</minimax:tool_call>"


tc("minimax_m2", "minimax_m2_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("minimax_m2", "minimax_m2_parse_complete_extracts_single_tool_call",
   _mm(("get_weather", [("city", "Seattle"), ("days", "5")])), "", [("get_weather", {"city": "Seattle", "days": 5})])
tc("minimax_m2", "minimax_m2_parse_complete_preserves_prefix_and_ignores_trailing_text",
   "Let me check. " + _mm(("get_weather", [("city", "Seattle")])) + " This trailing text is ignored.",
   "Let me check. This trailing text is ignored.", [("get_weather", {"city": "Seattle"})], differs=_KEEP_AFTER)
tc("minimax_m2", "minimax_m2_parse_complete_extracts_multiple_invokes",
   _mm(("get_weather", [("city", "Seattle")]), ("get_weather", [("city", "NYC")])), "",
   [("get_weather", {"city": "Seattle"}), ("get_weather", {"city": "NYC"})])
tc("minimax_m2", "minimax_m2_parse_complete_converts_schema_types",
   _mm(("convert", [("whole", "5.0"), ("flag", "true"), ("payload", '{"nested":true}'), ("items", "[1,2]"),
                    ("empty", "42")])), "",
   [("convert", {"whole": 5.0, "flag": True, "payload": {"nested": True}, "items": [1, 2], "empty": "42"})])
tc("minimax_m2", "minimax_m2_parse_complete_preserves_raw_entities_in_parameter_value",
   _mm(("get_weather", [("city", "Tom &amp; Jerry &lt;3")])), "", [("get_weather", {"city": "Tom &amp; Jerry &lt;3"})])
tc("minimax_m2", "minimax_m2_parse_complete_preserves_raw_closing_tag_text_in_parameter_value",
   _mm(("get_weather", [("city", "Seattle &lt;/parameter&gt;&lt;/invoke&gt;&lt;/minimax:tool_call&gt;"), ("days", "5")])),
   "", [("get_weather", {"city": "Seattle &lt;/parameter&gt;&lt;/invoke&gt;&lt;/minimax:tool_call&gt;", "days": 5})])
tc("minimax_m2", "minimax_m2_parse_complete_handles_multiline_parameters",
   '<minimax:tool_call><invoke name="calculate_area"><parameter name="shape">\nrectangle\n</parameter>'
   '<parameter name="dimensions">{"width":10,\n"height":20}</parameter><parameter name="precision">2</parameter>'
   "</invoke></minimax:tool_call>", "",
   [("calculate_area", {"shape": "\nrectangle\n", "dimensions": {"width": 10, "height": 20}, "precision": 2})])
tc("minimax_m2", "minimax_m2_streaming_extracts_single_tool_call",
   '<minimax:tool_call><invoke name="get_weather"><parameter name="city">Seattle</parameter></invoke></minimax:tool_call>',
   "", [("get_weather", {"city": "Seattle"})])
tc("minimax_m2", "minimax_m2_streaming_preserves_prefix_text",
   'Let me check. <minimax:tool_call><invoke name="get_weather"><parameter name="city">Seattle</parameter></invoke>'
   "</minimax:tool_call>", "Let me check.", [("get_weather", {"city": "Seattle"})])
tc("minimax_m2", "minimax_m2_streaming_without_tool_call_emits_text_incrementally", "Hello, world!", "Hello, world!")
tc("minimax_m2", "minimax_m2_streaming_handles_template_whitespace_and_split_parameters",
   'I will call the tools.\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Seattle</parameter>\n'
   '</invoke>\n<invoke name="get_weather">\n<parameter name="city">NYC</parameter>\n</invoke>\n</minimax:tool_call>',
   "I will call the tools.", [("get_weather", {"city": "Seattle"}), ("get_weather", {"city": "NYC"})])
tc("minimax_m2", "minimax_m2_streaming_ignores_text_after_tool_block",
   _mm(("get_weather", [("city", "Seattle")])) + " ignored", " ignored", [("get_weather", {"city": "Seattle"})],
   differs=_KEEP_AFTER)


# ---------------------------------------------------------------------- glm45 (glm_xml/mod.rs)
def _g45(name: str, params: list[tuple[str, str]]) -> str:
    ps = "\n".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>" for k, v in params)
    return f"<tool_call>{name}\n{ps}\n</tool_call>"


tc("glm45", "glm45_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("glm45", "glm45_parse_complete_extracts_single_tool_call",
   "Let me search for that.\n" + _g45("get_weather", [("city", "Beijing"), ("date", "2024-12-25")]),
   "Let me search for that.", [("get_weather", {"city": "Beijing", "date": "2024-12-25"})])
tc("glm45", "glm45_streaming_extracts_multiple_tool_calls",
   _g45("get_weather", [("city", "Shanghai")]) + "\n" + _g45("add", [("x", "1"), ("y", "2")]), "",
   [("get_weather", {"city": "Shanghai"}), ("add", {"x": 1, "y": 2})])
tc("glm45", "glm45_parse_complete_preserves_raw_closing_tag_text_in_arg_value",
   _g45("get_weather", [("city", "Paris &lt;/arg_value&gt;&lt;/tool_call&gt;"), ("date", "2026-05-08")]), "",
   [("get_weather", {"city": "Paris &lt;/arg_value&gt;&lt;/tool_call&gt;", "date": "2026-05-08"})])
tc("glm45", "glm45_streaming_without_tool_call_emits_text_incrementally", "hello world", "hello world")
tc("glm45", "glm45_streaming_preserves_prefix_text", "Prefix " + _g45("get_weather", [("city", "Hangzhou")]), "Prefix",
   [("get_weather", {"city": "Hangzhou"})])
tc("glm45", "glm45_streaming_handles_start_token_split_across_chunks",
   "hello <tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>", "hello",
   [("get_weather", {"city": "Paris"})])
tc("glm45", "glm45_streaming_ignores_trailing_text_after_tool_calls",
   _g45("get_weather", [("city", "Paris")]) + "<|endoftext|>", "<|endoftext|>", [("get_weather", {"city": "Paris"})],
   differs="the end-of-text marker after the calls is content here (the engine stops on the EOS token, so it "
   "reaches a parser only as text written out); the Rust and Python parsers drop text after the calls")


# ------------------------------------------- deepseek_v32 / deepseek_v4 (deepseek_dsml/*.rs)
_P = "｜DSML｜"


def _dsml(wrapper: str, name: str, params: list[tuple[str, str]], string: str = "true") -> str:
    ps = "\n".join(f'<{_P}parameter name="{k}" string="{string}">{v}</{_P}parameter>' for k, v in params)
    return f'<{_P}{wrapper}>\n<{_P}invoke name="{name}">\n{ps}\n</{_P}invoke>\n</{_P}{wrapper}>'


def _v32(name: str, params: list[tuple[str, str]], string: str = "true") -> str:
    return _dsml("function_calls", name, params, string)


_DSML_ATTR = ("a DSML parameter's string attribute decides its type (string=\"true\": the text as written, else "
              "JSON), as in the Rust parser; vLLM's Python parser types the value by the tool's schema")
_CONVERT = [("whole", "5.0"), ("flag", "true"), ("payload", '{"nested":true}'), ("items", "[1,2]"), ("empty", "null")]
tc("deepseek_v32", "deepseek_v32_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("deepseek_v32", "deepseek_v32_parse_complete_extracts_single_tool_call",
   _v32("get_weather", [("location", "SF"), ("date", "2024-01-16")]), "",
   [("get_weather", {"location": "SF", "date": "2024-01-16"})])
tc("deepseek_v32", "deepseek_v32_parse_complete_preserves_prefix_text",
   "Thinking... " + _v32("get_weather", [("location", "NYC")]), "Thinking...", [("get_weather", {"location": "NYC"})])
tc("deepseek_v32", "deepseek_v32_parse_complete_converts_schema_types", _v32("convert", _CONVERT, "false"), "",
   [("convert", {"whole": 5.0, "flag": True, "payload": {"nested": True}, "items": [1, 2], "empty": None})],
   differs=_DSML_ATTR)
tc("deepseek_v32", "deepseek_v32_parse_complete_string_attr_overrides_schema_types", _v32("convert", _CONVERT), "",
   [("convert", {"whole": "5.0", "flag": "true", "payload": '{"nested":true}', "items": "[1,2]", "empty": "null"})],
   differs=_DSML_ATTR)
tc("deepseek_v32", "deepseek_v32_parse_complete_unescapes_literal_closing_tags_in_parameter_value",
   _v32("get_weather", [("location", f"Hangzhou &lt;/{_P}parameter&gt;&lt;/{_P}invoke&gt;&lt;/{_P}function_calls&gt;"),
                        ("date", "2026-05-08")]), "",
   # the Rust parser undoes XML escapes; vLLM's Python parser and this one keep the text as written
   [("get_weather", {"location": f"Hangzhou &lt;/{_P}parameter&gt;&lt;/{_P}invoke&gt;&lt;/{_P}function_calls&gt;",
                     "date": "2026-05-08"})])
tc("deepseek_v32", "deepseek_v32_streaming_extracts_single_tool_call", _v32("get_weather", [("location", "SF")]), "",
   [("get_weather", {"location": "SF"})])
tc("deepseek_v32", "deepseek_v32_streaming_without_tool_call_emits_text_incrementally", "Hello, world!", "Hello, world!")
tc("deepseek_v32", "deepseek_v32_streaming_extracts_multiple_tool_calls_in_order",
   _v32("get_weather", [("location", "SF")])[: -len(f"</{_P}function_calls>")] + "\n"
   + f'<{_P}invoke name="get_weather">\n<{_P}parameter name="location" string="true">NYC</{_P}parameter>\n'
   f"</{_P}invoke>\n</{_P}function_calls>", "",
   [("get_weather", {"location": "SF"}), ("get_weather", {"location": "NYC"})])
tc("deepseek_v32", "deepseek_v32_streaming_drops_eos_after_complete_tool_calls",
   _v32("get_weather", [("location", "SF")]) + "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
   [("get_weather", {"location": "SF"})],
   differs="the end-of-sentence text after the calls is content here (the engine stops on the EOS token, so it "
   "reaches a parser only as text written out); the Rust and Python parsers drop text after the calls")
tc("deepseek_v32", "deepseek_v32_streaming_ignores_text_after_complete_tool_calls",
   _v32("get_weather", [("location", "SF")]) + "trailing text", "trailing text", [("get_weather", {"location": "SF"})],
   differs=_KEEP_AFTER)
tc("deepseek_v32", "deepseek_v32_streaming_matches_parse_complete", _v32("add", [("x", "3"), ("y", "4")]), "",
   [("add", {"x": "3", "y": "4"})], differs=_DSML_ATTR)
tc("deepseek_v4", "deepseek_v4_parse_complete_reuses_dsml_parser_with_tool_calls_token",
   _dsml("tool_calls", "get_weather", [("location", "SF"), ("date", "2024-01-16")]), "",
   [("get_weather", {"location": "SF", "date": "2024-01-16"})])
tc("deepseek_v4", "deepseek_v4_streaming_handles_tool_calls_token_split_across_chunks",
   f'Thinking... <{_P}tool_calls>\n<{_P}invoke name="get_weather">\n<{_P}parameter name="location" string="true">Beijing'
   f"</{_P}parameter>\n</{_P}invoke>\n</{_P}tool_calls>", "Thinking...", [("get_weather", {"location": "Beijing"})])
