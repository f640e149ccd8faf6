"""`hf` (tool and reasoning): the checkpoint's own response_template, on real checkpoints' templates.

The templates are the published ones re-expressed in the region language by Hugging Face's
transformers tests (tests/utils/test_chat_parsing.py) and vLLM's (tests/parser/
test_response_template.py, Gemma 4's metadata): a hermes-like one (SmolLM3/Qwen3 JSON in
``<tool_call>``, the content field closed by ``<|im_end|>``), Qwen3-Coder's XML parameters
(``xml-inline``), Gemma 4 (captured name, dialect JSON), gpt-oss (captured name, JSON body)
and ERNIE 4.5 (reasoning open from the start: a zero-width opener). Each case runs against
vLLM's ResponseTemplateParser with the same template (vllm_ref.vllm_response_template).
Cases named ``vllm_*`` / ``hf_*`` are vLLM's / transformers' own test outputs.
"""

from __future__ import annotations

from typing import Any

from tests.parsers.cases import ReasoningCase, ToolCase

HERMES: dict[str, Any] = {  # SmolLM3 (transformers' smollm_template)
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "thinking": {"open": "<think>", "close": "</think>", "content": "text"},
        "tool_calls": {
            "open": "<tool_call>", "close": "</tool_call>", "repeats": True, "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close": "<|im_end|>", "content": "text"},
    },
}  # fmt: skip

QWEN3_XML: dict[str, Any] = {  # Qwen3-Coder (transformers' qwen3_template)
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "thinking": {"open": "<think>", "close": "</think>", "content": "text"},
        "tool_calls": {
            "open_pattern": r"<tool_call>\s*<function=(?P<name>\w+)>",
            "close": "</tool_call>", "repeats": True, "content": "xml-inline",
            "content_args": {
                "tag_pattern": r"<parameter=(?P<key>\w+)>\s*(?P<value>.*?)\s*</parameter>",
                "value_parser": {"name": "json", "args": {"allow_non_json": True}},
            },
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
    },
}  # fmt: skip

GEMMA4: dict[str, Any] = {  # Gemma 4 instruction checkpoints (vLLM's GEMMA4_RESPONSE_TEMPLATE)
    "defaults": {"role": "assistant"},
    "start_anchor": ["<|turn>model\n", "<tool_response|>"],
    "fields": {
        "content": {"close": ["<turn|>", "<|tool_response>", "<eos>"], "content": "text"},
        "thinking": {"open": "<|channel>thought\n", "close": "<channel|>", "content": "text"},
        "tool_calls": {
            "open_pattern": r"<\|tool_call>call:(?P<name>\w+)", "close": "<tool_call|>",
            "repeats": True, "content": "json",
            "content_args": {"string_delims": [['<|"|>', '<|"|>']], "unquoted_keys": True},
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
    },
}  # fmt: skip

GPT_OSS: dict[str, Any] = {  # gpt-oss (transformers' gpt_oss_template)
    "defaults": {"role": "assistant"},
    "start_anchor": "<|start|>assistant",
    "fields": {
        "thinking": {"open": "<|channel|>analysis<|message|>", "close": "<|end|>", "content": "text"},
        "content": {"open": "<|channel|>final<|message|>", "close": "<|end|>", "content": "text"},
        "tool_calls": {
            "open_pattern": r"<\|channel\|>commentary to=functions\.(?P<name>\w+).*?<\|message\|>",
            "close": "<|call|>", "repeats": True, "content": "json",
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
    },
}  # fmt: skip

ERNIE: dict[str, Any] = {  # ERNIE 4.5 thinking (transformers' ernie_template)
    "defaults": {"role": "assistant"},
    "start_anchor": "Assistant:",
    "fields": {
        "thinking": {"open_pattern": r"(?:^|<think>\s*)", "close": "</think>", "content": "text"},
        "content": {"open": "<response>\n", "close_pattern": r"\n?</response>", "content": "text"},
        "tool_calls": {
            "open": "<tool_call>", "close": "</tool_call>", "repeats": True, "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
    },
}  # fmt: skip


def _fn(name: str, props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}


TOOLS = [
    _fn("get_weather", {"city": {"type": "string"}, "unit": {"type": "string"}, "days": {"type": "integer"}}),
    _fn("set_alarm", {"hour": {"oneOf": [{"type": "integer"}, {"type": "null"}]}, "label": {"type": "string"}}),
    _fn("configure", {"enabled": {"type": "boolean"}, "ratio": {"type": "number"},
                      "label": {"type": "string"}, "value": {"type": ["string", "null"]}}),
    _fn("write_file", {"path": {"type": "string"}, "content": {"type": "string"}}),
    _fn("complex_function", {"nested": {"type": "object"}, "list": {"type": "array", "items": {"type": "string"}}}),
]  # fmt: skip

LONG = "line one of the file\n" * 4 + 'with "quotes", a tab\t and é ✓'


def _t(template: dict, name: str, text: str, content: str, calls: list | None = None) -> ToolCase:
    return ToolCase("hf", name, text, content, calls or [], tools=TOOLS, template=template)


def _r(template: dict, name: str, text: str, reasoning: str, content: str) -> ReasoningCase:
    return ReasoningCase("hf", name, text, reasoning, content, template=template)


W = {"city": "Paris"}
TOOL_CASES = [
    # hermes-like (SmolLM3 / Qwen3 JSON): arguments stream
    _t(HERMES, "hermes_no_call", "Just an answer.<|im_end|>", "Just an answer."),
    _t(HERMES, "hermes_one_call", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
       "", [("get_weather", W)]),
    _t(HERMES, "hermes_text_before_and_thinking",
       '<think>Check it.</think>Let me look.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
       "</tool_call><|im_end|>", "Check it.Let me look.\n", [("get_weather", W)]),
    _t(HERMES, "hermes_parallel",
       '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
       '<tool_call>{"name": "set_alarm", "arguments": {"hour": 7, "label": "up"}}</tool_call>',
       "\n", [("get_weather", W), ("set_alarm", {"hour": 7, "label": "up"})]),
    _t(HERMES, "hermes_schema_casts_strings",
       '<tool_call>{"name": "configure", "arguments": {"enabled": "true", "ratio": "2.5", "label": "7",'
       ' "value": "null"}}</tool_call>',
       "", [("configure", {"enabled": True, "ratio": 2.5, "label": "7", "value": None})]),
    _t(HERMES, "hermes_nested_escaped_unicode",
       '<tool_call>{"name": "complex_function", "arguments": {"nested": {"a": [1, {"b": "x\\"y"}]},'
       ' "list": ["é", "\\u2713"]}}</tool_call>',
       "", [("complex_function", {"nested": {"a": [1, {"b": 'x"y'}]}, "list": ["é", "✓"]})]),
    _t(HERMES, "hermes_long_string_argument",
       '<tool_call>{"name": "write_file", "arguments": {"path": "a.txt", "content": '
       + __import__("json").dumps(LONG) + "}}</tool_call>",
       "", [("write_file", {"path": "a.txt", "content": LONG})]),
    _t(HERMES, "hermes_arguments_before_name",
       '<tool_call>{"arguments": {"city": "Paris"}, "name": "get_weather"}</tool_call>', "", [("get_weather", W)]),
    _t(HERMES, "hermes_empty_arguments", '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
       "", [("get_weather", {})]),
    _t(HERMES, "hermes_text_after_call",
       '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>Done.<|im_end|>',
       "Done.", [("get_weather", W)]),
    # malformed: vLLM drops the region; here it is content (or, once announced, completed)
    _t(HERMES, "hermes_malformed_json", '<tool_call>{"name": "get_weather", oops}</tool_call>',
       '<tool_call>{"name": "get_weather", oops}</tool_call>'),
    _t(HERMES, "hermes_arguments_not_an_object",
       '<tool_call>{"name": "get_weather", "arguments": "Paris"}</tool_call>',
       '<tool_call>{"name": "get_weather", "arguments": "Paris"}</tool_call>'),
    _t(HERMES, "hermes_truncated_in_arguments", '<tool_call>{"name": "get_weather", "arguments": {"city": "Par',
       "", [("get_weather", {"city": "Par"})]),
    # Qwen3-Coder's XML parameters
    _t(QWEN3_XML, "xml_one_call",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
       "</parameter>\n</function>\n</tool_call>",
       "", [("get_weather", {"city": "Paris", "days": 3})]),
    _t(QWEN3_XML, "xml_thinking_text_and_two_calls",
       "<think>Two things.</think>On it.<tool_call><function=get_weather><parameter=city>Oslo</parameter>"
       "</function></tool_call><tool_call><function=set_alarm><parameter=hour>7</parameter>"
       "<parameter=label>wake up</parameter></function></tool_call>",
       "Two things.On it.", [("get_weather", {"city": "Oslo"}), ("set_alarm", {"hour": 7, "label": "wake up"})]),
    _t(QWEN3_XML, "xml_object_parameter",
       "<tool_call><function=complex_function><parameter=nested>{\"k\": [1, 2]}</parameter>"
       "<parameter=list>[\"a\"]</parameter></function></tool_call>",
       "", [("complex_function", {"nested": {"k": [1, 2]}, "list": ["a"]})]),
    _t(QWEN3_XML, "xml_no_call", "Plain text, <b>tags</b> and all.", "Plain text, <b>tags</b> and all."),
    # gpt-oss: the opener captures the name, the body is the arguments object
    # no implicit field: text outside the fields is dropped (the header between messages)
    _t(GPT_OSS, "gptoss_analysis_then_call",
       "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
       'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": "2"}<|call|>',
       "Need weather.", [("get_weather", {"city": "Paris", "days": 2})]),
    _t(GPT_OSS, "gptoss_final_only", "<|channel|>final<|message|>Hi there.<|end|>", "Hi there."),
    _t(GPT_OSS, "gptoss_long_argument",
       "<|channel|>commentary to=functions.write_file<|message|>{\"path\": \"p\", \"content\": "
       + __import__("json").dumps(LONG) + "}<|call|>",
       "", [("write_file", {"path": "p", "content": LONG})]),
    # Gemma 4 (vLLM's tests)
    _t(GEMMA4, "vllm_content", "Hello<turn|>", "Hello"),
    _t(GEMMA4, "vllm_tool",
       '<|channel>thought\nplan<channel|><|tool_call>call:set_alarm{hour:7,label:<|"|>morning<|"|>}<tool_call|>',
       "plan", [("set_alarm", {"hour": 7, "label": "morning"})]),
    _t(GEMMA4, "vllm_multiple_tools",
       '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,unit:<|"|>celsius<|"|>}<tool_call|>'
       '<|tool_call>call:set_alarm{hour:7,label:<|"|>morning<|"|>}<tool_call|>',
       "", [("get_weather", {"city": "Paris", "unit": "celsius"}), ("set_alarm", {"hour": 7, "label": "morning"})]),
    _t(GEMMA4, "vllm_nested_arguments",
       '<|tool_call>call:complex_function{nested:{inner:<|"|>value<|"|>},list:[<|"|>a<|"|>,<|"|>b<|"|>]}<tool_call|>',
       "", [("complex_function", {"nested": {"inner": "value"}, "list": ["a", "b"]})]),
    _t(GEMMA4, "vllm_keeps_decoded_nullable_values",
       "<|tool_call>call:configure{enabled:false,ratio:5.0,label:null,value:null}<tool_call|>",
       "", [("configure", {"enabled": False, "ratio": 5.0, "label": None, "value": None})]),
    _t(GEMMA4, "vllm_preserves_content_after_tool_call",
       '<|tool_call>call:set_alarm{hour:7,label:<|"|>morning<|"|>}<tool_call|>Done.<turn|>',
       "Done.", [("set_alarm", {"hour": 7, "label": "morning"})]),
    _t(GEMMA4, "vllm_unknown_call_is_forwarded",
       '<|tool_call>call:unknown{hour:7,label:<|"|>morning<|"|>}<tool_call|>',
       "", [("unknown", {"hour": 7, "label": "morning"})]),
    # vLLM drops these regions; here they are content
    _t(GEMMA4, "vllm_drops_incomplete_call", '<|tool_call>call:get_weather{city:<|"|>London',
       '<|tool_call>call:get_weather{city:<|"|>London'),
    _t(GEMMA4, "vllm_grammar_excludes_hyphenated_name",
       '<|tool_call>call:get-weather{city:<|"|>London<|"|>}<tool_call|>',
       '<|tool_call>call:get-weather{city:<|"|>London<|"|>}<tool_call|>'),
    # ERNIE 4.5: thinking opens at the start of the output (a zero-width opener)
    _t(ERNIE, "hf_ernie_with_tools",
       "Paris it is.\n</think>\n\n"
       '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n</s>',
       "Paris it is.\n", [("get_weather", W)]),
]  # fmt: skip

REASONING_CASES = [
    _r(HERMES, "hermes_both", "<think>I think</think>Answer.<|im_end|>", "I think", "Answer."),
    _r(HERMES, "hermes_none", "Answer only.", "", "Answer only."),
    _r(HERMES, "hermes_open_at_end", "<think>still thinking", "still thinking", ""),
    _r(HERMES, "hermes_end_only_is_content", "thought</think>Answer.", "", "thought</think>Answer."),
    _r(HERMES, "hermes_tool_region_is_content",
       '<think>t</think><tool_call>{"name": "f"}</tool_call>', "t", '<tool_call>{"name": "f"}</tool_call>'),
    _r(QWEN3_XML, "xml_both", "<think>\nsteps\n</think>\n\nThe answer.", "\nsteps\n", "\n\nThe answer."),
    _r(GPT_OSS, "gptoss_channels",
       "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Done.<|end|>",
       "Think.", "Done."),
    _r(GEMMA4, "vllm_reasoning", "<|channel>thought\nplan<channel|>The answer is 42.<turn|>", "plan",
       "The answer is 42."),
    _r(GEMMA4, "vllm_content", "Hello<turn|>", "", "Hello"),
    _r(ERNIE, "hf_ernie_thinking_then_response",
       "Think first.\n</think>\n\n<response>\nThe answer.\n</response>", "Think first.\n", "The answer."),
]  # fmt: skip

DIFFERENCES = {
    "tool:hf:hermes_malformed_json": "a tool region that does not parse is given back as content (vLLM drops "
                                     "it, and the text with it)",
    "tool:hf:hermes_truncated_in_arguments": "the call was announced while its arguments streamed; cut off, it is "
                                             "completed with valid JSON (vLLM streams nothing before the region "
                                             "closes, and drops it)",
    "tool:hf:hermes_arguments_not_an_object": "arguments that are not a JSON object are not a call: given back as "
                                              "content (vLLM passes the string on as the arguments text)",
    "tool:hf:vllm_drops_incomplete_call": "a tool region that does not parse is given back as content (vLLM drops it)",
    "tool:hf:vllm_grammar_excludes_hyphenated_name": "the opener does not match `get-weather`: the JSON body does "
                                                      "not parse; given back as content (vLLM drops it)",
}
