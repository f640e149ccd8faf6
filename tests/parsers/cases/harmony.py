"""gpt-oss harmony: tool parser ``openai`` and reasoning parser ``openai_gptoss``.

vLLM's registered classes for these names are stubs; the reference is its HarmonyParser
(tests/parsers/vllm_ref.py), run over the harmony encoding's tokens of the text.
"""

from __future__ import annotations

import json

from tests.parsers.cases import ReasoningCase, ToolCase
from tests.parsers.corpus import NESTED, ONE, PARALLEL, UNICODE

A = "<|channel|>analysis<|message|>"
S = "<|start|>assistant"


def call(name: str, args: dict, header_recipient: bool = False) -> str:
    body = json.dumps(args, ensure_ascii=False)
    if header_recipient:
        return f"{S} to=functions.{name}<|channel|>commentary <|constrain|>json<|message|>{body}<|call|>"
    return f"{S}<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{body}<|call|>"


def final(text: str) -> str:
    return f"{S}<|channel|>final<|message|>{text}<|return|>"


THINK = f"{A}The user wants the weather.<|end|>"

TOOL_CASES = [
    ToolCase("openai", "no_call", THINK + final("Hello! 1 < 2 {not json}"), "Hello! 1 < 2 {not json}"),
    ToolCase("openai", "single", THINK + call(*ONE[0]), "", ONE),
    ToolCase("openai", "parallel", THINK + "".join(call(n, a) for n, a in PARALLEL), "", PARALLEL),
    ToolCase("openai", "nested_escaped", THINK + call(*NESTED[0]), "", NESTED),
    ToolCase("openai", "empty_args", THINK + call("noop", {}), "", [("noop", {})]),
    ToolCase("openai", "unicode", THINK + call(*UNICODE[0]), "", UNICODE),
    ToolCase("openai", "recipient_in_header", THINK + call(*ONE[0], header_recipient=True), "", ONE),
    ToolCase("openai", "preamble_then_call",
             "<|channel|>commentary<|message|>Checking.<|end|>" + call(*ONE[0]), "Checking.", ONE),
    ToolCase("openai", "no_analysis_first", call(*ONE[0])[len(S):], "", ONE),
    ToolCase("openai", "builtin_tool_dropped",
             "<|channel|>analysis to=browser.search <|constrain|>json<|message|>{{\"q\": 1}}<|call|>", ""),
    ToolCase("openai", "two_finals_joined", final("One.") + final("Two."), "One.\nTwo."),
    ToolCase("openai", "not_harmony", "Plain text, no channels.", "Plain text, no channels."),
    # what is not harmony, as vLLM's HarmonyParser takes it: refused tokens (text after a
    # message's end, a stray stop token, a header that does not parse) skipped; a header cut
    # off by the end given back as content, decoded whole
    ToolCase("openai", "not_harmony_unicode", "a 杭州 😀 Ünïcödé", "a 杭州 😀 Ünïcödé"),
    ToolCase("openai", "text_after_end_skipped", final("Done.") + "x<|call|> more 杭州", "Done."),
    ToolCase("openai", "prose_header_skipped", "Let me check.\n\n" + THINK + call(*ONE[0]), "", ONE),
    ToolCase("openai", "header_cut_off", final("One.") + f"{S}<|chan", f"One.\n{S}<|chan"),
]

REASONING_CASES = [
    ReasoningCase("openai_gptoss", "both", THINK + final("Sunny."), "The user wants the weather.", "Sunny."),
    ReasoningCase("openai_gptoss", "reasoning_only", THINK, "The user wants the weather.", ""),
    ReasoningCase("openai_gptoss", "final_only", "<|channel|>final<|message|>Sunny.<|return|>", "", "Sunny."),
    ReasoningCase("openai_gptoss", "open_at_end", f"{A}Still thinking", "Still thinking", ""),
    ReasoningCase("openai_gptoss", "call_dropped", THINK + call(*ONE[0]), "The user wants the weather.", ""),
    ReasoningCase("openai_gptoss", "two_analysis_joined", f"{A}a<|end|>{S}{A}b<|end|>" + final("c"), "a\nb", "c"),
    ReasoningCase("openai_gptoss", "unicode", f"{A}杭州 😀<|end|>" + final("Ünïcödé ж"), "杭州 😀", "Ünïcödé ж"),
    ReasoningCase("openai_gptoss", "not_harmony", "Plain answer.", "", "Plain answer."),
    ReasoningCase("openai_gptoss", "not_harmony_unicode", "x 州", "", "x 州"),
    ReasoningCase("openai_gptoss", "text_after_end_skipped", f"{A}杭州<|end|>Done.", "杭州", ""),
]

DIFFERENCES: dict[str, str] = {}
