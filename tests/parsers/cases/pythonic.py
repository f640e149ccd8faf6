"""Pythonic call formats: pythonic, llama4_pythonic, olmo3, lfm2."""

from __future__ import annotations

from tests.parsers.cases import Calls, ToolCase
from tests.parsers.cases._builder import standard
from tests.parsers.corpus import ONE

# pythonic names must be identifiers in vLLM's regex ([a-zA-Z]+\w*): the unicode case
# keeps unicode in the values only
UNI: Calls = [("get_weather", {"city": "杭州 😀 Ünïcödé", "note": "ж \u2028 ｜ ▁ 'q' \"d\""})]


def py_calls(calls: Calls) -> list[str]:
    return [f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in calls]


def pythonic(calls: Calls) -> str:
    return "[" + ", ".join(py_calls(calls)) + "]"


def olmo3(calls: Calls) -> str:
    return "<function_calls>" + "\n".join(py_calls(calls)) + "</function_calls>"


def lfm2(calls: Calls) -> str:
    return "<|tool_call_start|>" + pythonic(calls) + "<|tool_call_end|>"


def _start_only(parser: str) -> list[ToolCase]:
    """Formats whose output *is* the call list: text before means no call."""
    one = pythonic(ONE)
    return [
        *standard(parser, pythonic, unicode=UNI, text_around=False,
                  broken="[get_weather(city: 'Paris')] tail"),
        ToolCase(parser, "text_before", "Sure. " + one, "Sure. " + one),
        ToolCase(parser, "text_after", one + "\n\nDone.", "Done.", ONE),
        ToolCase(parser, "json_literals", "[get_weather(city=null, days=true, flags=[false])]", "",
                 [("get_weather", {"city": None, "days": True, "flags": [False]})]),
        ToolCase(parser, "trailing_comma_tuple", "[search(flags=(1, 2,), city='a',)]", "",
                 [("search", {"flags": [1, 2], "city": "a"})]),
        ToolCase(parser, "dotted_name", "[api.search(city='x')]", "", [("api.search", {"city": "x"})]),
        ToolCase(parser, "positional_arg_is_content", "[get_weather('Paris')]", "[get_weather('Paris')]"),
    ]


TOOL_CASES = [
    *_start_only("pythonic"),
    *_start_only("llama4_pythonic"),
    ToolCase("llama4_pythonic", "python_start_wrapped",
             "<|python_start|>" + pythonic(ONE) + "<|python_end|>", "", ONE),
    *standard("olmo3", olmo3, unicode=UNI,
              broken="<function_calls>get_weather(city=Paris)</function_calls> tail"),
    ToolCase("olmo3", "json_literals", "<function_calls>get_weather(city=null, days=true)\n</function_calls>",
             "", [("get_weather", {"city": None, "days": True})]),
    *standard("lfm2", lfm2, unicode=UNI,
              broken="<|tool_call_start|>[get_weather(city=)]<|tool_call_end|> tail"),
    ToolCase("lfm2", "raw_newline_in_string",
             "<|tool_call_start|>[run_code(code='a\nb')]<|tool_call_end|>", "",
             [("run_code", {"code": "a\nb"})]),
]

_AFTER = "we keep text after the call list as content; vLLM parses the whole output as Python and gives it all back"
_DOTTED = ("a dotted function name is a call here (the name kept dotted, as vLLM's handle_single_tool would); "
           "vLLM's pattern check ([a-zA-Z]+\\w*\\() refuses it before that code is reached")
DIFFERENCES: dict[str, str] = {
    "tool:pythonic:text_after": _AFTER,
    "tool:llama4_pythonic:text_after": _AFTER,
    "tool:pythonic:dotted_name": _DOTTED,
    "tool:llama4_pythonic:dotted_name": _DOTTED,
    "tool:olmo3:text_before_after": "we keep text around <function_calls> as content; vLLM drops it",
    "tool:lfm2:text_before_after": "content keeps the model's own text between the parts (the whitespace "
                                   "next to the call is framing); vLLM re-joins the stripped parts with one newline",
}

EXTRA_TOKENS = ["<|tool_call_start|>", "<|tool_call_end|>", "<|python_start|>", "<|python_end|>",
                "<function_calls>", "</function_calls>"]  # fmt: skip
