"""Format details beyond the shared corpus: ids, variants, value typing, registry."""

from __future__ import annotations

import json

import pytest

from vllm_pyfrontend.parsers.tool import get_tool_parser, register_tool_parser, tool_parser_names
from vllm_pyfrontend.parsers.tool.json_calls import Hermes
from tests.parsers.corpus import TOOLS
from tests.parsers.harness import run_chunks, run_whole

D = "｜DSML｜"


def calls(name: str, text: str, tools=TOOLS):
    r = run_whole(lambda: get_tool_parser(name, None, tools), text)
    return r.content, [(n, json.loads(a)) for n, a, _ in r.calls], [i for _, _, i in r.calls]


def test_registry() -> None:
    names = set(tool_parser_names())
    assert {
        "hermes", "qwen3_xml", "qwen3_coder", "deepseek_v3", "deepseek_v31", "deepseek_v32",
        "deepseek_v4", "llama3_json", "mistral", "kimi_k2", "glm45", "minimax_m2",
    } <= names  # fmt: skip
    with pytest.raises(KeyError, match="unknown tool parser"):
        get_tool_parser("nope")
    register_tool_parser("my_hermes", lambda tools: Hermes())
    assert calls("my_hermes", '<tool_call>{"name": "f", "arguments": {}}</tool_call>')[1] == [("f", {})]


def test_call_ids() -> None:
    _, _, ids = calls("hermes", '<tool_call>{"name": "f", "arguments": {}}</tool_call>' * 2)
    assert all(i.startswith("call_") and len(i) == 29 for i in ids) and ids[0] != ids[1]
    kimi = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:7"
        '<|tool_call_argument_begin|>{"city": "x"}<|tool_call_end|><|tool_calls_section_end|>'
    )
    assert calls("kimi_k2", kimi)[2] == ["functions.get_weather:7"]  # the model's own id


def test_hermes_variants() -> None:
    # arguments double-encoded as a JSON string; "parameters" spelling
    text = '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>'
    assert calls("hermes", text)[1] == [("f", {"a": 1})]
    text = '<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>'
    assert calls("hermes", text)[1] == [("f", {"a": 1})]
    # arguments as the model wrote them: no re-serialisation
    text = '<tool_call>{"name": "f", "arguments": {"a":1,  "b":"\\u00e9"}}</tool_call>'
    r = run_whole(lambda: get_tool_parser("hermes"), text)
    assert r.calls[0][1] == '{"a":1,  "b":"\\u00e9"}'
    # unclosed at the end of output: accepted when the JSON is complete
    assert calls("hermes", '<tool_call>{"name": "f", "arguments": {}}')[1] == [("f", {})]
    # a non-object arguments value is not a call
    text = '<tool_call>{"name": "f", "arguments": [1]}</tool_call>'
    assert calls("hermes", text) == (text, [], [])


def test_dsml_variants_and_types() -> None:
    body = (
        f'<{D}invoke name="f">\n'
        f'<{D}parameter name="s" string="true">007</{D}parameter>\n'
        f'<{D}parameter name="n" string="false">007x</{D}parameter>\n'
        f'<{D}parameter name="o">{{"k": [1]}}</{D}parameter>\n'
        f"</{D}invoke>\n"
    )
    want = [("f", {"s": "007", "n": "007x", "o": {"k": [1]}})]
    for opening in ("tool_calls", "toolcalls", "tool"):
        text = f"<{D}{opening}>\n{body}</{D}tool_calls>"
        assert calls("deepseek_v4", text)[1] == want, opening
    assert calls("deepseek_v32", f"<{D}function_calls>\n{body}</{D}function_calls>")[1] == want
    # V3.2's wrapper is not V4's
    text = f"<{D}function_calls>\n{body}</{D}function_calls>"
    assert calls("deepseek_v4", text)[1] == []


def test_schema_typing_for_xml_formats() -> None:
    text = "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n<parameter=city>\n3\n</parameter>\n</function>\n</tool_call>"
    assert calls("qwen3_coder", text)[1] == [("get_weather", {"days": 3, "city": "3"})]
    assert calls("qwen3_coder", text, tools=[])[1] == [("get_weather", {"days": "3", "city": "3"})]


def test_mistral_variants() -> None:
    assert calls("mistral", '[TOOL_CALLS]f[CALL_ID]abc123456[ARGS]{"a": 1}')[1] == [("f", {"a": 1})]
    text = '[TOOL_CALLS] [{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]'
    assert calls("mistral", text)[1] == [("f", {"a": 1}), ("g", {})]


def test_marker_inside_json_string_does_not_close() -> None:
    text = '<tool_call>{"name": "f", "arguments": {"html": "</tool_call><tool_call>"}}</tool_call>'
    assert calls("hermes", text)[1] == [("f", {"html": "</tool_call><tool_call>"})]


def test_malformed_then_valid_call() -> None:
    """A broken section gives its marker back as text and the body is rescanned."""
    text = 'x <tool_call>{"oops"} <tool_call>{"name": "f", "arguments": {}}</tool_call>'
    content, got, _ = calls("hermes", text)
    assert got == [("f", {})]
    assert content == 'x <tool_call>{"oops"}'


def test_held_text_released_as_soon_as_it_cannot_be_a_marker() -> None:
    p = get_tool_parser("hermes")
    assert p.feed("a <tool") is not None  # "a" out, " <tool" held (whitespace, prefix)
    d = p.feed("box>")
    assert d is not None and d.content == " <toolbox>"
    assert p.finish() is None


def test_long_section_with_many_lookalike_end_markers() -> None:
    """A long argument fed 3 characters at a time, with the end marker inside
    its string 400 times: every false end is skipped, the call comes out whole."""
    code = "x = 1  # </tool_call> inside a string\\n" * 400
    text = f'<tool_call>{{"name": "f", "arguments": {{"code": "{code}"}}}}</tool_call>'
    chunks = [text[k : k + 3] for k in range(0, len(text), 3)]
    r = run_chunks(lambda: get_tool_parser("hermes"), chunks)
    assert r.decoded_calls() == [("f", {"code": code.replace("\\n", "\n")})]


def test_section_without_calls_is_text() -> None:
    """Found by fuzzing: ``[TOOL_CALLS][]`` called nothing and vanished."""
    text = "[TOOL_CALLS][] rest"
    assert calls("mistral", text) == (text, [], [])
    text = f"<{D}tool_calls>\n</{D}tool_calls>"
    assert calls("deepseek_v4", text) == (text, [], [])
