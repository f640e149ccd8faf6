"""Reasoning + tool parsing composed, on the real DeepSeek V4 tokenizer and template."""

from __future__ import annotations

import json
import random

import pytest

from vllm_pyfrontend.parsers.pipeline import make_assistant_stream
from vllm_pyfrontend.text.tokenizer import Tokenizer
from tests.parsers.harness import collect, random_token_groups, run_chunks, token_pieces

D = "｜DSML｜"
CALL = (
    f"<{D}tool_calls>\n"
    f'<{D}invoke name="get_weather">\n'
    f'<{D}parameter name="city" string="true">杭州</{D}parameter>\n'
    f'<{D}parameter name="days" string="false">3</{D}parameter>\n'
    f"</{D}invoke>\n"
    f"</{D}tool_calls>"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def prompt_ids(tok: Tokenizer, dsv4_dir: str) -> list[int]:
    from vllm_pyfrontend.chat.template import load_chat_template

    template = load_chat_template(dsv4_dir)
    assert template is not None
    text = template.render(
        [{"role": "user", "content": "Weather in Hangzhou?"}],
        tools=TOOLS,
        chat_template_kwargs={"thinking": True},
    )
    return tok.encode(text)


def stream(tok: Tokenizer, prompt_ids: list[int], kwargs=None):
    return lambda: make_assistant_stream(
        "deepseek_v4", "deepseek_v4", tok, prompt_ids, kwargs or {"thinking": True}, TOOLS
    )


def test_v4_reasoning_then_call(tok: Tokenizer, prompt_ids: list[int]) -> None:
    out = "The user wants 杭州's weather.\n</think>I'll check.\n\n" + CALL
    pieces, ids = token_pieces(tok, out)
    p = stream(tok, prompt_ids)()
    deltas = [p.feed(t, [i]) for t, i in zip(pieces, ids)] + [p.finish()]
    r, kept = collect(deltas)
    assert r.reasoning == "The user wants 杭州's weather."
    assert r.content == "I'll check."
    assert [(n, json.loads(a)) for n, a, _ in r.calls] == [
        ("get_weather", {"city": "杭州", "days": 3})
    ]
    assert p.n_tool_calls == 1
    assert p.reasoning_tokens == len(tok.encode("The user wants 杭州's weather.\n"))
    # reasoning is released while it streams, before the call exists
    first_call = next(k for k, d in enumerate(kept) if d.tool_calls)
    assert any(d.reasoning for d in kept[:first_call])
    rng = random.Random(5)
    for _ in range(200):
        texts, groups = random_token_groups(pieces, ids, rng)
        assert run_chunks(stream(tok, prompt_ids), texts, groups).key() == r.key()


def test_v4_call_inside_reasoning_ends_it(tok: Tokenizer, prompt_ids: list[int]) -> None:
    out = "Need the tool.\n\n" + CALL
    pieces, ids = token_pieces(tok, out)
    p = stream(tok, prompt_ids)()
    r, _ = collect([p.feed(t, [i]) for t, i in zip(pieces, ids)] + [p.finish()])
    assert r.reasoning == "Need the tool."
    assert r.content == ""
    assert [n for n, _, _ in r.calls] == ["get_weather"]
    # the call's tokens are not reasoning tokens (the "<" before ｜DSML｜ is
    # counted: the count stops at the first added token of the marker)
    assert p.reasoning_tokens == len(tok.encode("Need the tool.\n\n<"))


def _ordinary_ids(tok: Tokenizer, text: str) -> list[int]:
    """``text`` with every ｜DSML｜ spelt as ordinary tokens (｜ DSML ｜)."""
    bar = tok.encode("｜")
    assert len(bar) == 1 and tok.token_to_id("｜DSML｜") not in bar
    out: list[int] = []
    parts = text.split(D)
    for k, part in enumerate(parts):
        if k:
            out += bar + tok.encode("DSML") + bar
        out += tok.encode(part)
    return out


def test_lookalike_dsml_in_text_is_not_a_call(tok: Tokenizer) -> None:
    """A model quoting the DSML syntax with ordinary tokens writes the same text as
    a real call; with token ids the quote stays content and only the real call counts."""
    quote_ids = _ordinary_ids(tok, "The syntax is " + CALL + " - like that.")
    real_ids = tok.encode(CALL)
    ids = quote_ids + real_ids
    pieces = [tok.decode([i], skip_special_tokens=False) for i in ids]
    text = "".join(pieces)

    def make():
        return make_assistant_stream("deepseek_v4", "deepseek_v4", tok, None, {"thinking": False}, TOOLS)

    with_ids = run_chunks(make, pieces, [[i] for i in ids])
    assert with_ids.content == "The syntax is " + CALL + " - like that."
    assert len(with_ids.calls) == 1
    # text alone cannot tell them apart: the quote becomes a call too
    text_only = run_chunks(make, [text])
    assert len(text_only.calls) == 2


def test_no_parsers_is_plain_content(tok: Tokenizer) -> None:
    p = make_assistant_stream(None, None, tok, None, None, None)
    r, _ = collect([p.feed("<think>x</think>"), p.feed(CALL), p.finish()])
    assert r.content == "<think>x</think>" + CALL and not r.calls and not r.reasoning


def test_tool_only_and_reasoning_only(tok: Tokenizer) -> None:
    p = make_assistant_stream(None, "deepseek_v4", tok, None, None, TOOLS)
    r, _ = collect([p.feed("Hi " + CALL), p.finish()])
    assert r.content == "Hi" and len(r.calls) == 1
    p = make_assistant_stream("deepseek_r1", None, tok, None, None, None)
    r, _ = collect([p.feed("a</think>b " + CALL), p.finish()])
    assert (r.reasoning, r.content) == ("a", "b " + CALL)


def test_think_after_the_answer_began_is_text(tok: Tokenizer, prompt_ids: list[int]) -> None:
    """``<think>`` in the answer (code, prose, a tool argument) does not reopen
    reasoning; the call after it still parses."""
    call = CALL.replace("杭州", "<think>杭州")
    out = "r</think>Use <think> tags.\n" + call
    r = run_chunks(stream(tok, prompt_ids), list(out))
    assert r.reasoning == "r"
    assert r.content == "Use <think> tags."
    assert [(n, json.loads(a)) for n, a, _ in r.calls] == [
        ("get_weather", {"city": "<think>杭州", "days": 3})
    ]


def test_lookalike_dsml_inside_reasoning_stays_reasoning(tok: Tokenizer, prompt_ids: list[int]) -> None:
    """Reasoning that quotes the call syntax in ordinary tokens does not end
    reasoning; the real call after </think> is the only call."""
    quote = "I could write " + CALL + " but first"
    ids = _ordinary_ids(tok, quote) + tok.encode("</think>Ok.") + tok.encode(CALL)
    pieces = [tok.decode([i], skip_special_tokens=False) for i in ids]
    r = run_chunks(stream(tok, prompt_ids), pieces, [[i] for i in ids])
    assert r.reasoning == quote
    assert r.content == "Ok."
    assert len(r.calls) == 1
