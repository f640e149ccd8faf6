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
_KEEP_AFTER_RS = "text after the calls is kept (as in the Rust parser); vLLM's Python parser drops it"
_KEEP_AROUND = "text around the calls is kept (as in the Rust parser); vLLM's Python parser drops it"
_PHI_RE = ("arguments holding arrays are read whole (as in the Rust parser); vLLM's Python parser's regex stops "
           "at the first ']' and finds no call")
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
   [("search", {})], differs="the name is the last dotted segment (as the Rust parser); vLLM's Python "
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


# ---------------------------------------------------------------------------- hy_v3 (hy_v3.rs)
def _hy(name: str, params: list[tuple[str, str]]) -> str:
    ps = "\n".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in params)
    return f"<tool_call>{name}<tool_sep>{ps}</tool_call>"


def _hys(*calls: str) -> str:
    return "<tool_calls>\n" + "\n".join(calls) + "\n</tool_calls>"


_HY_TOOLS = RS_TOOLS + [_fn("get_current_date")]
_BJ = [("city", "Beijing"), ("date", "2026-03-30")]
tc("hy_v3", "hy_v3_parse_complete_without_tool_call_keeps_text", "This is a plain response.", "This is a plain response.",
   tools=_HY_TOOLS)
tc("hy_v3", "hy_v3_parse_complete_extracts_zero_arg_inline_tool_call",
   "<tool_calls><tool_call>get_current_date<tool_sep></tool_call></tool_calls>", "", [("get_current_date", {})],
   tools=_HY_TOOLS)
tc("hy_v3", "hy_v3_parse_complete_extracts_zero_arg_newline_tool_call",
   "<tool_calls>\n<tool_call>get_current_date<tool_sep>\n</tool_call>\n</tool_calls>", "", [("get_current_date", {})],
   tools=_HY_TOOLS)
tc("hy_v3", "hy_v3_parse_complete_extracts_arguments_on_same_line",
   "<tool_calls><tool_call>get_weather<tool_sep><arg_key>city</arg_key><arg_value>Beijing</arg_value><arg_key>date"
   "</arg_key><arg_value>2026-03-30</arg_value></tool_call></tool_calls>", "", [("get_weather", dict(_BJ))],
   tools=_HY_TOOLS)
tc("hy_v3", "hy_v3_parse_complete_extracts_arguments_with_newlines", _hys(_hy("get_weather", _BJ)), "",
   [("get_weather", dict(_BJ))], tools=_HY_TOOLS)
tc("hy_v3", "hy_v3_parse_complete_preserves_prefix_and_ignores_trailing_text",
   "Checking." + _hys(_hy("get_current_date", [])) + " trailing text", "Checking. trailing text",
   [("get_current_date", {})], tools=_HY_TOOLS, differs=_KEEP_AFTER)
tc("hy_v3", "hy_v3_parse_complete_extracts_multiple_tool_calls_in_one_block",
   _hys(_hy("get_weather", _BJ), _hy("get_weather", [("city", "Hangzhou"), ("date", "2026-03-30")])), "",
   [("get_weather", dict(_BJ)), ("get_weather", {"city": "Hangzhou", "date": "2026-03-30"})], tools=_HY_TOOLS)
tc("hy_v3", "hy_v3_parse_complete_converts_schema_types",
   _hys(_hy("convert", [("whole", "5.3"), ("flag", "true"), ("payload", '{"k":1}'), ("items", "[1,2]")])), "",
   [("convert", {"whole": 5.3, "flag": True, "payload": {"k": 1}, "items": [1, 2]})], tools=_HY_TOOLS)
tc("hy_v3", "hy_v3_streaming_without_tool_call_emits_text_incrementally", "This is a plain response.",
   "This is a plain response.", tools=_HY_TOOLS)
tc("hy_v3", "hy_v3_streaming_extracts_zero_arg_tool_call",
   "<tool_calls>\n<tool_call>get_current_date<tool_sep>\n</tool_call>\n</tool_calls>", "", [("get_current_date", {})],
   tools=_HY_TOOLS)
tc("hy_v3", "hy_v3_streaming_extracts_arguments",
   "<tool_calls>\n<tool_call>get_weather<tool_sep>\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
   "<arg_key>date</arg_key>\n<arg_value>2026-03-30</arg_value>\n</tool_call>\n</tool_calls>", "",
   [("get_weather", dict(_BJ))], tools=_HY_TOOLS)
tc("hy_v3", "hy_v3_streaming_preserves_prefix_text",
   "Checking.<tool_calls>\n<tool_call>get_current_date<tool_sep>\n</tool_call>\n</tool_calls>", "Checking.",
   [("get_current_date", {})], tools=_HY_TOOLS)
tc("hy_v3", "hy_v3_streaming_handles_start_marker_split_across_chunks",
   "hello " + _hys(_hy("get_weather", [("city", "Beijing")])), "hello", [("get_weather", {"city": "Beijing"})],
   tools=_HY_TOOLS)


# ------------------------------------------- qwen3_xml: vllm-rs's JSON body (json/qwen.rs)
_QX = ("qwen3_xml also reads vllm-rs's JSON body in <tool_call> (either launcher's flags work); vLLM's "
       "Python qwen3_xml reads only the <function=...> XML body")


def _qx(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


tc("qwen3_xml", "qwen_xml_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("qwen3_xml", "qwen_xml_parse_complete_extracts_raw_json_arguments",
   "Let me check.\n" + _qx("get_weather", '{ "location": "Tokyo", "days": "3" }'), "Let me check.",
   [("get_weather", {"location": "Tokyo", "days": "3"})], differs=_QX)
tc("qwen3_xml", "qwen_xml_streaming_emits_argument_deltas", _qx("get_weather", '{"location":"Beijing"}'), "",
   [("get_weather", {"location": "Beijing"})], differs=_QX)
tc("qwen3_xml", "qwen_xml_streaming_handles_split_markers", "hello " + _qx("get_weather", '{"location":"Tokyo"}'),
   "hello", [("get_weather", {"location": "Tokyo"})], differs=_QX)
tc("qwen3_xml", "qwen_xml_keeps_end_marker_literal_inside_json_string",
   _qx("echo", '{"text":"literal </tool_call> inside"}'), "", [("echo", {"text": "literal </tool_call> inside"})],
   differs=_QX)
tc("qwen3_xml", "qwen_xml_decodes_escaped_function_name", '<tool_call>\n{"name":"say_\\"hi","arguments":{}}\n</tool_call>',
   "", [('say_"hi', {})], differs=_QX)
tc("qwen3_xml", "qwen_xml_streaming_extracts_multiple_tool_calls",
   _qx("get_weather", '{"location":"Shanghai"}') + _qx("add", '{"x":1,"y":2}'), "",
   [("get_weather", {"location": "Shanghai"}), ("add", {"x": 1, "y": 2})], differs=_QX)


# ------------------------------------------------------------------- granite (json/granite.rs)
tc("granite", "granite_parse_complete_without_tool_call_keeps_text",
   "This is a regular response without any tool calls.", "This is a regular response without any tool calls.")
tc("granite", "granite_parse_complete_extracts_token_marker_call",
   '<|tool_call|>[{"name": "get_weather", "arguments": {"location": "Tokyo"}}]', "",
   [("get_weather", {"location": "Tokyo"})])
tc("granite", "granite_parse_complete_accepts_string_marker",
   '<tool_call>[{"name":"get_weather","arguments":{"location":"Tokyo"}}]', "", [("get_weather", {"location": "Tokyo"})])
tc("granite", "granite_accepts_leading_whitespace_and_space_after_marker",
   '\n  <|tool_call|> [{"name":"get_weather","arguments":{}}]', "", [("get_weather", {})])
tc("granite", "granite_handles_unicode_whitespace_after_marker",
   '<|tool_call|>\x0c[{"name":"get_weather","arguments":{}}]', "", [("get_weather", {})],
   differs="a form feed after the marker is whitespace (as in the Rust parser); vLLM's Python parser keeps "
   "the output as text")
tc("granite", "granite_parses_array_without_marker", '[{"name":"get_weather","arguments":{"location":"Tokyo"}}]',
   # the Rust parser reads a bare array as calls; vLLM's Python parser and this one keep it as text
   '[{"name":"get_weather","arguments":{"location":"Tokyo"}}]')
tc("granite", "granite_handles_indented_json_arguments",
   '<|tool_call|>[\n    {\n        "name": "get_weather",\n        "arguments": {\n            "location": "Tokyo"\n'
   "        }\n    }\n]", "", [("get_weather", {"location": "Tokyo"})])
tc("granite", "granite_extracts_multiple_calls",
   '<|tool_call|>[{"name":"get_weather","arguments":{"location":"Shanghai"}},{"name":"add","arguments":{"x":1,"y":2}}]',
   "", [("get_weather", {"location": "Shanghai"}), ("add", {"x": 1, "y": 2})])


# ---------------------------------------------------------------- internlm (json/internlm2.rs)
def _il(name: str, key: str, args: str) -> str:
    return f'<|action_start|><|plugin|>{{"name":"{name}","{key}":{args}}}<|action_end|>'


tc("internlm", "internlm2_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("internlm", "internlm2_parse_complete_extracts_parameters_key",
   "Let me check.\n" + _il("get_weather", "parameters", '{"location":"Tokyo","days":"3"}'), "Let me check.",
   [("get_weather", {"location": "Tokyo", "days": "3"})])
tc("internlm", "internlm2_parse_complete_extracts_arguments_key_fallback",
   _il("get_weather", "arguments", '{"location":"Tokyo"}'), "", [("get_weather", {"location": "Tokyo"})])
tc("internlm", "internlm2_accepts_whitespace_after_plugin_marker",
   '<|action_start|><|plugin|>\n{"name":"get_weather","parameters":{}}<|action_end|>', "", [("get_weather", {})])
tc("internlm", "internlm2_streaming_emits_argument_deltas",
   'preface <|action_start|><|plugin|>{"name":"get_weather","parameters":{"location":"Beijing"}}<|action_end|> suffix',
   "preface suffix", [("get_weather", {"location": "Beijing"})], differs=_KEEP_AFTER_RS)
tc("internlm", "internlm2_streaming_handles_split_markers",
   "hello " + _il("get_weather", "parameters", '{"location":"Tokyo"}'), "hello", [("get_weather", {"location": "Tokyo"})])
tc("internlm", "internlm2_streaming_extracts_multiple_blocks",
   _il("get_weather", "parameters", '{"location":"Shanghai"}') + _il("add", "arguments", '{"x":1,"y":2}'), "",
   [("get_weather", {"location": "Shanghai"}), ("add", {"x": 1, "y": 2})],
   differs="every action block is a call (as in the Rust parser); vLLM's Python parser takes the first only")
tc("internlm", "internlm2_keeps_end_marker_literal_inside_json_string",
   _il("echo", "parameters", '{"text":"literal <|action_end|> inside"}'), "",
   [("echo", {"text": "literal <|action_end|> inside"})], tools=RS_TOOLS + [_fn("echo", text=S)],
   differs="an end marker inside a JSON string is text (as in the Rust parser); vLLM's Python parser cuts the "
   "arguments there")


# ---------------------------------------------------------- phi4_mini_json (json/phi4mini.rs)
def _phi(*calls: str) -> str:
    return "functools[" + ",".join(calls) + "]"


def _pc(name: str, key: str, args: str) -> str:
    return f'{{"name":"{name}","{key}":{args}}}'


tc("phi4_mini_json", "phi4mini_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("phi4_mini_json", "phi4mini_parse_complete_extracts_arguments_key",
   _phi(_pc("get_weather", "arguments", '{"location":"Tokyo","days":"3"}')), "",
   [("get_weather", {"location": "Tokyo", "days": "3"})])
tc("phi4_mini_json", "phi4mini_parse_complete_falls_back_to_parameters_key",
   _phi(_pc("get_weather", "parameters", '{"location":"Tokyo"}')), "", [("get_weather", {"location": "Tokyo"})])
tc("phi4_mini_json", "phi4mini_extracts_multiple_comma_delimited_calls",
   _phi(_pc("get_weather", "arguments", '{"location":"Shanghai"}'), _pc("add", "arguments", '{"x":1,"y":2}')), "",
   [("get_weather", {"location": "Shanghai"}), ("add", {"x": 1, "y": 2})])
tc("phi4_mini_json", "phi4mini_array_valued_arguments_are_not_truncated",
   _phi(_pc("convert", "arguments", '{"items":[1,2],"flag":true}')), "", [("convert", {"items": [1, 2], "flag": True})],
   differs=_PHI_RE)
tc("phi4_mini_json", "phi4mini_preserves_text_before_tool_call",
   "Let me check.\n" + _phi(_pc("get_weather", "arguments", '{"location":"Tokyo"}')), "Let me check.",
   [("get_weather", {"location": "Tokyo"})], differs=_KEEP_AROUND)
tc("phi4_mini_json", "phi4mini_accepts_real_model_whitespace_format",
   'functools[{"name": "get_weather", "arguments": {"location": "Tokyo"}}]', "", [("get_weather", {"location": "Tokyo"})])
tc("phi4_mini_json", "phi4mini_streaming_emits_argument_deltas",
   'preface functools[{"name":"get_weather","arguments":{"location":"Beijing"}}] suffix', "preface suffix",
   [("get_weather", {"location": "Beijing"})], differs=_KEEP_AROUND)
tc("phi4_mini_json", "phi4mini_streaming_handles_split_markers",
   "hello " + _phi(_pc("get_weather", "arguments", '{"location":"Tokyo"}')), "hello",
   [("get_weather", {"location": "Tokyo"})], differs=_KEEP_AROUND)
tc("phi4_mini_json", "phi4mini_parses_nested_arrays_and_objects",
   _phi(_pc("convert", "arguments", '{"array_field":["a","b","c"],"object_field":{"nested":"value"},"empty_object":{}}')),
   "", [("convert", {"array_field": ["a", "b", "c"], "object_field": {"nested": "value"}, "empty_object": {}})],
   differs=_PHI_RE)
tc("phi4_mini_json", "phi4mini_parses_parallel_calls_in_template_format",
   'functools[\n  {"name": "get_weather", "arguments": {"city": "Tokyo"}},\n  {"name": "add", "arguments": {"x": 1, "y": 2}}\n]',
   "", [("get_weather", {"city": "Tokyo"}), ("add", {"x": 1, "y": 2})])


# =============================================================== reasoning (reasoning-parser/src/tests.rs)
# (tests that first give the parser prompt token ids, `initialize(&[...])`, do not convert: a case
# here is the output text and the request's chat_template_kwargs)
# the Rust parser wants <think> in the output or the prompt; vLLM's Python parser and this one split at </think>
rc("qwen3", "qwen3_without_prompt_markers_expects_start_token", "reason</think>answer", "reason", "answer")
rc("qwen3", "qwen3_tolerates_old_and_new_formats", "<think>reason</think>answer", "reason", "answer")
rc("deepseek_r1", "deepseek_r1_defaults_to_reasoning_without_prompt_boundary", "reason</think>answer", "reason", "answer")
rc("deepseek_r1", "deepseek_r1_strips_explicit_start_token", "<think>reason</think>answer", "reason", "answer")
rc("seed_oss", "seed_oss_defaults_to_reasoning_without_prompt_boundary", "implicit reasoning</seed:think>answer",
   "implicit reasoning", "answer")
rc("seed_oss", "seed_oss_handles_explicit_start_token", "<seed:think>reason</seed:think>answer", "reason", "answer")
rc("seed_oss", "seed_oss_no_tokens_treats_everything_as_reasoning", "just plain text", "just plain text", "")
rc("seed_oss", "seed_oss_streams_explicit_start_token_across_pushes",
   "<seed:think>Some reasoning content</seed:think>Final answer", "Some reasoning content", "Final answer")
rc("step3p5", "step3p5_handles_no_start_token_compat_path", "This is a reasoning section</think>This is the rest",
   "This is a reasoning section", "This is the rest")
rc("step3p5", "step3p5_handles_unterminated_reasoning", "<think>reason without end", "reason without end", "")
rc("step3p5", "step3p5_complex_newline_pattern_trims_only_single_framing_newline_each_side",
   "\n This is a \n reasoning section\n\n\n</think>\n\nThis is the rest", "\n This is a \n reasoning section",
   "\n\nThis is the rest")
# step3p5: the Rust parser trims one framing newline on each side of </think>; vLLM's Python parser and this
# one trim the reasoning's trailing whitespace and keep the answer as written
rc("step3p5", "step3p5_drops_framing_newlines_in_single_push", "<think>reason\n</think>\nanswer", "reason", "\nanswer")
rc("step3p5", "step3p5_replays_held_newline_when_more_reasoning_follows", "<think>reason\nmore reason",
   "reason\nmore reason", "")
rc("step3p5", "step3p5_finish_flushes_held_newline_in_unterminated_stream", "<think>reason\n", "reason\n", "",
   differs="reasoning cut by the end of output keeps its text as written (as the Rust parser); vLLM's Python "
   "parser strips its final newline")
rc("step3p5", "step3p5_preserves_inner_newlines_in_reasoning", "<think>line1\nline2</think>tail", "line1\nline2", "tail")
rc("step3p5", "step3p5_trims_only_one_trailing_reasoning_newline", "<think>reason\n\n</think>answer", "reason",
   "answer")
rc("step3p5", "step3p5_drops_only_first_content_newline_after_transition", "<think>reason</think>\nfirst\nsecond",
   "reason", "\nfirst\nsecond")
rc("step3p5", "step3p5_passes_through_clean_boundary_without_framing_newlines", "<think>reason</think>tail", "reason",
   "tail")
rc("step3p5", "step3p5_handles_empty_reasoning_section", "<think></think>answer", "", "answer")


# ---------------------------------------------------------------- mistral (reasoning-parser/src/mistral.rs)
# (the Rust parser keeps a stray [/THINK] in the content, "implicit reasoning[/THINK]answer"; vLLM's Python
# parser and this one drop it as a stray end token)
for _name, _text, _r, _c in [
    ("no_think_token", "implicit reasoning[/THINK]answer", "", "implicit reasoninganswer"),
    ("reasoning_and_content", "[THINK]reason[/THINK]answer", "reason", "answer"),
    ("streamed_across_deltas", "[THINK]Some reasoning content[/THINK]Final answer", "Some reasoning content",
     "Final answer"),
    ("no_end_delimiter", "[THINK]reason without end", "reason without end", ""),
    ("empty_reasoning", "[THINK][/THINK]answer", "", "answer"),
    ("content_around_reasoning", "pre[THINK]reason[/THINK]post", "reason", "prepost"),
]:
    rc("mistral", f"streaming_handles_think_delimited_outputs_{_name}", _text, _r, _c)


# ---------------------------------------------------------------- ernie45 (reasoning-parser/src/ernie45.rs)
# The <response>...</response> answer wrapper is dropped (families.ERNIE45: Family.answer_wrapper).
# The Rust parser also trims the newline run after </think> when no wrapper follows ("abc\n</think>\ndef"
# -> "def"); vLLM's Python parser and this one keep the answer as written ("\ndef").
_KEEP_AFTER_RESPONSE = ("text after </response> is kept (the newline run right after the marker is framing), "
                        "as in the Rust parser; vLLM's Python parser drops everything after the last </response>")
rc("ernie45", "ernie45_defaults_to_reasoning_without_prompt_boundary", "abc\n</think>\ndef", "abc\n", "\ndef")
rc("ernie45", "ernie45_strips_response_wrapper_and_structural_newlines",
   "abc\n</think>\n\n<response>\ndef\n</response>\n", "abc\n", "\ndef\n")
rc("ernie45", "ernie45_streaming_handles_markers_split_across_deltas",
   "abc\n</think>\n\n<response>\ndef\n</response>\n", "abc\n", "\ndef\n")
rc("ernie45", "ernie45_flushes_partial_response_marker_on_finish", "</think>x<resp", "", "x<resp")
rc("ernie45", "ernie45_forwards_text_after_response_end", "abc</think><response>def</response>\ntrailing", "abc",
   "deftrailing", differs=_KEEP_AFTER_RESPONSE)
rc("ernie45", "ernie45_keeps_response_markers_inside_reasoning", "plan: emit <response> later</think>ok",
   "plan: emit <response> later", "ok")


# -------------------------------------------------------------- granite4 (json/granite4.rs)
tc("granite4", "granite4_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("granite4", "granite4_parse_complete_object_args",
   '<tool_call>{"name":"get_weather","arguments":{"city":"Boston"}}</tool_call>', "", [("get_weather", {"city": "Boston"})])
tc("granite4", "granite4_parse_complete_string_args",
   '<tool_call>{"name":"get_weather","arguments":"{\\"city\\":\\"Boston\\"}"}</tool_call>', "",
   [("get_weather", {"city": "Boston"})])
tc("granite4", "granite4_extracts_interleaved_content_and_mixed_args",
   'before <tool_call>{"name":"find_bbox","arguments":"{\\"x\\":1}"}</tool_call> middle <tool_call>{"name":"get_weather",'
   '"arguments":{"city":"Boston"}}</tool_call> after', "before middle after",
   [("find_bbox", {"x": 1}), ("get_weather", {"city": "Boston"})], differs=_FRAMING)
tc("granite4", "granite4_streaming_handles_split_markers",
   'hello <tool_call>{"name":"get_weather","arguments":{"city":"Tokyo"}}</tool_call> bye', "hello bye",
   [("get_weather", {"city": "Tokyo"})], differs=_FRAMING)
tc("granite4", "granite4_streaming_emits_object_argument_deltas",
   '<tool_call>{"name":"get_weather","arguments":{"city":"Beijing"}}</tool_call>', "",
   [("get_weather", {"city": "Beijing"})])
tc("granite4", "granite4_string_args_split_across_chunks", '<tool_call>{"name":"f","arguments":"{\\"a\\":1}"}</tool_call>',
   "", [("f", {"a": 1})])
_BBOX = '{\\"coordinates\\": [[23.54, 43.1], [-12.2, 54.3], [4, 5]], \\"coordinate_type\\": \\"latlong\\"}'
_BBOX_ARGS = {"coordinates": [[23.54, 43.1], [-12.2, 54.3], [4, 5]], "coordinate_type": "latlong"}
tc("granite4", "granite4_streaming_handles_marker_and_json_whitespace",
   "Here goes the bbox call: \n"
   f'<tool_call> {{"name": "find_bbox", "arguments": "{_BBOX}"}} </tool_call>'
   " Now the stock price call: \n "
   '<tool_call> {"name": "get_stock_price", "arguments": {"symbol": "AAPL", "start_date": "2021-01-01", '
   '"end_date": "2021-12-31"}} </tool_call>'
   " Now another bbox call: \n "
   f'<tool_call> {{"name": "find_bbox", "arguments": "{_BBOX}"}} </tool_call>'
   " See? I'm a helpful assistant.",
   "Here goes the bbox call: Now the stock price call: Now another bbox call: See? I'm a helpful assistant.",
   [("find_bbox", _BBOX_ARGS),
    ("get_stock_price", {"symbol": "AAPL", "start_date": "2021-01-01", "end_date": "2021-12-31"}),
    ("find_bbox", _BBOX_ARGS)], differs=_FRAMING)


# ------------------------------------------------------------------------ jamba (json/jamba.rs)
def _jb(*calls: str) -> str:
    return "<tool_calls>[" + ",".join(calls) + "]</tool_calls>"


tc("jamba", "jamba_parse_complete_without_tool_call_keeps_text", "This is a test", "This is a test")
tc("jamba", "jamba_parse_complete_extracts_single_tool_call",
   _jb(_mc("get_current_weather", '{"city":"Dallas","state":"TX","unit":"fahrenheit"}')), "",
   [("get_current_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"})])
tc("jamba", "jamba_parse_complete_preserves_leading_content",
   "Sure! let me call the tool for you." + _jb(_mc("get_current_weather", '{"city":"Dallas"}')),
   "Sure! let me call the tool for you.", [("get_current_weather", {"city": "Dallas"})])
tc("jamba", "jamba_parse_complete_extracts_pretty_multiple_tool_calls",
   '<tool_calls>[\n    {"name": "get_current_weather", "arguments": {"city": "Dallas", "state": "TX"}},\n'
   '    {"name": "get_current_weather", "arguments": {"city": "Orlando", "state": "FL"}}\n]</tool_calls>', "",
   [("get_current_weather", {"city": "Dallas", "state": "TX"}), ("get_current_weather", {"city": "Orlando", "state": "FL"})])
tc("jamba", "jamba_streaming_emits_argument_deltas",
   'preface <tool_calls>[{"name":"get_weather","arguments":{"location":"Beijing"}}]</tool_calls> suffix',
   "preface suffix", [("get_weather", {"location": "Beijing"})], differs=_KEEP_AFTER_RS)
tc("jamba", "jamba_streaming_handles_split_markers", "hello " + _jb(_mc("get_weather", '{"location":"Tokyo"}')), "hello",
   [("get_weather", {"location": "Tokyo"})])
tc("jamba", "jamba_keeps_end_marker_literal_inside_json_string",
   _jb(_mc("echo", '{"text":"literal ]</tool_calls> inside"}')), "", [("echo", {"text": "literal ]</tool_calls> inside"})],
   differs="an end marker inside a JSON string is text (as in the Rust parser); vLLM's Python parser finds no "
   "call")


# ---------------------------------------------------------------------- longcat (json/longcat.rs)
def _lc(name: str, args: str) -> str:
    return f'<longcat_tool_call>{{"name":"{name}","arguments":{args}}}</longcat_tool_call>'


tc("longcat", "longcat_parse_complete_without_tool_call_keeps_text", "Hello, world!", "Hello, world!")
tc("longcat", "longcat_parse_complete_extracts_raw_json_arguments", _lc("get_weather", '{"city":"Tokyo"}'), "",
   [("get_weather", {"city": "Tokyo"})])
tc("longcat", "longcat_parse_complete_preserves_surrounding_text",
   "Let me check.\n" + _lc("get_weather", '{"city":"Tokyo"}') + "\nDone.", "Let me check.\nDone.",
   [("get_weather", {"city": "Tokyo"})], differs=_KEEP_AFTER_RS)
tc("longcat", "longcat_accepts_newline_after_tool_call_start",
   '<longcat_tool_call>\n{"name":"get_weather","arguments":{}}</longcat_tool_call>', "", [("get_weather", {})])
_LC_TYPES = {"string_field": "hello", "int_field": 42, "float_field": 3.14, "bool_field": True, "null_field": None,
             "array_field": ["a", "b"], "object_field": {"nested": "value"}, "empty_array": [], "empty_object": {}}
tc("longcat", "longcat_parse_complete_handles_json_argument_types",
   _lc("test_function", json.dumps(_LC_TYPES, separators=(",", ":"))), "", [("test_function", _LC_TYPES)])
tc("longcat", "longcat_parse_complete_handles_escaped_strings",
   _lc("test_function", '{"quoted":"He said \\"hello\\"","path":"C:\\\\Users\\\\file.txt","newline":"line1\\nline2"}'), "",
   [("test_function", {"quoted": 'He said "hello"', "path": "C:\\Users\\file.txt", "newline": "line1\nline2"})])
tc("longcat", "longcat_streaming_emits_argument_deltas",
   'preface <longcat_tool_call>{"name":"get_weather","arguments":{"city":"Beijing"}}</longcat_tool_call> suffix',
   "preface suffix", [("get_weather", {"city": "Beijing"})], differs=_KEEP_AFTER_RS)
tc("longcat", "longcat_streaming_handles_split_markers", "hello " + _lc("get_weather", '{"city":"Tokyo"}'), "hello",
   [("get_weather", {"city": "Tokyo"})])
tc("longcat", "longcat_streaming_extracts_multiple_tool_calls",
   _lc("get_weather", '{"city":"Tokyo"}') + "\n" + _lc("get_time", '{"timezone":"Asia/Tokyo"}'), "",
   [("get_weather", {"city": "Tokyo"}), ("get_time", {"timezone": "Asia/Tokyo"})])


# ---------------------------------------------------------------------- ernie45 (json/ernie45.rs)
tc("ernie45", "ernie45_parse_complete_without_tool_call_keeps_text", "just a plain answer", "just a plain answer")
tc("ernie45", "ernie45_parse_complete_extracts_raw_json_arguments",
   "Let me check.\n" + _hermes("get_weather", '{ "location": "Tokyo", "days": "3" }'), "Let me check.",
   [("get_weather", {"location": "Tokyo", "days": "3"})])
tc("ernie45", "ernie45_accepts_newline_after_tool_call_start",
   '<tool_call>\n{"name":"get_weather","arguments":{}}\n</tool_call>', "", [("get_weather", {})])
tc("ernie45", "ernie45_streaming_emits_argument_deltas",
   'preface <tool_call>{"name":"get_weather","arguments":{"location":"Beijing"}}</tool_call> suffix', "preface suffix",
   [("get_weather", {"location": "Beijing"})], differs=_KEEP_AFTER_RS)
tc("ernie45", "ernie45_streaming_handles_split_markers", "hello " + _hermes("get_weather", '{"location":"Tokyo"}'),
   "hello", [("get_weather", {"location": "Tokyo"})])
tc("ernie45", "ernie45_streaming_extracts_multiple_tool_calls",
   _hermes("get_weather", '{"location":"Shanghai"}') + _hermes("add", '{"x":1,"y":2}'), "",
   [("get_weather", {"location": "Shanghai"}), ("add", {"x": 1, "y": 2})])


# ---------------------------------------------------------- granite-20b-fc (json/granite_20b_fc.rs)
_FC = "<function_call> "
tc("granite-20b-fc", "granite_20b_fc_parse_complete_without_tool_call_keeps_text",
   "Just a normal response, no tools here.", "Just a normal response, no tools here.")
tc("granite-20b-fc", "granite_20b_fc_parse_complete_single_call",
   _FC + '{"name": "get_weather", "arguments": {"city": "Tokyo"}}', "", [("get_weather", {"city": "Tokyo"})])
tc("granite-20b-fc", "granite_20b_fc_parse_complete_parallel_calls",
   _FC + '{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n'
   + _FC + '{"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}', "",
   [("get_weather", {"city": "Tokyo"}), ("get_time", {"timezone": "Asia/Tokyo"})])
tc("granite-20b-fc", "granite_20b_fc_drops_text_between_and_after_calls",
   _FC + '{"name": "get_weather", "arguments": {"city": "Tokyo"}} and then '
   + _FC + '{"name": "get_time", "arguments": {}} trailing words', " and then trailing words",
   [("get_weather", {"city": "Tokyo"}), ("get_time", {})], differs=_KEEP_AFTER)
tc("granite-20b-fc", "granite_20b_fc_extracts_leading_content",
   "Let me check the weather for you.\n" + _FC + '{"name": "get_weather", "arguments": {"city": "Tokyo"}}',
   "Let me check the weather for you.", [("get_weather", {"city": "Tokyo"})])
_CX = {"quoted": 'He said "hi" with ] and }', "i": 42, "f": 3.14, "b": True, "nothing": None, "arr": ["a", "b", "c"],
       "obj": {"nested": "value"}, "empty_arr": [], "empty_obj": {}}
tc("granite-20b-fc", "granite_20b_fc_parse_complete_preserves_complex_arguments_verbatim",
   _FC + '{"name":"test_function","arguments":' + json.dumps(_CX, separators=(",", ":")) + "}", "",
   [("test_function", _CX)])
tc("granite-20b-fc", "granite_20b_fc_handles_multiline_json_arguments",
   _FC + '{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Tokyo",\n    "days": 3\n  }\n}', "",
   [("get_weather", {"city": "Tokyo", "days": 3})])
tc("granite-20b-fc", "granite_20b_fc_parse_complete_empty_arguments", _FC + '{"name": "refresh", "arguments": {}}', "",
   [("refresh", {})])
tc("granite-20b-fc", "granite_20b_fc_streaming_handles_split_markers",
   _FC + '{"name":"get_weather","arguments":{"city":"Tokyo"}}', "", [("get_weather", {"city": "Tokyo"})])
