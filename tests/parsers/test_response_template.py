"""`hf` parsers beyond the per-case differential (tests/parsers/cases/response_template.py): the
prompt prefix (what the chat template already wrote of the assistant message), streamed results
against vLLM's streamed results, arguments streaming before the call closes, and the template
checks at startup, all against vLLM's installed ResponseTemplateParser."""

from __future__ import annotations

import copy
import json
import random
import zlib
from types import SimpleNamespace

import pytest

from tests.parsers.cases.response_template import ERNIE, GEMMA4, GPT_OSS, HERMES, LONG, QWEN3_XML, TOOLS
from tests.parsers.harness import collect, random_char_splits, run_chunks
from vllm_pyfrontend.parsers.pipeline import make_assistant_stream
from vllm_pyfrontend.parsers.response_template import TemplateError, check_hf_selection, load_template


def _tok(template):
    return SimpleNamespace(tokenizer_config={"response_template": template})


def _ours(template, text, chunks=None, prompt="", reasoning=True, tools=True):
    make = lambda: make_assistant_stream("hf" if reasoning else None, "hf" if tools else None,  # noqa: E731
                                         _tok(template), tools=TOOLS, prompt_text=prompt)
    r = run_chunks(make, chunks if chunks is not None else [text])
    return r.reasoning, r.content, r.decoded_calls()  # (arguments are always a JSON object)


@pytest.fixture(scope="module")
def hf(dsv4_dir):
    from tests.parsers.vllm_ref import hf_tokenizer

    return hf_tokenizer(dsv4_dir)


def _vllm(hf, template, text, chunks=None, prompt="", reasoning=True, tools=True):
    from tests.parsers.vllm_ref import vllm_response_template

    return vllm_response_template(hf, template, TOOLS, text, reasoning=reasoning, tools_on=tools,
                                  prompt=prompt, chunks=chunks)


G = "<|turn>model\n"
# vLLM's test_streaming_prefill_is_state_only (Gemma 4): the prompt ends inside the message
PREFILL = [
    ("reasoning", G + "<|channel>thought\nprefill", " generated<channel|>", " generated", ""),
    ("content", G + "prefill ", "generated<turn|>", "", "generated"),
    ("empty_content", G + "prefill", "", "", ""),
    ("empty_tool_open", G + "<|tool_call>call:set_alarm", "", "", ""),
    ("empty_partial_delimiter", G + "<|chan", "", "", ""),
    ("unresolved_partial_delimiter", G + "<|chan", "nel", "", "nel"),
    ("completed_partial_delimiter", G + "<|chan", "nel>thought\nreason<channel|>", "reason", ""),
    # vLLM's prompt_state cases: reasoning opened by the prompt, and not
    ("prefilled_reasoning", G + "<|channel>thought\n", "continued reasoning<channel|>Final answer<turn|>",
     "continued reasoning", "Final answer"),
    ("direct_answer", G, "Direct answer without reasoning.<turn|>", "", "Direct answer without reasoning."),
    ("anchor_after_tool_response", G + "x<|tool_response>r<tool_response|>", "After the tool.<turn|>", "",
     "After the tool."),
]


@pytest.mark.parametrize("name, prompt, text, reasoning, content", PREFILL, ids=[p[0] for p in PREFILL])
def test_vllm_streaming_prefill_is_state_only(hf, name, prompt, text, reasoning, content):
    expected = (reasoning, content, [])
    assert _ours(GEMMA4, text, prompt=prompt) == expected
    assert _ours(GEMMA4, text, list(text) or [""], prompt=prompt) == expected
    assert _vllm(hf, GEMMA4, text, prompt=prompt) == expected


def test_qwen_prompt_opens_think(hf):
    prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"
    text = 'Plan.</think>Go.<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    expected = ("Plan.", "Go.", [("get_weather", {"city": "Oslo"})])
    assert _ours(HERMES, text, prompt=prompt) == expected == _vllm(hf, HERMES, text, prompt=prompt)


STREAMED = [
    (HERMES, '<think>a</think>b<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}'
             "</tool_call>c<|im_end|>"),
    (QWEN3_XML, "<think>x</think>y<tool_call><function=set_alarm><parameter=hour>7</parameter></function>"
                "</tool_call>"),
    (GEMMA4, '<|channel>thought\nplan<channel|><|tool_call>call:set_alarm{hour:7,label:<|"|>morning<|"|>}'
             "<tool_call|>"),
    (GPT_OSS, "<|channel|>analysis<|message|>hm<|end|><|channel|>commentary to=functions.write_file"
              '<|message|>{"path": "p"}<|call|>'),
    (ERNIE, "t</think><response>\nanswer\n</response>"),
]


@pytest.mark.parametrize("template, text", STREAMED, ids=["hermes", "qwen3_xml", "gemma4", "gpt_oss", "ernie"])
def test_streamed_like_vllm_streamed(hf, template, text):
    """vLLM's parse_delta, one character at a time and at random cuts, accumulated as a client
    does: the same reasoning, content and calls as ours under the same cuts."""
    rng = random.Random(7)
    for chunks in (list(text), random_char_splits(text, rng), random_char_splits(text, rng)):
        assert _ours(template, text, chunks) == _vllm(hf, template, text, chunks), chunks


def test_reasoning_only_and_tools_only(hf):
    text = STREAMED[0][1]
    for reasoning, tools in ((True, False), (False, True)):
        ours = _ours(HERMES, text, reasoning=reasoning, tools=tools)
        assert ours == _vllm(hf, HERMES, text, reasoning=reasoning, tools=tools)
    assert _ours(HERMES, text, reasoning=False, tools=True)[:2] == ("", "abc")


def test_arguments_stream_before_the_call_closes():
    call = {"name": "write_file", "arguments": {"path": "a.txt", "content": LONG * 3}}
    text = "<tool_call>" + json.dumps(call) + "</tool_call>"
    chunks = [text[i : i + 5] for i in range(0, len(text), 5)]
    p = make_assistant_stream(None, "hf", _tok(HERMES), tools=TOOLS)
    deltas = [p.feed(c) for c in chunks]
    before_close = [d for d in deltas[: -len("</tool_call>") // 5] if d is not None]
    args = [tc["function"]["arguments"] for d in before_close for tc in d.tool_calls if "id" not in tc]
    assert len(args) >= 10  # the long string flows as it is generated
    result, _ = collect(deltas + [p.finish()])
    assert result.calls[0][1] == json.dumps(call["arguments"], ensure_ascii=False)
    assert p.n_tool_calls == 1


def test_forced_tool_choice_replaces_the_template():
    """tool_choice required / named (vLLM refuses them with hf): the engine forces the call's
    JSON from the first token, so it goes to the forced parser even where the prompt opened
    <think> (the template would take it as reasoning)."""
    from vllm_pyfrontend.parsers.tool import forced_tool_parser

    for reasoning, tool in (("hf", "hf"), ("hf", None), (None, "hf")):
        p = make_assistant_stream(reasoning, tool, _tok(HERMES), tools=TOOLS,
                                  prompt_text="<|im_start|>assistant\n<think>\n")
        p.tool = forced_tool_parser("get_weather")
        result, _ = collect([p.feed('{"city": '), p.feed('"Rome"}'), p.finish()])
        assert (result.reasoning, result.content, result.decoded_calls()) == (
            "", "", [("get_weather", {"city": "Rome"})])
        assert p.n_tool_calls == 1


BAD_TEMPLATES = {
    "not_a_dict": [],
    "version": {"version": 2, "start_anchor": "a", "fields": {"content": {}}},
    "unknown_key": {"start_anchor": "a", "fields": {"content": {}}, "extra": 1},
    "no_fields": {"start_anchor": "a", "fields": {}},
    "no_anchor": {"fields": {"content": {}}},
    "two_implicit": {"start_anchor": "a", "fields": {"content": {}, "thinking": {}}},
    "bad_regex": {"start_anchor": "a", "fields": {"thinking": {"open_pattern": "(", "close": "b"}}},
    "both_open_kinds": {"start_anchor": "a", "fields": {"thinking": {"open": "x", "open_pattern": "x"}}},
    "unknown_parser": {"start_anchor": "a", "fields": {"tool_calls": {"open": "x", "content": "yaml"}}},
    "join_without_repeats": {"start_anchor": "a", "fields": {"content": {"join": ""}}},
    "captures_without_transform": {"start_anchor": "a", "fields": {"tool_calls": {"open_pattern": "(?P<n>x)"}}},
    "mixed_placeholder": {"start_anchor": "a", "fields": {"tool_calls": {"open": "x", "transform": "f({content})"}}},
    "empty_literal": {"start_anchor": "", "fields": {"content": {}}},
}


@pytest.mark.parametrize("spec", list(BAD_TEMPLATES.values()), ids=list(BAD_TEMPLATES))
def test_template_refused_as_vllm_refuses(spec):
    from vllm.parser.chat_parsing.response_templates import load_response_template

    with pytest.raises((ValueError, TypeError)):
        load_response_template(spec)
    with pytest.raises(TemplateError):
        load_template(spec)


def _variant(**fields):
    t = copy.deepcopy(HERMES)
    t["fields"].update(fields)
    return {**t, "fields": {k: v for k, v in t["fields"].items() if v is not None}}


STARTUP = [
    ("hf", None, None, "requires `response_template` metadata"),
    ("hf", "qwen3", HERMES, "cannot be combined"),
    ("hf", None, _variant(tool_calls=None), "requires a response_template with a tool_calls field"),
    (None, "hf", _variant(thinking=None), "requires a response_template with a thinking field"),
    ("hf", "hf", _variant(citations={"open": "<cite>", "close": "</cite>"}), "unsupported semantic fields"),
    ("hf", "hf", _variant(thinking={"open": "<t>", "close": "</t>", "content": "json"}), "cannot be streamed"),
    ("hf", "hf", {"fields": {}}, "Invalid response_template"),
]


@pytest.mark.parametrize("tool, reasoning, template, message", STARTUP, ids=[s[3][:24] for s in STARTUP])
def test_startup_checks_as_vllm(tool, reasoning, template, message):
    from vllm.parser.parser_manager import ParserManager

    vtok = SimpleNamespace(response_template=template, init_kwargs={})
    with pytest.raises((TypeError, ValueError), match=message.replace("`", ".")):
        ParserManager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                 enable_auto_tools=tool is not None, tokenizer=vtok)
    with pytest.raises(ValueError, match=message.replace("`", ".")):
        check_hf_selection(tool, reasoning, _tok(template) if template is not None else SimpleNamespace())
    check_hf_selection(None, None, None)  # no hf: nothing to check


def test_long_prompt_decodes_only_its_tail(tok):
    """A long prompt: the prefix from the tail's last start anchor is the whole decode's."""
    from vllm_pyfrontend.parsers.response_template import serving_template
    from vllm_pyfrontend.parsers.response_template.stream import _prefix

    template = serving_template(HERMES)
    history = "".join(f"<|im_start|>user\nquestion {i} é ✓<|im_end|>\n<|im_start|>assistant\nanswer {i}<|im_end|>\n"
                      for i in range(60))
    ids = tok.encode(history + "<|im_start|>user\nlast<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert len(ids) > 1000
    whole = tok.decode(ids, skip_special_tokens=False)
    cut = _prefix(tok, None, ids, template)
    assert len(cut) < 100 and whole.endswith(cut) and cut.startswith("<|im_start|>assistant\n")
    assert _ours(HERMES, "a</think>b", prompt=cut) == _ours(HERMES, "a</think>b", prompt=whole) == ("a", "b", [])


def _pieces(template: dict) -> list[str]:
    """Text pieces for random outputs: the template's delimiters, their prefixes, bodies."""
    out = ["a", "b c", "\n", " ", "é✓", "<", "</", "{", "}", '"', "Assistant:", "<|end|>",
           '{"name": "get_weather", "arguments": {"city": "Paris", "days": "2"}}', '{"city": "Rome"}',
           "{hour:7}", "<parameter=city>Oslo</parameter>", '{"name": "f"', "not json"]
    for f in template["fields"].values():
        for key in ("open", "close"):
            for lit in [f[key]] if isinstance(f.get(key), str) else f.get(key, []):
                out += [lit, lit[: max(1, len(lit) // 2)]]
    out += ["<|tool_call>call:set_alarm", "<|channel|>commentary to=functions.get_weather<|message|>",
            "<tool_call><function=get_weather>", "<think>", "</think>"]
    return out


@pytest.mark.parametrize("name, template", [("hermes", HERMES), ("qwen3_xml", QWEN3_XML), ("gemma4", GEMMA4),
                                            ("gpt_oss", GPT_OSS), ("ernie", ERNIE)])
def test_random_outputs_like_vllm(hf, name, template):
    """Random outputs built from the template's own delimiters (whole, partial) and bodies:
    the reasoning/content split is vLLM's exactly; with tools too, unless vLLM drops a tool
    region that does not parse (given back or completed here: the pinned difference); and
    ours is the same under random cuts."""
    from vllm.parser.chat_parsing import ResponseParser
    from vllm.parser.response_template import _streaming_template

    rng = random.Random(zlib.crc32(name.encode()))
    pieces = _pieces(template)
    served = _streaming_template(template)
    for _ in range(60):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        assert _ours(template, text, tools=False) == _vllm(hf, template, text, tools=False), text
        ours = _ours(template, text)
        assert _ours(template, text, random_char_splits(text, rng)) == ours, text
        if ours != _vllm(hf, template, text):
            p = ResponseParser(served, prefix="", tools=TOOLS)
            events = p.feed(text) + p.finalize()[1]
            tool_events = [e for e in events if e.get("field") == "tool_calls" and e["type"] != "region_chunk"]
            assert any(e["type"] == "region_malformed" for e in tool_events) or any(
                e["type"] == "region_close" and not _complete_calls(e["value"]) for e in tool_events
            ), text


def _complete_calls(value) -> bool:
    """vLLM emits the calls of this region value, and their arguments are JSON objects."""
    from vllm.parser.response_template import _to_tool_calls

    calls = _to_tool_calls(value)
    return bool(calls) and all(isinstance(_loads_or_none(a), dict) for _, a in calls)


def _loads_or_none(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None
