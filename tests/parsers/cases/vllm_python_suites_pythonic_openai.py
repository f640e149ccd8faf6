"""vLLM's own parser tests for the pythonic and gpt-oss names, converted to cases (model output -> calls).

Sources (vllm-project/vllm): tests/tool_parsers/test_pythonic_tool_parser.py,
test_llama4_pythonic_tool_parser.py, test_olmo3_tool_parser.py, test_openai_tool_parser.py.
Only what checks an output -> result mapping converts (not regex timeouts, logging, structural
tags). Case names: vllm_<test name>[_<param id>].
"""

from __future__ import annotations

from typing import Any

from tests.parsers.cases import ToolCase

SIMPLE = "get_weather(city='San Francisco', metric='celsius')"
SIMPLE_CALL = ("get_weather", {"city": "San Francisco", "metric": "celsius"})
MORE = ("register_user(name='John Doe', age=37, address={'city': 'San Francisco', 'state': 'CA'}, "
        "role=None, passed_test=True, aliases=['John', 'Johnny'])")
MORE_JSON_LITERALS = MORE.replace("None", "null").replace("True", "true")
MORE_CALL = ("register_user", {"name": "John Doe", "age": 37, "address": {"city": "San Francisco", "state": "CA"},
                               "role": None, "passed_test": True, "aliases": ["John", "Johnny"]})
PARAMLESS, PARAMLESS_CALL = "get_weather()", ("get_weather", {})
EMPTY_DICT, EMPTY_DICT_CALL = "do_something_cool(additional_data={})", ("do_something_cool", {"additional_data": {}})
EMPTY_LIST, EMPTY_LIST_CALL = "do_something_cool(steps=[])", ("do_something_cool", {"steps": []})
ESCAPED = r"""get_weather(city='Martha\'s Vineyard', metric='\"cool units\"')"""
ESCAPED_CALL = ("get_weather", {"city": "Martha's Vineyard", "metric": '"cool units"'})

_PY_TESTS: list[tuple[str, str, list[tuple[str, Any]]]] = [
    ("simple", SIMPLE, [SIMPLE_CALL]),
    ("more_types", MORE, [MORE_CALL]),
    ("parameterless", PARAMLESS, [PARAMLESS_CALL]),
    ("empty_dict", EMPTY_DICT, [EMPTY_DICT_CALL]),
    ("empty_list", EMPTY_LIST, [EMPTY_LIST_CALL]),
    ("escaped_string", ESCAPED, [ESCAPED_CALL]),
]


def _pythonic(parser: str) -> list[ToolCase]:
    out = [ToolCase(parser, "vllm_test_no_tool_call", "How can I help you today?", "How can I help you today?")]
    for name, text, calls in _PY_TESTS:
        out.append(ToolCase(parser, f"vllm_test_tool_call_{name}", f"[{text}]", "", calls))
    out.append(ToolCase(parser, "vllm_test_tool_call_parallel_calls", f"[{SIMPLE}, {MORE}]", "",
                        [SIMPLE_CALL, MORE_CALL]))
    out.append(ToolCase(parser, "vllm_test_streaming_tool_call_with_large_steps",
                        f"[{SIMPLE}, {PARAMLESS}, {EMPTY_LIST}]", "", [SIMPLE_CALL, PARAMLESS_CALL, EMPTY_LIST_CALL]))
    bad = f"[bad(x=b'z'), {SIMPLE}]"
    out.append(ToolCase(parser, "vllm_test_bad_sibling_call_does_not_drop_good_calls", bad, bad))
    return out


def _olmo3() -> list[ToolCase]:
    w = lambda s: f"<function_calls>{s}</function_calls>"  # noqa: E731
    out = [ToolCase("olmo3", "vllm_test_no_tool_call", "How can I help you today?", "How can I help you today?")]
    for name, text, calls in _PY_TESTS:
        out.append(ToolCase("olmo3", f"vllm_test_tool_call_{name}", w(text), "", calls))
    out += [
        ToolCase("olmo3", "vllm_test_tool_call_more_types_json_literals", w(MORE_JSON_LITERALS), "", [MORE_CALL]),
        ToolCase("olmo3", "vllm_test_tool_call_parallel_calls", w(f"{SIMPLE}\n{MORE}"), "", [SIMPLE_CALL, MORE_CALL]),
        ToolCase("olmo3", "vllm_test_streaming_tool_call_with_large_steps", w(f"{SIMPLE}\n{PARAMLESS}\n{EMPTY_LIST}"),
                 "", [SIMPLE_CALL, PARAMLESS_CALL, EMPTY_LIST_CALL]),
        ToolCase("olmo3", "vllm_test_streaming_mismatched_brackets_reported_once", w("foo(x=1])"), w("foo(x=1])")),
    ]
    bad = w(f"bad(x=b'z')\n{SIMPLE}")
    out.append(ToolCase("olmo3", "vllm_test_bad_sibling_call_does_not_drop_good_calls", bad, bad))
    return out


# ------------------------------------------------------------------------- openai (harmony)
def _harmony_text(messages: list[Any]) -> str:
    """The model's part of a rendered conversation (the prompt ends with <|start|>assistant)."""
    from vllm_pyfrontend.parsers.harmony import harmony_encoding

    enc = harmony_encoding()
    text = "".join(enc.decode(enc.render(m)) for m in messages)
    return text.removeprefix("<|start|>assistant")


def _openai() -> list[ToolCase]:
    from openai_harmony import Message, Role

    A = Role.ASSISTANT
    analysis = Message.from_role_and_content(A, 'User asks: "What is the weather in Tokyo?" We need a tool.') \
        .with_channel("analysis")

    def call(recipient: str, args: str, content_type: str | None = "json") -> Any:
        m = Message.from_role_and_content(A, args).with_channel("commentary").with_recipient(recipient)
        return m.with_content_type(content_type) if content_type else m

    tokyo = {"location": "Tokyo"}
    return [
        ToolCase("openai", "vllm_test_extract_tool_calls_no_tools",
                 _harmony_text([Message.from_role_and_content(A, "This is a test").with_channel("final")]),
                 "This is a test"),
        ToolCase("openai", "vllm_test_extract_tool_calls_single_tool",
                 _harmony_text([analysis, call("functions.get_current_weather", '{"location": "Tokyo"}')]), "",
                 [("get_current_weather", tokyo)]),
        ToolCase("openai", "vllm_test_extract_tool_calls_single_tool_newlines",
                 _harmony_text([analysis, call("functions.get_current_weather", '{\n"location": "Tokyo"\n}')]), "",
                 [("get_current_weather", tokyo)]),
        # (the test's two non-JSON arguments, "foo" and "", are left out: not JSON objects)
        ToolCase("openai", "vllm_test_extract_tool_calls_multiple_tools",
                 _harmony_text([analysis, call("functions.get_current_weather", '{"location": "Tokyo"}'),
                                call("functions.get_user_location", '{"location": "Tokyo"}'),
                                call("functions.no_content_type", '{"location": "Tokyo"}', None),
                                call("functions.empty_args", "{}")]), "",
                 [("get_current_weather", tokyo), ("get_user_location", tokyo), ("no_content_type", tokyo),
                  ("empty_args", {})]),
        ToolCase("openai", "vllm_test_extract_tool_calls_with_content",
                 _harmony_text([analysis, call("functions.get_current_weather", '{"location": "Tokyo"}'),
                                Message.from_role_and_content(A, "This tool call will get the weather.")
                                .with_channel("final")]),
                 "This tool call will get the weather.", [("get_current_weather", tokyo)]),
    ]


TOOL_CASES = [*_pythonic("pythonic"), *_pythonic("llama4_pythonic"), *_olmo3(), *_openai()]

DIFFERENCES: dict[str, str] = {}


# ------------------------------------------- common_tests.ToolParserTestConfig (phi4, longcat)
VARIOUS_ARGS = {"string_field": "hello", "int_field": 42, "float_field": 3.14, "bool_field": True,
                "null_field": None, "array_field": ["a", "b", "c"], "object_field": {"nested": "value"},
                "empty_array": [], "empty_object": {}}
VARIOUS_JSON = """{
  "name": "test_function",
  "arguments": {
    "string_field": "hello",
    "int_field": 42,
    "float_field": 3.14,
    "bool_field": true,
    "null_field": null,
    "array_field": ["a", "b", "c"],
    "object_field": {"nested": "value"},
    "empty_array": [],
    "empty_object": {}
  }
}"""
ESCAPED_JSON = """{
  "name": "test_function",
  "arguments": {
    "quoted": "He said \\"hello\\"",
    "path": "C:\\\\Users\\\\file.txt",
    "newline": "line1\\nline2",
    "unicode": "emoji: 🎉"
  }
}"""
ESCAPED_ARGS = {"quoted": 'He said "hello"', "path": "C:\\Users\\file.txt", "newline": "line1\nline2",
                "unicode": "emoji: 🎉"}
TOKYO = ("get_weather", {"city": "Tokyo"})
TIME = ("get_time", {"timezone": "Asia/Tokyo"})
NO_CALLS = "This is a regular response without any tool calls."


def _common(parser: str, wrap: Any, parallel: str, surrounding: str, surrounding_content: str,
            malformed: list[str]) -> list[ToolCase]:
    single = '{"name": "get_weather", "arguments": {"city": "Tokyo"}}'
    out = [
        ToolCase(parser, "vllm_test_no_tool_calls", NO_CALLS, NO_CALLS),
        ToolCase(parser, "vllm_test_single_tool_call_simple_args", wrap(single), "", [TOKYO]),
        ToolCase(parser, "vllm_test_parallel_tool_calls", parallel, "", [TOKYO, TIME]),
        ToolCase(parser, "vllm_test_various_data_types", wrap(VARIOUS_JSON), "", [("test_function", VARIOUS_ARGS)]),
        ToolCase(parser, "vllm_test_empty_arguments", wrap('{"name": "refresh", "arguments": {}}'), "",
                 [("refresh", {})]),
        ToolCase(parser, "vllm_test_surrounding_text", surrounding, surrounding_content, [TOKYO]),
        ToolCase(parser, "vllm_test_escaped_strings", wrap(ESCAPED_JSON), "", [("test_function", ESCAPED_ARGS)]),
    ]
    out += [ToolCase(parser, f"vllm_test_malformed_input_{i}", m, m) for i, m in enumerate(malformed)]
    return out


def _phi4() -> list[ToolCase]:
    return _common(
        "phi4_mini_json", lambda j: f"functools[{j}]",
        """functools[
  {"name": "get_weather", "arguments": {"city": "Tokyo"}},
  {"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}
]""",
        'Let me check the weather for you.\nfunctools[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]\n'
        "Would you like to know more?",
        "Let me check the weather for you.\nWould you like to know more?",
        ['functools[{"name": "func", "arguments": {', 'functools[{"name": "func", "arguments": "not a dict"}]',
         'functools{"name": "func"}', "functools[] This is just text", "functools[ This is just text ]"],
    ) + [ToolCase("phi4_mini_json", "vllm_test_malformed_input_missing_arguments", 'functools[{"name": "func"}]', "",
                  [("func", {})])]


def _longcat() -> list[ToolCase]:
    w = lambda j: f"<longcat_tool_call>{j}</longcat_tool_call>"  # noqa: E731
    return _common(
        "longcat", w,
        w('{"name": "get_weather", "arguments": {"city": "Tokyo"}}') + "\n"
        + w('{"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}'),
        "Let me check the weather for you.\n" + w('{"name": "get_weather", "arguments": {"city": "Tokyo"}}')
        + "\nHere is the result.",
        "Let me check the weather for you.\nHere is the result.",
        ['<longcat_tool_call>{"name": "func", "arguments": {',
         '<longcat_tool_call>{"name": "func", "arguments": "not a dict"}</longcat_tool_call>',
         "Some text with <longcat_tool_call>invalid json"],
    )


# ----------------------------------------------------------------------------- seed_oss
_SEED_BARCELONA = ("<seed:tool_call>\n<function=get_weather>\n<parameter=location>Barcelona, Spain</parameter>\n"
                   "</function>\n</seed:tool_call>")
_SEED_THINK = ("<seed:think>The user's current thinking budget is 512.</seed:cot_budget_reflect>\nLet me analyze "
               "the question.\n<seed:cot_budget_reflect>I have used 131 tokens, and there are 381 tokens remaining "
               "for use.</seed:cot_budget_reflect>\n The unit parameter can be omitted since it's optional."
               "</seed:think>\n")
SEED_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string"}, "unit": {"type": "string"}},
    "required": ["location"]}}}]


def _seed() -> list[ToolCase]:
    return [
        ToolCase("seed_oss", "vllm_test_extract_tool_calls_no_tools", "This is a test response without any tool calls",
                 "This is a test response without any tool calls"),
        ToolCase("seed_oss", "vllm_test_extract_tool_calls_tool_call_0_thinking_budget", _SEED_BARCELONA, "",
                 [("get_weather", {"location": "Barcelona, Spain"})], tools=SEED_TOOLS),
        ToolCase("seed_oss", "vllm_test_extract_tool_calls_tool_call_512_thinking_budget",
                 _SEED_THINK + _SEED_BARCELONA, _SEED_THINK.rstrip(),
                 [("get_weather", {"location": "Barcelona, Spain"})], tools=SEED_TOOLS),
    ]


TOOL_CASES += [*_phi4(), *_longcat(), *_seed()]


_NOT_OBJECT = "arguments that are not a JSON object are not a call here (the output comes back as content)"
_LOSES = "malformed output comes back as content here; vLLM returns nothing"
DIFFERENCES.update({
    "tool:phi4_mini_json:vllm_test_various_data_types": "vLLM's non-greedy functools\\[(.*?)\\] stops at the "
                                                        "first ']' inside the arguments (xfail in vLLM's own test)",
    "tool:phi4_mini_json:vllm_test_surrounding_text": "we keep the text around the call; vLLM drops it",
    "tool:phi4_mini_json:vllm_test_malformed_input_1": _NOT_OBJECT,
    "tool:phi4_mini_json:vllm_test_malformed_input_3": _LOSES,
    "tool:phi4_mini_json:vllm_test_malformed_input_4": _LOSES,
    "tool:phi4_mini_json:vllm_test_malformed_input_missing_arguments": "a call object without arguments is a call "
                                                                       "with {} here (as for hermes); vLLM gives "
                                                                       "the text back",
    "tool:longcat:vllm_test_surrounding_text": "we keep text after the call; vLLM (hermes) drops it",
    "tool:longcat:vllm_test_malformed_input_1": _NOT_OBJECT,
    "tool:seed_oss:vllm_test_extract_tool_calls_tool_call_512_thinking_budget": (
        "vLLM's seed_oss tool parser also consumes the <seed:think> markers; here they belong to the reasoning "
        "parser, so the tool parser alone leaves the thinking text (markers included) in the content"),
})


# --------------------------------------------------------------------------------- xlam
_DALLAS = '{"name": "get_current_weather", "arguments": {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}}'
_ORLANDO = '{"name": "get_current_weather", "arguments": {"city": "Orlando", "state": "FL", "unit": "fahrenheit"}}'
_DALLAS_CALL = ("get_current_weather", {"city": "Dallas", "state": "TX", "unit": "fahrenheit"})
_ORLANDO_CALL = ("get_current_weather", {"city": "Orlando", "state": "FL", "unit": "fahrenheit"})


def _xlam() -> list[ToolCase]:
    x = "xlam"
    think = "<think>I'll help you with that.</think>"
    return [
        ToolCase(x, "vllm_test_extract_tool_calls_no_tools", "This is a test", "This is a test"),
        ToolCase(x, "vllm_test_extract_tool_calls_parallel_tool_calls", f"[{_DALLAS}, {_ORLANDO}]", "",
                 [_DALLAS_CALL, _ORLANDO_CALL]),
        ToolCase(x, "vllm_test_extract_tool_calls_single_tool_with_think_tag", f"{think}[{_DALLAS}]",
                 f"{think}[{_DALLAS}]"),
        ToolCase(x, "vllm_test_extract_tool_calls_single_tool_with_json_code_block",
                 f"I'll help you with that.\n```json\n[{_DALLAS}]\n```", f"I'll help you with that.\n```json\n[{_DALLAS}]\n```"),
        ToolCase(x, "vllm_test_extract_tool_calls_single_tool_with_tool_calls_tag",
                 f"I'll check the weather for you.[TOOL_CALLS][{_DALLAS}]",
                 f"I'll check the weather for you.[TOOL_CALLS][{_DALLAS}]"),
        ToolCase(x, "vllm_test_extract_tool_calls_single_tool_with_tool_call_xml_tags",
                 f"I'll help you check the weather.<tool_call>[{_DALLAS}]</tool_call>",
                 f"I'll help you check the weather.<tool_call>[{_DALLAS}]</tool_call>"),
        ToolCase(x, "vllm_test_extract_tool_calls_list_structure",
                 '[{"name": "get_current_weather", "arguments": {"city": "Seattle", "state": "WA", "unit": "celsius"}}]',
                 "", [("get_current_weather", {"city": "Seattle", "state": "WA", "unit": "celsius"})]),
        # the streaming test's outputs (calls at the start of the output)
        ToolCase(x, "vllm_test_streaming_single_tool_with_json_code_block", f"```json\n[{_DALLAS}]\n```", "",
                 [_DALLAS_CALL]),
        ToolCase(x, "vllm_test_streaming_single_tool_with_tool_calls_tag", f"[TOOL_CALLS][{_DALLAS}]", "",
                 [_DALLAS_CALL]),
    ]


TOOL_CASES += _xlam()
_XLAM_START = ("xlam calls are taken only at the start of the output (after a reasoning parser has taken "
               "the thinking): prose or a <think> block before them leaves everything as content; vLLM also "
               "finds a call array after text in a code block, after [TOOL_CALLS] or in <tool_call>")
DIFFERENCES.update({f"tool:xlam:vllm_test_extract_tool_calls_{k}": _XLAM_START for k in (
    "single_tool_with_think_tag", "single_tool_with_json_code_block", "single_tool_with_tool_calls_tag",
    "single_tool_with_tool_call_xml_tags")})


# ------------------------------------------ minimax_m3: the Rust parser's documented example
# (vllm-project/vllm rust/src/tool-parser/src/minimax_m3.rs, the doc comment's order)
_NS = "]<]minimax[>["


def _el(name: str, body: str) -> str:
    return f"{_NS}<{name}>{body}{_NS}</{name}>"


ORDER_TOOLS = [{"type": "function", "function": {"name": "create_order", "parameters": {
    "type": "object", "properties": {
        "user_id": {"type": "integer"},
        "shipping": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}}},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": "integer"}}}}}}}}]
_ORDER = (f'{_NS}<tool_call>\n{_NS}<invoke name="create_order">\n' + _el("user_id", "42") + "\n"
          + _el("shipping", "\n" + _el("city", "Singapore") + "\n" + _el("zip", "018956") + "\n") + "\n"
          + _el("items", "\n" + _el("item", "\n" + _el("sku", "book-001") + "\n" + _el("qty", "2") + "\n") + "\n")
          + f"\n{_NS}</invoke>\n{_NS}</tool_call>")
TOOL_CASES.append(ToolCase(
    "minimax_m3", "vllm_rust_create_order_doc_example", _ORDER, "",
    [("create_order", {"user_id": 42, "shipping": {"city": "Singapore", "zip": 18956},
                       "items": [{"sku": "book-001", "qty": 2}]})], tools=ORDER_TOOLS))


# ---------------------------------------------------------------------------------- step3
# (tests/tool_parsers/test_step3_tool_parser.py: the common_tests config and the whitespace tests)
_B, _E, _CB, _CE, _SEP = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>", "<｜tool_call_begin｜>", "<｜tool_call_end｜>", \
    "<｜tool_sep｜>"


def _s3_invoke(name: str, params: list[tuple[str, str]]) -> str:
    ps = "".join(f'<steptml:parameter name="{k}">{v}</steptml:parameter>' for k, v in params)
    return f'<steptml:invoke name="{name}">{ps}</steptml:invoke>'


STEP3_TOOLS = [{"type": "function", "function": {"name": "edit_file", "parameters": {
    "type": "object", "properties": {"old_string": {"type": "string"}, "indent": {"type": "integer"},
                                     "enabled": {"type": "boolean"}}}}}]


def _step3() -> list[ToolCase]:
    p = "step3"
    single = f"{_B}{_CB}{_s3_invoke('get_weather', [('city', 'Tokyo')])}{_CE}{_E}"
    out = [
        ToolCase(p, "vllm_test_no_tool_calls", NO_CALLS, NO_CALLS),
        ToolCase(p, "vllm_test_single_tool_call_simple_args", single, "", [TOKYO]),
        ToolCase(p, "vllm_test_parallel_tool_calls",
                 f"{_B}{_CB}{_s3_invoke('get_weather', [('city', 'Tokyo')])}{_CE}{_SEP}"
                 f"{_CB}{_s3_invoke('get_time', [('timezone', 'Asia/Tokyo')])}{_CE}{_E}", "", [TOKYO, TIME]),
        ToolCase(p, "vllm_test_empty_arguments", f"{_B}{_CB}{_s3_invoke('refresh', [])}{_CE}{_E}", "",
                 [("refresh", {})]),
        ToolCase(p, "vllm_test_surrounding_text",
                 f"Let me check the weather for you.\n\n{single}\n\nI'll get that information.",
                 "Let me check the weather for you.\n\nI'll get that information.", [TOKYO]),
        ToolCase(p, "vllm_test_escaped_strings",
                 f"{_B}{_CB}" + _s3_invoke("test_function", [("quoted", 'He said "hello"'),
                                                            ("path", "C:\\Users\\file.txt"),
                                                            ("newline", "line1\nline2")]) + f"{_CE}{_E}", "",
                 [("test_function", {"quoted": 'He said "hello"', "path": "C:\\Users\\file.txt",
                                     "newline": "line1\nline2"})]),
        ToolCase(p, "vllm_test_malformed_input_0", f'{_B}{_CB}<steptml:invoke name="func">',
                 f'{_B}{_CB}<steptml:invoke name="func">'),
        ToolCase(p, "vllm_test_malformed_input_1", f'{_CB}<steptml:invoke name="func"></steptml:invoke>{_CE}',
                 f'{_CB}<steptml:invoke name="func"></steptml:invoke>{_CE}'),
    ]
    for i, value in enumerate(["    if x:", "return 1\n", "    if x:\n        return 1\n", "hello ", "hello\u00a0",
                               "hello"]):
        text = (f"{_B}{_CB}function{_SEP}edit_file\n" + _s3_invoke(
            "edit_file", [("old_string", value), ("indent", " 4 "), ("enabled", " true ")]) + f"{_CE}{_E}")
        out.append(ToolCase(p, f"vllm_test_string_value_preserved_{i}", text, "",
                            [("edit_file", {"old_string": value, "indent": 4, "enabled": True})], tools=STEP3_TOOLS))
    return out


TOOL_CASES += _step3()
_S3_BUG = ("the call has no function<｜tool_sep｜> header; the installed vLLM then finds no call (its own test "
           "marks this xfail: 'Step3 parser non-streaming has bugs')")
DIFFERENCES.update({f"tool:step3:vllm_test_{k}": _S3_BUG for k in (
    "single_tool_call_simple_args", "parallel_tool_calls", "empty_arguments", "surrounding_text",
    "escaped_strings")})
DIFFERENCES.update({f"tool:step3:vllm_test_string_value_preserved_{i}": (
    "string values keep their whitespace, as vLLM's newer step3 test asks (TestStep3ParameterWhitespace); "
    "the installed vLLM strips them") for i in range(5)})


# ----------------------------------------------------------------------------- minimax_m3
# (tests/tool_parsers/test_minimax_m3_tool_parser.py)
M3_TOOLS = [{"type": "function", "function": {"name": "create_order", "parameters": {
    "type": "object", "properties": {
        "user_id": {"type": "integer"}, "urgent": {"type": "boolean"}, "note": {"type": "string"},
        "shipping": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}}},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": "integer"}}}},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "duplicate_demo": {"type": "object"}}}}}]
_M3_ORDER = (
    f"{_NS}<tool_call>\n" f'{_NS}<invoke name="create_order">'
    + _el("user_id", "42") + _el("urgent", "true") + _el("note", "Please leave at front desk.")
    + _el("shipping", _el("city", "Singapore") + _el("zip", "018956"))
    + _el("items", _el("item", _el("sku", "book-001") + _el("qty", "2"))
          + _el("item", _el("sku", "pen-007") + _el("qty", "5")))
    + _el("metadata", _el("source", "mobile") + _el("campaign", "may-launch"))
    + _el("duplicate_demo", _el("tag", "a") + _el("tag", "b"))
    + f"{_NS}</invoke>\n{_NS}</tool_call>")
_M3_ORDER_ARGS = {"user_id": 42, "urgent": True, "note": "Please leave at front desk.",
                  "shipping": {"city": "Singapore", "zip": 18956},
                  "items": [{"sku": "book-001", "qty": 2}, {"sku": "pen-007", "qty": 5}],
                  "metadata": {"source": "mobile", "campaign": "may-launch"}, "duplicate_demo": {"tag": ["a", "b"]}}


def _m3_inv(user_id: int) -> str:
    return f'{_NS}<invoke name="create_order">' + _el("user_id", str(user_id)) + f"{_NS}</invoke>"


TOOL_CASES += [
    ToolCase("minimax_m3", "vllm_test_non_streaming_nested_tool_call", "I will create it.\n" + _M3_ORDER,
             "I will create it.", [("create_order", _M3_ORDER_ARGS)], tools=M3_TOOLS),
    ToolCase("minimax_m3", "vllm_test_non_streaming_without_tool_call_keeps_content", "plain response",
             "plain response", tools=M3_TOOLS),
    ToolCase("minimax_m3", "vllm_test_non_streaming_multiple_tool_calls",
             f"{_NS}<tool_call>\n{_m3_inv(1)}\n{_m3_inv(2)}\n{_NS}</tool_call>", "",
             [("create_order", {"user_id": 1}), ("create_order", {"user_id": 2})], tools=M3_TOOLS),
    ToolCase("minimax_m3", "vllm_test_streaming_flushes_partial_tool_start_as_text", f"plain {_NS}<tool_ca",
             f"plain {_NS}<tool_ca", tools=M3_TOOLS),
]


# ----------------------------------------------------------------------------------- lfm2
# (tests/tool_parsers/test_lfm2_tool_parser.py)
def _lfm2() -> list[ToolCase]:
    w = lambda t, after="": f"<|tool_call_start|>[{t}]<|tool_call_end|>" + (f"\n{after}" if after else "")  # noqa: E731
    cand = ("get_candidate_status", {"candidate_id": "12345"})
    cand_out = "get_candidate_status(candidate_id='12345')"
    tests = [
        ("simple", w(cand_out), [cand], ""),
        ("more_types", w(MORE), [MORE_CALL], ""),
        ("parameterless", w(PARAMLESS), [PARAMLESS_CALL], ""),
        ("empty_dict", w(EMPTY_DICT), [EMPTY_DICT_CALL], ""),
        ("empty_list", w(EMPTY_LIST), [EMPTY_LIST_CALL], ""),
        ("escaped_string", w(ESCAPED), [ESCAPED_CALL], ""),
        ("parallel_calls", w(f"{cand_out}, {MORE}"), [cand, MORE_CALL], ""),
        # (the newline after the block is kept: only whitespace-only runs next to a call are framing)
        ("content_after_tool_call", w(cand_out, "Checking the current status of candidate ID 12345."), [cand],
         "\nChecking the current status of candidate ID 12345."),
        ("dotted_name", w("grocery.orderIngredients(ingredientList=[{'name': 'Lasagna noodles', 'amount': 250, "
                          "'unit': 'g'}], deliveryAddress='845 Willow Lane, Springfield, IL 62704')"),
         [("grocery.orderIngredients", {"ingredientList": [{"name": "Lasagna noodles", "amount": 250, "unit": "g"}],
                                        "deliveryAddress": "845 Willow Lane, Springfield, IL 62704"})], ""),
        ("bracket_in_string", w("exec(command='grep -F \"]\" log.txt')"),
         [("exec", {"command": 'grep -F "]" log.txt'})], ""),
        ("multiline_string_arg", w("exec(command='cat > f.py << EOF\nimport csv\nprint(1)\nEOF')"),
         [("exec", {"command": "cat > f.py << EOF\nimport csv\nprint(1)\nEOF"})], ""),
        ("set_arg", w("label(tags={'urgent', 'bug'})"), [("label", {"tags": ["urgent", "bug"]})], ""),
        ("leading_zero_int", w("set_date(month=07, day=05)"), [("set_date", {"month": 7, "day": 5})], ""),
        ("nul_byte_string_arg", w("exec(command='printf a\x00b')"), [("exec", {"command": "printf a\x00b"})], ""),
        ("nested_quote", w("bash(command='sed -n '360,450p' /testbed/sympy/matrices/common.py')"), None, None),
    ]
    out = [ToolCase("lfm2", "vllm_test_no_tool_call", "How can I help you today?", "How can I help you today?")]
    for name, text, calls, content in tests:
        if calls is None:  # not parsed here: given back as content
            out.append(ToolCase("lfm2", f"vllm_test_tool_call_{name}", text, text))
        else:
            out.append(ToolCase("lfm2", f"vllm_test_tool_call_{name}", text, content, calls))
    out += [
        ToolCase("lfm2", "vllm_test_empty_tool_call_block", "<|tool_call_start|>[]<|tool_call_end|>",
                 "<|tool_call_start|>[]<|tool_call_end|>"),
        ToolCase("lfm2", "vllm_test_whitespace_after_start_token", f"<|tool_call_start|> [{cand_out}]<|tool_call_end|>",
                 "", [cand]),
        ToolCase("lfm2", "vllm_test_streaming_tool_call_with_large_steps",
                 w(f"{cand_out}, {PARAMLESS}, {EMPTY_LIST}"), "", [cand, PARAMLESS_CALL, EMPTY_LIST_CALL]),
    ]
    return out


TOOL_CASES += _lfm2()
DIFFERENCES["tool:lfm2:vllm_test_tool_call_nested_quote"] = (
    "unescaped quotes of the same kind inside a string are not Python: the block comes back as content; "
    "vLLM rewrites the text, guessing where the string ends")


# --------------------------------------------------------------------------------- plamo3
# (tests/tool_parsers/test_plamo3_tool_parser.py; the outputs end before <|plamo:tag|>, the stop token
# the engine ends generation at, except in the two cases about it)
_PL = "<|plamo:"
_PL_REQS, _PL_REQS_END = f"{_PL}begin_tool_requests:plamo|>", f"{_PL}end_tool_requests:plamo|>"
_PL_EOT = f"{_PL}tag|>"


def _pl_call(name: str, args: str) -> str:
    return (f"{_PL}begin_tool_request:plamo|>{_PL}begin_tool_name:plamo|>{name}{_PL}end_tool_name:plamo|>"
            f"{_PL}begin_tool_arguments:plamo|>{_PL}constrain|>json{_PL}msg|>{args}{_PL}end_tool_arguments:plamo|>"
            f"{_PL}end_tool_request:plamo|>")


def _plamo3() -> list[ToolCase]:
    p = "plamo3"
    incomplete = "Before tools." + _PL_REQS + f"{_PL}begin_tool_request:plamo|>{_PL}begin_tool_name:plamo|>broken"
    return [
        ToolCase(p, "vllm_test_extract_tool_calls_regular", "Regular response", "Regular response"),
        ToolCase(p, "vllm_test_extract_tool_calls_eot_ignored", f"Regular response{_PL_EOT}ignored",
                 f"Regular response{_PL_EOT}ignored"),
        ToolCase(p, "vllm_test_extract_tool_calls_partial_marker", f"Answer{_PL}begin_", f"Answer{_PL}begin_"),
        ToolCase(p, "vllm_test_extract_tool_calls_content_and_call",
                 "Checking the weather." + _PL_REQS + _pl_call("get_weather", '{"city": "Tokyo"}') + _PL_REQS_END,
                 "Checking the weather.", [("get_weather", {"city": "Tokyo"})]),
        ToolCase(p, "vllm_test_extract_tool_calls_two_calls",
                 _PL_REQS + _pl_call("echo", '{"text": "hi"}') + _pl_call("sum", '{"a": 1, "b": 2}') + _PL_REQS_END,
                 "", [("echo", {"text": "hi"}), ("sum", {"a": 1, "b": 2})]),
        ToolCase(p, "vllm_test_extract_tool_calls_rejects_incomplete_request", incomplete, incomplete),
    ]


TOOL_CASES += _plamo3()
DIFFERENCES.update({
    "tool:plamo3:vllm_test_extract_tool_calls_eot_ignored": (
        "<|plamo:tag|> is the stop token: the engine ends generation there, so this parser never sees text "
        "after it and does not look for it; vLLM's parser also drops what follows"),
    "tool:plamo3:vllm_test_extract_tool_calls_rejects_incomplete_request": (
        "a truncated call block comes back as content; vLLM drops it (keeps only the text before)"),
})


# ------------------------------------------------------------------------------- minicpm5
# (tests/tool_parsers/test_minicpm5xml_tool_parser.py; the tokenizer-space (\u0120) and collapsed-tag
# repairs and the alias/wrapper remapping are not converted: not done here)
def _mc_tool(name: str, props: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": props, "required": required}}}


MC_WEATHER = [_mc_tool("get_weather", {"city": {"type": "string"}, "date": {"type": "string"}}, ["city"])]
MC_SUM = [_mc_tool("sum_values", {"nums": {"type": "array"}, "exact": {"type": "boolean"}}, ["nums"])]
MC_NOOP = [_mc_tool("noop", {"note": {"type": "string"}}, [])]


def _minicpm5() -> list[ToolCase]:
    p = "minicpm5"
    shanghai = ('<function name="get_weather"><param name="city">上海</param>'
                '<param name="date">2024-06-27</param></function>')
    interleaved = ('Head\n<function name="get_weather"><param name="city">北京</param></function>\nTXT\n'
                   '<function name="sum_values"><param name="nums">[7,8,9]</param><param name="exact">false</param>'
                   '</function>\nTail\n')
    missing_end = '<function name="get_weather"><param name="city">北京</param>'
    no_name = '<function name="get_weather"><param>北京</param><param name="date">2024-06-27</param></function>\n'
    dup = ('<function name="get_weather"><param name="city">北京</param><param name="city">上海</param>'
           '</function>\n')
    return [
        ToolCase(p, "vllm_test_no_tool_call", "How can I help you?", "How can I help you?", tools=MC_WEATHER),
        ToolCase(p, "vllm_test_single_call_with_surrounding_text", f"Intro before.\n{shanghai}\nOutro after.\n",
                 "Intro before.\nOutro after.\n", [("get_weather", {"city": "上海", "date": "2024-06-27"})],
                 tools=MC_WEATHER),
        ToolCase(p, "vllm_test_cdata_multiline",
                 '<function name="get_weather"><param name="city"><![CDATA[北\n京]]></param>'
                 '<param name="date">2024-06-27</param></function>\n', "",
                 [("get_weather", {"city": "北\n京", "date": "2024-06-27"})], tools=MC_WEATHER),
        ToolCase(p, "vllm_test_non_string_types",
                 '<function name="sum_values"><param name="nums">[1, 2, 3]</param><param name="exact">true</param>'
                 '</function>\n', "", [("sum_values", {"nums": [1, 2, 3], "exact": True})], tools=MC_SUM),
        ToolCase(p, "vllm_test_multiple_calls_interleaved_text", interleaved, "Head\nTXT\nTail\n",
                 [("get_weather", {"city": "北京"}), ("sum_values", {"nums": [7, 8, 9], "exact": False})],
                 tools=MC_WEATHER + MC_SUM),
        ToolCase(p, "vllm_test_incomplete_missing_function_end", missing_end, missing_end, tools=MC_WEATHER),
        ToolCase(p, "vllm_test_param_missing_name_invalid", no_name, no_name, tools=MC_WEATHER),
        ToolCase(p, "vllm_test_duplicate_param_names_invalid", dup, dup, tools=MC_WEATHER),
        ToolCase(p, "vllm_test_no_required_and_zero_param_valid", '<function name="noop"></function>\n', "",
                 [("noop", {})], tools=MC_NOOP),
        ToolCase(p, "vllm_test_unknown_tool_block_preserved",
                 '<function name="unknown"><param name="x">1</param></function>\n', "", [("unknown", {"x": 1})],
                 tools=MC_WEATHER),
    ]


TOOL_CASES += _minicpm5()
DIFFERENCES.update({
    "tool:minicpm5:vllm_test_single_call_with_surrounding_text": "we keep the text around calls; vLLM returns "
                                                                 "no content when there are calls",
    "tool:minicpm5:vllm_test_multiple_calls_interleaved_text": "we keep the text around calls; vLLM returns "
                                                               "no content when there are calls",
    "tool:minicpm5:vllm_test_unknown_tool_block_preserved": "a call to a function the request did not list is "
                                                            "still a call here (as for every format); vLLM's "
                                                            "minicpm5 parser gives it back as text",
})


# ---------------------------------------------------------------------------- poolside_v1
# (tests/tool_parsers/test_poolside_v1_tool_parser.py: the output -> call tests)
PS_WRITE = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"content": {"type": "string"}, "mode": {"type": "integer"}},
    "required": ["content"]}}}]
PS_WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def _poolside() -> list[ToolCase]:
    p = "poolside_v1"
    code = "    def f():\n        return 1\n"
    # 512 spaces, not vLLM test's 4096: the installed vLLM 0.32's regex takes ~80 s on 4096 (the
    # quadratic case its newer test guards against); ours is linear either way
    padded = "<tool_call>" + " " * 512 + "<x</tool_call>"
    spaced = "<tool_call>  get weather  <arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"
    return [
        ToolCase(p, "vllm_test_string_arg_preserves_whitespace",
                 f"<tool_call>write_file\n<arg_key>content</arg_key>\n<arg_value>{code}</arg_value>\n</tool_call>",
                 "", [("write_file", {"content": code})], tools=PS_WRITE),
        ToolCase(p, "vllm_test_non_string_arg_still_deserialized",
                 "<tool_call>write_file\n<arg_key>content</arg_key>\n<arg_value>hi</arg_value>\n"
                 "<arg_key>mode</arg_key>\n<arg_value> 420 </arg_value>\n</tool_call>", "",
                 [("write_file", {"content": "hi", "mode": 420})], tools=PS_WRITE),
        ToolCase(p, "vllm_test_no_newline_after_name_non_streaming",
                 "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>", "",
                 [("get_weather", {"city": "Paris"})], tools=PS_WEATHER),
        ToolCase(p, "vllm_test_newline_after_name_still_parses_non_streaming",
                 "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>", "",
                 [("get_weather", {"city": "Paris"})], tools=PS_WEATHER),
        ToolCase(p, "vllm_test_whitespace_padded_tool_call_is_not_quadratic", padded, padded, tools=PS_WEATHER),
        ToolCase(p, "vllm_test_whitespace_only_tool_call_name_is_rejected", "<tool_call>   </tool_call>",
                 "<tool_call>   </tool_call>", tools=PS_WEATHER),
        ToolCase(p, "vllm_test_function_name_with_internal_whitespace_still_parses", spaced, spaced,
                 tools=PS_WEATHER),
    ]


TOOL_CASES += _poolside()
DIFFERENCES["tool:poolside_v1:vllm_test_function_name_with_internal_whitespace_still_parses"] = (
    "a function name with spaces is not a name here (the call comes back as text); vLLM calls 'get weather'")
DIFFERENCES["tool:poolside_v1:vllm_test_whitespace_only_tool_call_name_is_rejected"] = (
    "a call without a name comes back as text (vLLM's newer test asks the same); the installed vLLM emits a "
    "call with an empty name")
