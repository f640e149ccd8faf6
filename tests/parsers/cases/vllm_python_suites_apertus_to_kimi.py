"""vLLM's own parser tests for the tool-call names apertus .. kimi_k3, converted to cases.

From vllm-project/vllm ``tests/tool_parsers/test_<name>_tool_parser.py``: each
model output and the calls / content the test expects, named
``vllm_<test name>``. Streaming tests whose chunks are only a split of one
output are covered by the driver's splits (whole output, char by char,
random cuts). Tests of parser internals are not converted.
"""

from __future__ import annotations

import json
from typing import Any

from tests.parsers.cases import ToolCase

TOOL_CASES: list[ToolCase] = []
DIFFERENCES: dict[str, str] = {}


def case(parser: str, name: str, text: str, content: str, calls: list[tuple[str, Any]] | None = None,
         tools: list[dict[str, Any]] | None = None, differs: str | None = None) -> None:
    c = ToolCase(parser, f"vllm_{name}", text, content, calls or [], tools)
    TOOL_CASES.append(c)
    if differs:
        DIFFERENCES[c.id] = differs


def tool(name: str, **props: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}


# ------------------------------------------------------------------ apertus
P, S = "<|tools_prefix|>", "<|tools_suffix|>"
case("apertus", "no_tool_calls", "Hello, how can I help you today?", "Hello, how can I help you today?")
case("apertus", "single_tool_call", P + '[{"get_weather": {"location": "London"}}]' + S, "",
     [("get_weather", {"location": "London"})])
case("apertus", "multiple_arguments", P + '[{"get_weather": {"location": "San Francisco", "unit": "celsius"}}]' + S,
     "", [("get_weather", {"location": "San Francisco", "unit": "celsius"})])
case("apertus", "text_before_tool_call",
     "Let me check the weather for you. " + P + '[{"get_weather": {"location": "Paris"}}]' + S,
     "Let me check the weather for you.", [("get_weather", {"location": "Paris"})])
case("apertus", "multiple_tool_calls",
     P + '[{"get_weather": {"location": "London"}}, {"get_time": {"location": "London"}}]' + S, "",
     [("get_weather", {"location": "London"}), ("get_time", {"location": "London"})])
case("apertus", "nested_arguments",
     P + '[{"complex_function": {"nested": {"inner": "value"}, "list": ["a", "b"]}}]' + S, "",
     [("complex_function", {"nested": {"inner": "value"}, "list": ["a", "b"]})])
case("apertus", "incomplete_tool_call", P + '[{"get_weather": {"location": "London"}', P + '[{"get_weather": {"location": "London"}',
     differs="a call cut off inside its JSON is not a call (vLLM completes the JSON partially and "
     "calls get_weather); malformed output is given back whole as content")
case("apertus", "missing_tool_suffix", P + '[{"get_weather": {"location": "San Francisco", "unit": "celsius"}}]', "",
     [("get_weather", {"location": "San Francisco", "unit": "celsius"})])
case("apertus", "mtp_streaming_skip_and_catch_up",
     P + '[{"t1": {"a": 1}}, {"t2": {"b": 2}}, {"t3": {"c": 3}}]' + S, "",
     [("t1", {"a": 1}), ("t2", {"b": 2}), ("t3", {"c": 3})])
case("apertus", "streaming_character_by_character",
     'Hi <|tools_prefix|>[{"get_weather": {"location": "London"}}]<|tools_suffix|> ', "Hi",
     [("get_weather", {"location": "London"})])

# -------------------------------------------------------------------- jamba
_DALLAS = {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}
_ORLANDO = {"city": "Orlando", "state": "FL", "unit": "fahrenheit"}
_J1 = '<tool_calls>[\n    {"name": "get_current_weather", "arguments": {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}}\n]</tool_calls>'
_J2 = ('<tool_calls>[\n    {"name": "get_current_weather", "arguments": {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}},\n'
       '    {"name": "get_current_weather", "arguments": {"city": "Orlando", "state": "FL", "unit": "fahrenheit"}}\n]</tool_calls>')
case("jamba", "no_tools", "This is a test", "This is a test")
case("jamba", "single_tool", " " + _J1, "", [("get_current_weather", _DALLAS)])
case("jamba", "single_tool_with_content", " Sure! let me call the tool for you." + _J1,
     " Sure! let me call the tool for you.", [("get_current_weather", _DALLAS)])
case("jamba", "parallel_tools", " " + _J2, "", [("get_current_weather", _DALLAS), ("get_current_weather", _ORLANDO)])
case("jamba", "streaming_arguments_in_single_delta",
     '<tool_calls>[{"name": "get_current_weather", "arguments": {"city": "Dallas", "state": "TX"}}]</tool_calls>', "",
     [("get_current_weather", {"city": "Dallas", "state": "TX"})])


# ------------------------------------------- the common suite (common_tests.py)
VARIOUS = {
    "string_field": "hello", "int_field": 42, "float_field": 3.14, "bool_field": True,
    "null_field": None, "array_field": ["a", "b", "c"], "object_field": {"nested": "value"},
    "empty_array": [], "empty_object": {},
}  # fmt: skip
ESCAPED = {"quoted": 'He said "hello"', "path": "C:\\Users\\file.txt", "newline": "line1\nline2", "unicode": "emoji: 🎉"}
_VARIOUS_JSON = """{
    "string_field": "hello",
    "int_field": 42,
    "float_field": 3.14,
    "bool_field": true,
    "null_field": null,
    "array_field": ["a", "b", "c"],
    "object_field": {"nested": "value"},
    "empty_array": [],
    "empty_object": {}
  }"""
_ESCAPED_JSON = """{
    "quoted": "He said \\"hello\\"",
    "path": "C:\\\\Users\\\\file.txt",
    "newline": "line1\\nline2",
    "unicode": "emoji: 🎉"
  }"""
TOKYO = [("get_weather", {"city": "Tokyo"})]
NO_CALLS = "This is a regular response without any tool calls."


def common(parser: str, single: str, parallel: tuple[str, list[tuple[str, Any]]] | None, various: str,
           empty: str, surrounding: tuple[str, str], escaped: str, tools: list[dict[str, Any]] | None = None,
           empty_name: str = "refresh") -> None:
    """The cases of vLLM's ToolParserTests mixin (common_tests.py) for one parser."""
    case(parser, "test_no_tool_calls", NO_CALLS, NO_CALLS, tools=tools)
    case(parser, "test_single_tool_call_simple_args", single, "", TOKYO, tools=tools)
    if parallel is not None:
        case(parser, "test_parallel_tool_calls", parallel[0], "", parallel[1], tools=tools)
    case(parser, "test_various_data_types", various, "", [("test_function", VARIOUS)], tools=tools)
    case(parser, "test_empty_arguments", empty, "", [(empty_name, {})], tools=tools)
    case(parser, "test_surrounding_text", surrounding[0], surrounding[1], TOKYO, tools=tools)
    case(parser, "test_escaped_strings", escaped, "", [("test_function", ESCAPED)], tools=tools)


# ------------------------------------------------------------------ granite
common(
    "granite",
    '<|tool_call|> [{"name": "get_weather", "arguments": {"city": "Tokyo"}}]',
    ('<|tool_call|> [\n  {"name": "get_weather", "arguments": {"city": "Tokyo"}},\n'
     '  {"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}\n]',
     [("get_weather", {"city": "Tokyo"}), ("get_time", {"timezone": "Asia/Tokyo"})]),
    '<tool_call> [{\n  "name": "test_function",\n  "arguments": ' + _VARIOUS_JSON + "\n}]",
    '<|tool_call|> [{"name": "refresh", "arguments": {}}]',
    ('Let me check the weather for you.\n<|tool_call|> [{"name": "get_weather", "arguments": {"city": "Tokyo"}}]\n'
     "I'll get that information.", "Let me check the weather for you.\nI'll get that information."),
    '<tool_call> [{\n  "name": "test_function",\n  "arguments": ' + _ESCAPED_JSON + "\n}]",
)
DIFFERENCES["tool:granite:vllm_test_surrounding_text"] = (
    "we keep the text after the call as content; vLLM drops it (its own test marks this xfail)")
case("granite", "test_granite_string_prefix_format",
     '<tool_call> [{"name": "get_weather", "arguments": {"city": "Tokyo"}}]', "", TOKYO)
case("granite", "test_streaming_parallel_calls_batched_deltas",
     '<|tool_call|> [{"arguments": {"city": "Tokyo"}, "name": "get_weather"}, '
     '{"arguments": {"timezone": "Asia/Tokyo"}, "name": "get_time"}]', "",
     [("get_weather", {"city": "Tokyo"}), ("get_time", {"timezone": "Asia/Tokyo"})])
case("granite", "test_streaming_parallel_calls_single_delta",
     '<|tool_call|>[{"name": "get_weather", "arguments": {"x": 42}}, {"name": "b", "arguments": {"y": 7}}]', "",
     [("get_weather", {"x": 42}), ("b", {"y": 7})])
case("granite", "test_malformed_input_not_an_array", '<|tool_call|> {"name": "func", "arguments": {}}',
     '<|tool_call|> {"name": "func", "arguments": {}}',
     differs="vLLM drops the <|tool_call|> marker from the content; malformed output is given back whole")

# ------------------------------------------------------------- hunyuan_a13b
_SF = {"city": "San Francisco", "metric": "celsius"}
case("hunyuan_a13b", "extract_no_tool_call", "How can I help you today?", "How can I help you today?")
case("hunyuan_a13b", "extract_single",
     '<tool_calls>[{"name": "get_weather", "arguments": {"city": "San Francisco", "metric": "celsius"}}]</tool_calls>',
     "", [("get_weather", _SF)])
case("hunyuan_a13b", "extract_multiple",
     '<tool_calls>[{"name": "get_weather", "arguments": {"city": "San Francisco", "metric": "celsius"}}, '
     '{"name": "register_user", "arguments": {"name": "John Doe", "age": 37, "address": {"city": "San Francisco", '
     '"state": "CA"}, "role": null, "passed_test": true, "aliases": ["John", "Johnny"]}}]</tool_calls>', "",
     [("get_weather", _SF), ("register_user", {"name": "John Doe", "age": 37, "address": {"city": "San Francisco", "state": "CA"},
                                               "role": None, "passed_test": True, "aliases": ["John", "Johnny"]})])
case("hunyuan_a13b", "extract_content_before",
     'I will call the tool now. <tool_calls>[{"name": "get_weather", "arguments": {"city": "Boston"}}]</tool_calls>',
     "I will call the tool now.", [("get_weather", {"city": "Boston"})])
case("hunyuan_a13b", "extract_content_after",
     '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Seattle"}}]</tool_calls>\nThank you!',
     "\nThank you!", [("get_weather", {"city": "Seattle"})],
     differs="we keep the text after the calls as content; vLLM strips it")
case("hunyuan_a13b", "extract_nested",
     '<tool_calls>[{"name": "complex_tool", "arguments": {"level1": {"level2": {"level3": {"value": 123}}}}}]</tool_calls>',
     "", [("complex_tool", {"level1": {"level2": {"level3": {"value": 123}}}})])
case("hunyuan_a13b", "non_ascii",
     '<tool_calls>[{"name": "get_weather", "arguments": {"city": "北京"}}]</tool_calls>', "",
     [("get_weather", {"city": "北京"})])
case("hunyuan_a13b", "streaming_one_empty_args_tool_first",
     '<tool_calls>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 42}}]</tool_calls>', "",
     [("a", {}), ("b", {"x": 42})])
case("hunyuan_a13b", "streaming_one_empty_args_tool_last",
     '<tool_calls>[{"name": "a", "arguments": {"x": 42}}, {"name": "b", "arguments": {}}]</tool_calls>', "",
     [("a", {"x": 42}), ("b", {})])
case("hunyuan_a13b", "streaming_answer_tail",
     '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Boston"}}]</tool_calls>\n</answer>', "\n</answer>",
     [("get_weather", {"city": "Boston"})],
     differs="we keep the text after the calls as content; vLLM strips it")

# ----------------------------------------------------------------- internlm
_NOTOOLS = [tool(n) for n in ("get_weather", "get_time", "test_function", "refresh")]
common(
    "internlm",
    '<|action_start|><|plugin|>{"name": "get_weather", "parameters": {"city": "Tokyo"}}<|action_end|>',
    None,
    '<|action_start|><|plugin|>{\n  "name": "test_function",\n  "parameters": ' + _VARIOUS_JSON + "\n}<|action_end|>",
    '<|action_start|><|plugin|>{"name": "refresh", "parameters": {}}<|action_end|>',
    ("Let me check the weather for you. "
     '<|action_start|><|plugin|>{"name": "get_weather", "parameters": {"city": "Tokyo"}}<|action_end|>',
     "Let me check the weather for you."),
    '<|action_start|><|plugin|>{\n  "name": "test_function",\n  "parameters": ' + _ESCAPED_JSON + "\n}<|action_end|>",
    tools=_NOTOOLS,
)
_W = [tool("get_weather", city={"type": "string"})]
case("internlm", "test_extract_unknown_tool_name_not_emitted",
     '<|action_start|><|plugin|>{"name": "delete_everything", "parameters": {"city": "Tokyo"}}<|action_end|>',
     '<|action_start|><|plugin|>{"name": "delete_everything", "parameters": {"city": "Tokyo"}}<|action_end|>',
     tools=_W, differs="a name that is not one of the request's tools is not a call (vLLM 0.32's check "
     "lacks its return and emits it; fixed later upstream, this test); the output is given back as content")
case("internlm", "test_extract_known_tool_name_emitted",
     '<|action_start|><|plugin|>{"name": "get_weather", "parameters": {"city": "Tokyo"}}<|action_end|>', "", TOKYO, tools=_W)
case("internlm", "test_malformed_not_json", "<|action_start|><|plugin|>not json<|action_end|>",
     "<|action_start|><|plugin|>not json<|action_end|>",
     differs="vLLM raises on output that is not JSON; malformed output is given back whole as content")

# ----------------------------------------------------------------- granite4
_BBOX = {"coordinates": [[23.54, 43.1], [-12.2, 54.3], [4, 5]], "coordinate_type": "latlong"}
_STOCK = {"symbol": "AAPL", "start_date": "2021-01-01", "end_date": "2021-12-31"}
_G4_CALLS = [
    {"name": "find_bbox", "arguments": json.dumps(_BBOX)},
    {"name": "get_stock_price", "arguments": _STOCK},
    {"name": "find_bbox", "arguments": json.dumps(_BBOX)},
]
_G4_TEXT = ["Here goes the bbox call: \n", " Now the stock price call: \n ", " Now another bbox call: \n ",
            " See? I'm a helpful assistant."]
case("granite4", "test_tool_call_parser_complex",
     _G4_TEXT[0] + "".join(f"<tool_call> {json.dumps(c)} </tool_call>" + _G4_TEXT[i + 1] for i, c in enumerate(_G4_CALLS)),
     "Here goes the bbox call: Now the stock price call: Now another bbox call: See? I'm a helpful assistant.",
     [("find_bbox", _BBOX), ("get_stock_price", _STOCK), ("find_bbox", _BBOX)],
     differs="whitespace next to a call is the template's framing and is dropped; vLLM keeps it "
     "(the texts are otherwise the same)")
case("granite4", "test_streaming_preserves_content_between_complete_tool_calls",
     '<tool_call> {"name": "find_bbox", "arguments": {}} </tool_call>some explanation '
     '<tool_call> {"name": "get_stock_price", "arguments": {}} </tool_call>', "some explanation",
     [("find_bbox", {}), ("get_stock_price", {})])

# ------------------------------------------------------------ granite-20b-fc
common(
    "granite-20b-fc",
    '<function_call> {"name": "get_weather", "arguments": {"city": "Tokyo"}}',
    ('<function_call> {"name": "get_weather", "arguments": {"city": "Tokyo"}}\n'
     '<function_call> {"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}',
     [("get_weather", {"city": "Tokyo"}), ("get_time", {"timezone": "Asia/Tokyo"})]),
    '<function_call> {\n  "name": "test_function",\n  "arguments": ' + _VARIOUS_JSON + "\n}",
    '<function_call> {"name": "refresh", "arguments": {}}',
    ('Let me check the weather for you.\n<function_call> {"name": "get_weather", "arguments": {"city": "Tokyo"}}',
     "Let me check the weather for you."),
    '<function_call> {\n  "name": "test_function",\n  "arguments": ' + _ESCAPED_JSON + "\n}",
)
case("granite-20b-fc", "test_malformed_input_array", '<function_call> [{"name": "func", "arguments": {}}]',
     '<function_call> [{"name": "func", "arguments": {}}]')
case("granite-20b-fc", "test_malformed_input_name_not_string", '<function_call> {"name": 123}',
     '<function_call> {"name": 123}')

# ---------------------------------------------------------------- gigachat3
_MEM = {"action": "create", "id": "preferences"}
_MEM_COMPLEX = {**_MEM, "content": {"short_answers": True, "hate_emojis": True, "english_ui": False,
                                    "russian_math_explanations": True}}
for _hdr, _tag in (("<|message_sep|>\n\nfunction call<|role_sep|>\n", "gigachat3"), ("<|function_call|>", "gigachat31")):
    for _label, _args in (("simple", _MEM), ("parameterless", {}), ("complex", _MEM_COMPLEX)):
        case("gigachat3", f"test_tool_call_{_label}_{_tag}",
             _hdr + json.dumps({"name": "manage_user_memory", "arguments": _args}, ensure_ascii=False), "",
             [("manage_user_memory", _args)])
    _mixed = "I'll check that for you." + _hdr + json.dumps({"name": "manage_user_memory", "arguments": _MEM})
    case("gigachat3", f"test_tool_call_mixed_content_{_tag}", _mixed, "I'll check that for you.",
         [("manage_user_memory", _MEM)])
    case("gigachat3", f"test_tool_call_mixed_content_with_eos_{_tag}", _mixed + "</s>", "I'll check that for you.",
         [("manage_user_memory", _MEM)])
case("gigachat3", "test_no_tool_call", "How can I help you today?", "How can I help you today?")

# ------------------------------------------------------------------ ernie45
_BJ = ("get_current_temperature", {"location": "Beijing"})
_GZ = ("get_temperature_unit", {"location": "Guangzhou", "unit": "c"})
_E1 = '<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "Beijing"}}\n</tool_call>\n'
_E2 = '<tool_call>\n{"name": "get_temperature_unit", "arguments": {"location": "Guangzhou", "unit": "c"}}\n</tool_call>\n'
case("ernie45", "test_extract_tool_calls_no_tools", "This is a test", "This is a test")
case("ernie45", "single_tool_call", _E1, "", [_BJ])
case("ernie45", "multiple_tool_calls", _E1 + _E2, "", [_BJ, _GZ])
case("ernie45", "tool_call_with_content_before",
     "I need to call two tools to handle these two issues separately.\n</think>\n\n" + _E1 + _E2,
     "I need to call two tools to handle these two issues separately.\n</think>", [_BJ, _GZ])

# ------------------------------------------------------------ functiongemma
_S, _E = "<start_function_call>", "<end_function_call>"
case("functiongemma", "test_no_tool_calls", "Hello, how can I help you today?", "Hello, how can I help you today?")
case("functiongemma", "test_single_tool_call", _S + "call:get_weather{location:<escape>London<escape>}" + _E, "",
     [("get_weather", {"location": "London"})])
case("functiongemma", "test_multiple_arguments",
     _S + "call:get_weather{location:<escape>San Francisco<escape>,unit:<escape>celsius<escape>}" + _E, "",
     [("get_weather", {"location": "San Francisco", "unit": "celsius"})])
case("functiongemma", "test_text_before_tool_call",
     "Let me check the weather for you. " + _S + "call:get_weather{location:<escape>Paris<escape>}" + _E,
     "Let me check the weather for you.", [("get_weather", {"location": "Paris"})])
case("functiongemma", "test_multiple_tool_calls",
     _S + "call:get_weather{location:<escape>London<escape>}" + _E + _S + "call:get_time{timezone:<escape>UTC<escape>}" + _E,
     "", [("get_weather", {"location": "London"}), ("get_time", {"timezone": "UTC"})])
case("functiongemma", "test_parse_arguments_typed",
     _S + "call:f{count:<escape>42<escape>,enabled:<escape>true<escape>,message:<escape>Hello World<escape>}" + _E,
     "", [("f", {"count": 42, "enabled": True, "message": "Hello World"})])
case("functiongemma", "test_streamed_arguments_form_valid_json_with_two_keys",
     _S + "call:get_weather{city:<escape>NYC<escape>unit:<escape>celsius<escape>}" + _E, "",
     [("get_weather", {"city": "NYC", "unit": "celsius"})])
case("functiongemma", "test_streamed_arguments_form_valid_json_with_three_keys",
     _S + "call:search{query:<escape>python<escape>limit:<escape>10<escape>sort:<escape>relevance<escape>}" + _E, "",
     [("search", {"query": "python", "limit": 10, "sort": "relevance"})])

# --------------------------------------------------------------------- dots
_SET_LOCATION = {"type": "function", "function": {"name": "set_location", "parameters": {
    "type": "object",
    "properties": {"location": {"$ref": "#/$defs/Location"}, "days": {"type": "integer"},
                   "include_weather": {"type": "boolean"}},
    "$defs": {"Location": {"type": "object", "properties": {"city": {"type": "string"}}}}}}}
_SEARCH_OPEN = [tool("search", query={"type": "string"}), tool("open", id={"type": "integer"})]
_DS, _DE = "<dots_function_call>", "</dots_function_call>"
case("dots", "test_non_stream_xml_converts_schema_types_and_resolves_ref",
     "ok" + _DS + '<invoke name="set_location"><parameter name="location">{"city": "Shanghai"}</parameter>'
     '<parameter name="days">3</parameter><parameter name="include_weather">true</parameter></invoke>' + _DE,
     "ok", [("set_location", {"location": {"city": "Shanghai"}, "days": 3, "include_weather": True})],
     tools=[_SET_LOCATION])
case("dots", "test_non_stream_supports_multiple_invokes_and_json_fallback",
     _DS + '<invoke name="search"><parameter name="query">chairs</parameter></invoke>'
     '<invoke name="open"><parameter name="id">7</parameter></invoke>' + _DE
     + _DS + '{"name":"search","arguments":{"query":"tables"}}' + _DE, "",
     [("search", {"query": "chairs"}), ("open", {"id": 7}), ("search", {"query": "tables"})], tools=_SEARCH_OPEN)
_GHOST = _DS + '<invoke name="ghost"><parameter name="query">chairs</parameter></invoke>' + _DE
case("dots", "test_non_stream_unknown_tool_is_left_as_content", _GHOST, _GHOST, tools=_SEARCH_OPEN)
case("dots", "test_streaming_buffers_partial_marker_and_emits_all_complete_calls",
     "visible" + _DS + '<invoke name="search"><parameter name="query">chairs</parameter></invoke>' + _DE
     + _DS + '<invoke name="search"><parameter name="query">tables</parameter></invoke>' + _DE, "visible",
     [("search", {"query": "chairs"}), ("search", {"query": "tables"})], tools=_SEARCH_OPEN)
case("dots", "test_streaming_malformed_block_does_not_block_later_valid_call",
     _DS + "garbage" + _DE + _DS + '<invoke name="search"><parameter name="query">chairs</parameter></invoke>' + _DE,
     _DS + "garbage" + _DE, [("search", {"query": "chairs"})], tools=_SEARCH_OPEN,
     differs="the malformed block is given back as content with its markers; vLLM drops it "
     "(non-streaming) or keeps only 'garbage' (streaming)")
case("dots", "test_streaming_emits_complete_json_before_end_marker",
     _DS + '{"name":"search","arguments":{"query":"chairs"}}' + _DE, "", [("search", {"query": "chairs"})],
     tools=_SEARCH_OPEN)

# -------------------------------------------------------------------- hy_v3
_HY_TOOLS = [tool("get_current_date"), tool("get_weather", city={"type": "string"}, date={"type": "string"})]
_BEIJING = ("get_weather", {"city": "Beijing", "date": "2026-03-30"})
_DATE = ("get_current_date", {})
_HY_ZERO_NL = "<tool_calls>\n<tool_call>get_current_date<tool_sep>\n</tool_call>\n</tool_calls>"
_HY_ARGS_NL = ("<tool_calls>\n<tool_call>get_weather<tool_sep>\n<arg_key>city</arg_key>\n<arg_value>Beijing"
               "</arg_value>\n<arg_key>date</arg_key>\n<arg_value>2026-03-30</arg_value>\n</tool_call>\n</tool_calls>")
case("hy_v3", "test_no_tool_call", "This is a plain response.", "This is a plain response.", tools=_HY_TOOLS)
case("hy_v3", "test_zero_arg_inline", "<tool_calls><tool_call>get_current_date<tool_sep></tool_call></tool_calls>", "",
     [_DATE], tools=_HY_TOOLS)
case("hy_v3", "test_zero_arg_newline", _HY_ZERO_NL, "", [_DATE], tools=_HY_TOOLS)
case("hy_v3", "test_args_same_line",
     "<tool_calls><tool_call>get_weather<tool_sep><arg_key>city</arg_key><arg_value>Beijing</arg_value>"
     "<arg_key>date</arg_key><arg_value>2026-03-30</arg_value></tool_call></tool_calls>", "", [_BEIJING], tools=_HY_TOOLS)
case("hy_v3", "test_args_with_newlines", _HY_ARGS_NL, "", [_BEIJING], tools=_HY_TOOLS)
case("hy_v3", "test_content_before", "Checking." + _HY_ZERO_NL, "Checking.", [_DATE], tools=_HY_TOOLS)
case("hy_v3", "test_multiple",
     _HY_ARGS_NL.replace("\n</tool_calls>", "\n<tool_call>get_weather<tool_sep>\n<arg_key>city</arg_key>\n"
                         "<arg_value>Hangzhou</arg_value>\n<arg_key>date</arg_key>\n<arg_value>2026-03-30</arg_value>\n"
                         "</tool_call>\n</tool_calls>"), "",
     [_BEIJING, ("get_weather", {"city": "Hangzhou", "date": "2026-03-30"})], tools=_HY_TOOLS)

# --------------------------------------------------------------- k2_horizon
_K2_TOOLS = [tool("lookup", query={"type": "string"}, limit={"type": "integer"}, enabled={"type": "boolean"}),
             tool("ping")]


def _k2_group(*calls: str, prefix: str = "", suffix: str = "") -> str:
    return prefix + "<ifm|tool_calls>" + "\n".join(calls) + "</ifm|tool_calls>" + suffix


def _k2_json(name: str, arguments: dict[str, Any]) -> str:
    return "<ifm|tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</ifm|tool_call>"


def _k2_xml(name: str, arguments: list[tuple[str, str]], typed: bool = False) -> str:
    parts = [f"<ifm|tool_call>{name}"]
    for key, value in arguments:
        parts.append(f"<ifm|arg_key>{key}</ifm|arg_key>")
        if typed:
            parts.append("<ifm|arg_type>" + ("integer" if key == "limit" else "string") + "</ifm|arg_type>")
        parts.append(f"<ifm|arg_value>{value}</ifm|arg_value>")
    return "".join(parts) + "</ifm|tool_call>"


case("k2_horizon", "test_xml_default_parses_multiple_calls_and_coerces_schema",
     _k2_group(_k2_xml("lookup", [("query", "123"), ("limit", "3")]), _k2_xml("ping", []), prefix="Before ", suffix=" after."),
     "Before after.", [("lookup", {"query": "123", "limit": 3}), ("ping", {})], tools=_K2_TOOLS,
     differs="whitespace next to the calls is framing and is dropped: vLLM gives 'Before  after.'")
case("k2_horizon", "test_request_level_format_json", _k2_group(_k2_json("lookup", {"limit": "2"})), "",
     [("lookup", {"limit": 2})], tools=_K2_TOOLS,
     differs="the JSON call syntax is accepted without the request's tool_call_format='json' "
     "(a tool parser here is not given template kwargs); vLLM's default 'xml' refuses it")
case("k2_horizon", "test_request_level_format_xml_typed",
     _k2_group(_k2_xml("lookup", [("query", "weather"), ("limit", "2")], typed=True)), "",
     [("lookup", {"query": "weather", "limit": 2})], tools=_K2_TOOLS,
     differs="typed arguments are accepted without tool_call_format='xml_typed' (see "
     "vllm_test_request_level_format_json)")
case("k2_horizon", "test_unknown_tool_fails_closed", _k2_group(_k2_json("missing", {})),
     _k2_group(_k2_json("missing", {})), tools=_K2_TOOLS)
for _i, _out in enumerate(["<ifm|tool_calls><ifm|tool_call>ping", "<ifm|tool_calls><ifm|tool_call>ping</ifm|tool_call>",
                           _k2_group("junk")]):
    case("k2_horizon", f"test_malformed_and_incomplete_input_is_content_{_i}", _out, _out, tools=_K2_TOOLS)
case("k2_horizon", "test_character_split_streaming",
     _k2_group(_k2_xml("lookup", [("limit", "2")]), prefix="Before", suffix="after"), "Beforeafter",
     [("lookup", {"limit": 2})], tools=_K2_TOOLS)
case("k2_horizon", "test_whitespace_only_surrounding_content_is_not_preserved",
     _k2_group(_k2_xml("ping", []), prefix=" \n", suffix="\t "), "", [("ping", {})], tools=_K2_TOOLS)

# ------------------------------------------------------------------ kimi_k3
case("kimi_k3", "test_streaming_content_stops_at_message_close", "Hello<|close|>message<|sep|>", "Hello")

# -------------------------------------------------------- cohere_command3/4
# vLLM's cases start with a <|START_THINKING|> block: that is the reasoning
# parser's (--reasoning-parser cohere_command3/4), run before the tool parser,
# so the cases here are the text after it.
_ACT1 = ('<|START_ACTION|>\n[\n    {"tool_call_id": "0", "tool_name": "foo", "parameters": {"query": "query1"}}\n]\n'
         "<|END_ACTION|>")
_ACT2 = ('<|START_ACTION|>\n[\n    {"tool_call_id": "0", "tool_name": "foo", "parameters": {"query": "query1"}},\n'
         '    {"tool_call_id": "1", "tool_name": "bar", "parameters": {"x": 42}}\n]\n<|END_ACTION|>')
for _v in ("3", "4"):
    _p = f"cohere_command{_v}"
    case(_p, f"cmd{_v}-single_tool_call", _ACT1, "", [("foo", {"query": "query1"})])
    case(_p, f"cmd{_v}-multiple_tool_calls", _ACT2, "", [("foo", {"query": "query1"}), ("bar", {"x": 42})])
    case(_p, f"cmd{_v}-response", "\n<|START_RESPONSE|>foo bar<|END_RESPONSE|>", "foo bar")
    case(_p, f"cmd{_v}-citations_no_tool_calls", "\n<|START_RESPONSE|>foo <co>bar</co: 0:[1,2],1:[3,4]><|END_RESPONSE|>",
         "foo <co>bar</co: 0:[1,2],1:[3,4]>",
         differs="citation tags are kept as text: cohere_melody turns them into citation objects "
         "(the Cohere API's citations, which this frontend's OpenAI API does not have)")

# -------------------------------------------------------------------- hy_v4
# (vLLM's tests use a checkpoint token suffix, <tool_calls:opensource>; these
# are the unsuffixed tokens, see the README on suffixes)
_TYPED = {"type": "function", "function": {"name": "typed", "parameters": {"type": "object", "properties": {
    "s": {"type": "string"}, "i": {"type": "integer"}, "b": {"type": "boolean"}, "n": {"type": "number"},
    "arr": {"type": "array"}, "obj": {"type": "object"}, "alias_int": {"type": "int"},
    "alias_list": {"type": "list"}, "prefix_uint": {"type": "uint32"}, "union": {"type": ["string", "object"]},
    "any_of": {"anyOf": [{"type": "string"}, {"type": "array"}]}, "one_of": {"oneOf": [{"type": "number"}]},
    "untyped": {}}}}}
_HY4_TOOLS = [tool("get_weather", city={"type": "string"}, days={"type": "integer"}), tool("get_current_date"), _TYPED]


def _hy4_call(name: str, args: list[tuple[str, str]]) -> str:
    return ("<tool_call>" + name + "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in args)
            + "</tool_call>")


_VALUE_ROWS = [  # TestArgumentValueTypes.test_value_coercion / test_unparsable_value_is_kept_as_text
    [("s", "Beijing", "Beijing"), ("i", "3", 3), ("b", "true", True), ("n", "5", 5), ("arr", '["a", "b"]', ["a", "b"]),
     ("obj", '{"k": 1}', {"k": 1}), ("alias_int", "7", 7), ("alias_list", "[1]", [1]), ("prefix_uint", "42", 42),
     ("union", '{"a": 1}', {"a": 1}), ("any_of", '["x"]', ["x"]), ("one_of", "2.5", 2.5), ("untyped", "v", "v")],
    [("s", "", ""), ("i", "-7", -7), ("b", "True", True), ("n", "5.5", 5.5), ("union", "plain", "plain"),
     ("any_of", "plain", "plain"), ("nope", "v", "v")],
    [("b", "false", False), ("n", "1e3", 1000.0), ("i", "notanint", "notanint"), ("arr", "notjson", "notjson")],
    [("b", "yes", "yes")],
]
case("hy_v4", "test_value_coercion",
     "<tool_calls>" + "".join(_hy4_call("typed", [(k, raw) for k, raw, _ in row]) for row in _VALUE_ROWS) + "</tool_calls>",
     "", [("typed", {k: want for k, _, want in row}) for row in _VALUE_ROWS], tools=_HY4_TOOLS)
case("hy_v4", "test_unknown_tool_keeps_values_as_text", "<tool_calls>" + _hy4_call("mystery", [("x", "1")]) + "</tool_calls>",
     "", [("mystery", {"x": "1"})], tools=_HY4_TOOLS)
case("hy_v4", "test_no_tool_call", "A plain response.", "A plain response.", tools=_HY4_TOOLS)
case("hy_v4", "test_values_typed_from_schema",
     "sure!<tool_calls>" + _hy4_call("get_weather", [("city", "Beijing"), ("days", "3")]) + "</tool_calls>", "sure!",
     [("get_weather", {"city": "Beijing", "days": 3})], tools=_HY4_TOOLS)
case("hy_v4", "test_multiple_calls_keep_their_order",
     "<tool_calls>" + _hy4_call("get_weather", [("city", "A")]) + _hy4_call("get_current_date", []) + "</tool_calls>", "",
     [("get_weather", {"city": "A"}), ("get_current_date", {})], tools=_HY4_TOOLS)
case("hy_v4", "test_non_ascii_values_are_not_escaped",
     "<tool_calls>" + _hy4_call("get_weather", [("city", "北京")]) + "</tool_calls>", "", [("get_weather", {"city": "北京"})],
     tools=_HY4_TOOLS)
_HY4_MALFORMED = {
    "missing_tool_calls_end": "<tool_calls>" + _hy4_call("get_current_date", []),
    "unbalanced_tool_call": "<tool_calls><tool_call>get_weather<arg_key>city</arg_key><arg_value>X</arg_value></tool_calls>",
    "empty_function_name": "<tool_calls><tool_call></tool_call></tool_calls>",
    "unparsed_argument_payload": "<tool_calls><tool_call>get_weather<arg_key>city</arg_key><arg_value>X</arg_value>JUNK"
                                 "</tool_call></tool_calls>",
    "unbalanced_arg_tags": "<tool_calls><tool_call>get_weather<arg_key>city</arg_key></tool_call></tool_calls>",
}
for _k, _out in _HY4_MALFORMED.items():
    case("hy_v4", f"test_strict_returns_raw_content_{_k}", _out, _out, tools=_HY4_TOOLS)
case("hy_v4", "test_structural_tokens_split_across_deltas",
     "hi<tool_calls>\n  " + _hy4_call("get_weather", [("city", "Beijing")]) + "</tool_calls>", "hi",
     [("get_weather", {"city": "Beijing"})], tools=_HY4_TOOLS)

# ------------------------------------------------------------------- gemma4
_GQ = '<|"|>'


def _g4(name: str, args: str) -> str:
    return f"<|tool_call>call:{name}{{{args}}}<tool_call|>"


case("gemma4", "test_no_tool_calls", "Hello, how can I help you today?", "Hello, how can I help you today?")
case("gemma4", "test_single_tool_call", _g4("get_weather", f"location:{_GQ}London{_GQ}"), "",
     [("get_weather", {"location": "London"})])
case("gemma4", "test_multiple_arguments", _g4("get_weather", f"location:{_GQ}San Francisco{_GQ},unit:{_GQ}celsius{_GQ}"),
     "", [("get_weather", {"location": "San Francisco", "unit": "celsius"})])
case("gemma4", "test_text_before_tool_call",
     "Let me check the weather for you. " + _g4("get_weather", f"location:{_GQ}Paris{_GQ}"),
     "Let me check the weather for you.", [("get_weather", {"location": "Paris"})])
case("gemma4", "test_multiple_tool_calls",
     _g4("get_weather", f"location:{_GQ}London{_GQ}") + _g4("get_time", f"location:{_GQ}London{_GQ}"), "",
     [("get_weather", {"location": "London"}), ("get_time", {"location": "London"})])
case("gemma4", "test_nested_arguments",
     _g4("complex_function", f"nested:{{inner:{_GQ}value{_GQ}}},list:[{_GQ}a{_GQ},{_GQ}b{_GQ}]"), "",
     [("complex_function", {"nested": {"inner": "value"}, "list": ["a", "b"]})])
case("gemma4", "test_tool_call_with_number_and_boolean", _g4("set_status", "is_active:true,count:42,score:3.14"), "",
     [("set_status", {"is_active": True, "count": 42, "score": 3.14})],
     differs="bare words without a schema type are decoded (42, true, null), as vLLM's own "
     "test expects; the installed vLLM 0.32 keeps them as text ('42', 'true', 'null')")
case("gemma4", "test_incomplete_tool_call", f"<|tool_call>call:get_weather{{location:{_GQ}London",
     f"<|tool_call>call:get_weather{{location:{_GQ}London",
     differs="a call cut off before <tool_call|> is content, as vLLM's own test expects; the "
     "installed vLLM 0.32 engine completes it as a call")
case("gemma4", "test_hyphenated_function_name", _g4("get-weather", f"location:{_GQ}London{_GQ}"), "",
     [("get-weather", {"location": "London"})])
case("gemma4", "test_dotted_function_name", _g4("weather.get", f"location:{_GQ}London{_GQ}"), "",
     [("weather.get", {"location": "London"})])
case("gemma4", "test_no_arguments", "<|tool_call>call:get_status{}<tool_call|>", "", [("get_status", {})])
case("gemma4", "test_parse_args_values",
     _g4("f", f"name:{_GQ}test{_GQ},count:42,active:true,score:3.14,param:null,"
              f"record_map:{{{_GQ}3{_GQ}:{_GQ}new text{_GQ}}},items:[{_GQ}a]b{_GQ},{_GQ}c{_GQ}],bare:[42,true,3.14]"),
     "", [("f", {"name": "test", "count": 42, "active": True, "score": 3.14, "param": None,
                 "record_map": {"3": "new text"}, "items": ["a]b", "c"], "bare": [42, True, 3.14]})],
     differs="bare words without a schema type are decoded (42, true, null), as vLLM's own "
     "test expects; the installed vLLM 0.32 keeps them as text ('42', 'true', 'null')")

# -------------------------------------------------------------------- glm47
_GLM_TOOLS = _HY_TOOLS  # get_current_date, get_weather(city, date)
case("glm47", "test_no_tool_call", "This is a plain response.", "This is a plain response.", tools=_GLM_TOOLS)
case("glm47", "test_zero_arg_inline", "<tool_call>get_current_date</tool_call>", "", [_DATE], tools=_GLM_TOOLS)
case("glm47", "test_zero_arg_newline", "<tool_call>get_current_date\n</tool_call>", "", [_DATE], tools=_GLM_TOOLS)
case("glm47", "test_args_same_line",
     "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value></tool_call>", "",
     [("get_weather", {"city": "Beijing"})], tools=_GLM_TOOLS)
case("glm47", "test_args_with_newlines",
     "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n</tool_call>", "",
     [("get_weather", {"city": "Beijing"})], tools=_GLM_TOOLS)
case("glm47", "test_content_before", "Checking.<tool_call>get_current_date</tool_call>", "Checking.", [_DATE],
     tools=_GLM_TOOLS)
case("glm47", "test_multiple",
     "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value></tool_call>"
     "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Shanghai</arg_value></tool_call>", "",
     [("get_weather", {"city": "Beijing"}), ("get_weather", {"city": "Shanghai"})], tools=_GLM_TOOLS)
case("glm47", "test_whitespace_content_none", "  \n  <tool_call>get_current_date</tool_call>", "", [_DATE],
     tools=_GLM_TOOLS)
case("glm47", "test_with_args_streaming",
     "<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Beijing</arg_value></tool_call>", "",
     [("get_weather", {"city": "Beijing"})], tools=_GLM_TOOLS)


# ===================================================================== Rust
# vLLM's Rust frontend (rust/src/chat/src/parser/tool/gemma4.rs, its tests module), named
# rust_<test>. The Rust parser decodes bare words (true, 42, null) as this one does.
def rust_case(parser: str, name: str, text: str, content: str, calls: list[tuple[str, Any]] | None = None,
              differs: str | None = None) -> None:
    c = ToolCase(parser, f"rust_{name}", text, content, calls or [], None)
    TOOL_CASES.append(c)
    if differs:
        DIFFERENCES[c.id] = differs


_BARE = ("bare words are decoded (as the Rust parser and vLLM's own current Python test do); the "
         "installed vLLM 0.32 keeps them as text")
rust_case("gemma4", "gemma4_parse_args_handles_scalars_and_nested_values",
          _g4("f", f"name:{_GQ}test{_GQ},count:42,active:true,score:114.514,nested:{{inner:{_GQ}value{_GQ}}},"
                   f"items:[{_GQ}a{_GQ},{_GQ}b{_GQ}]"), "",
          [("f", {"name": "test", "count": 42, "active": True, "score": 114.514, "nested": {"inner": "value"},
                  "items": ["a", "b"]})], differs=_BARE)
rust_case("gemma4", "gemma4_parse_array_handles_bare_values", _g4("f", "xs:[42,true,114.514]"), "",
          [("f", {"xs": [42, True, 114.514]})], differs=_BARE)
rust_case("gemma4", "gemma4_parse_complete_extracts_single_tool_call", _g4("get_weather", f"location:{_GQ}London{_GQ}"),
          "", [("get_weather", {"location": "London"})])
rust_case("gemma4", "gemma4_streaming_basic_single_tool_call", _g4("get_weather", f"location:{_GQ}Paris, France{_GQ}"),
          "", [("get_weather", {"location": "Paris, France"})])
rust_case("gemma4", "gemma4_streaming_text_before_and_after_tool_call",
          "Let me check the weather. " + _g4("get_weather", f"location:{_GQ}London{_GQ}") + "<div>",
          "Let me check the weather.<div>", [("get_weather", {"location": "London"})],
          differs="we keep the text after the call (as the Rust parser does) but drop the framing "
          "space before it; vLLM's Python parser drops the text after")
rust_case("gemma4", "gemma4_streaming_handles_boolean_split_across_chunks", _g4("search", "input:{all:true}"), "",
          [("search", {"input": {"all": True}})], differs=_BARE)
rust_case("gemma4", "gemma4_streaming_handles_false_split_across_chunks", _g4("set", "flag:false"), "",
          [("set", {"flag": False})], differs=_BARE)
rust_case("gemma4", "gemma4_streaming_handles_number_split_across_chunks", _g4("set", "count:42"), "",
          [("set", {"count": 42})], differs=_BARE)
rust_case("gemma4", "gemma4_streaming_handles_split_string_delimiter", _g4("todowrite", f"content:{_GQ}Buy milk{_GQ}"),
          "", [("todowrite", {"content": "Buy milk"})])
_HTML = ('<!DOCTYPE html>\n<html lang="zh-CN">\n<head>\n    <meta charset="UTF-8">\n    '
         '<meta name="viewport" content="width=device-width">\n')
rust_case("gemma4", "gemma4_streaming_handles_html_argument_without_duplication",
          _g4("write_file", f"path:{_GQ}index.html{_GQ},content:{_GQ}{_HTML}{_GQ}"), "",
          [("write_file", {"path": "index.html", "content": _HTML})])
rust_case("gemma4", "gemma4_streaming_trailing_bare_bool_is_not_duplicated",
          _g4("Edit", f"file_path:{_GQ}src/env.py{_GQ},old_string:{_GQ}old_val{_GQ},new_string:{_GQ}new_val{_GQ},"
                      "replace_all:false"), "",
          [("Edit", {"file_path": "src/env.py", "old_string": "old_val", "new_string": "new_val", "replace_all": False})],
          differs=_BARE)
rust_case("gemma4", "gemma4_finish_flushes_partial_start_marker_as_text", "<", "<")
rust_case("gemma4", "gemma4_finish_flushes_complete_args_without_end_marker", "<|tool_call>call:get_status{}", "",
          [("get_status", {})])


# glm47 (rust/src/chat/src/parser/tool/glm_xml/glm47_moe.rs tests; the tools' schemas as the
# Rust test_utils declares the parameters used)
def _glm47(name: str, params: list[tuple[str, str]]) -> str:
    return f"<tool_call>{name}" + "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in params) + "</tool_call>"


_RUST_GLM_TOOLS = [
    tool("get_weather", city={"type": "string"}, date={"type": "string"}),
    tool("add", x={"type": "integer"}, y={"type": "integer"}),
    tool("convert", whole={"type": "integer"}, flag={"type": "boolean"}, payload={"type": "object"},
         items={"type": "array"}, empty={"type": "string"}),
]


def _rust_glm(name: str, text: str, content: str, calls: list[tuple[str, Any]]) -> None:
    c = ToolCase("glm47", f"rust_{name}", text, content, calls, _RUST_GLM_TOOLS)
    TOOL_CASES.append(c)


_rust_glm("glm47_parse_complete_extracts_single_tool_call",
          "Let me search for that.\n" + _glm47("get_weather", [("city", "Beijing"), ("date", "2024-12-25")]),
          "Let me search for that.", [("get_weather", {"city": "Beijing", "date": "2024-12-25"})])
_rust_glm("glm47_streaming_extracts_multiple_tool_calls",
          _glm47("get_weather", [("city", "Shanghai")]) + _glm47("add", [("x", "1"), ("y", "2")]), "",
          [("get_weather", {"city": "Shanghai"}), ("add", {"x": 1, "y": 2})])
_rust_glm("glm47_parse_complete_converts_schema_types",
          _glm47("convert", [("whole", "42"), ("flag", "true"), ("payload", '{"nested":{"key":"value"}}'),
                             ("items", "[1, 2, 3]"), ("empty", "")]), "",
          [("convert", {"whole": 42, "flag": True, "payload": {"nested": {"key": "value"}}, "items": [1, 2, 3],
                        "empty": ""})])
_rust_glm("glm47_parse_complete_extracts_zero_argument_call", "<tool_call>add</tool_call>", "", [("add", {})])
