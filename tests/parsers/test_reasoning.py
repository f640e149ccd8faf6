"""Reasoning parsers: split, start state from the prompt, split invariance, vs vLLM."""

from __future__ import annotations

import random

import pytest

from vllm_pyfrontend.parsers.reasoning import get_reasoning_parser, reasoning_parser_names
from vllm_pyfrontend.parsers.reasoning.think import ThinkStyle, prompt_state
from vllm_pyfrontend.text.tokenizer import Tokenizer
from tests.parsers.harness import (
    random_char_splits,
    random_token_groups,
    run_chunks,
    run_whole,
    split_at,
    token_pieces,
)
from tests.sample_size import sample_size

PARSERS = ["deepseek_r1", "qwen3", "deepseek_v3", "deepseek_v4", "glm45", "kimi_k2", "minimax_m2"]

OUTPUTS = {
    "both": "<think>I think 杭州 😀</think>Answer.",
    "end_only": "I think\n</think>\n\nAnswer.",
    "none": "Just an answer.",
    "open": "<think>still thinking",
    "empty": "<think></think>Hi",
    "lookalike_text": "<think>a <b>tag</b> and </thin k> x</think>\n\n1 < 2",
    "partial_at_end": "<think>x</think>answer </thi",
    "multi_line": "<think>\nstep 1\nstep 2\n\n</think>\n\nThe answer is 42.\n",
}
KWARGS = {
    "default": None,
    "off": {"thinking": False, "enable_thinking": False},
    "on": {"thinking": True, "enable_thinking": True},
}
# Random character splits and random token groupings per output, on top of its every two-way
# split and its one-character stream (those run in full whatever this is).
RANDOM_SPLITS = sample_size(200, 50)


def test_registry_names() -> None:
    assert set(PARSERS) <= set(reasoning_parser_names())
    with pytest.raises(KeyError):
        get_reasoning_parser("nope")


@pytest.mark.parametrize("name", PARSERS)
@pytest.mark.parametrize("kw", list(KWARGS))
@pytest.mark.parametrize("out", list(OUTPUTS))
def test_split_invariance(name: str, kw: str, out: str, tok: Tokenizer) -> None:
    text = OUTPUTS[out]

    def make():
        return get_reasoning_parser(name, tok, template_kwargs=KWARGS[kw])

    want = run_whole(make, text)
    # nothing is lost: reasoning + content + consumed markers rebuild the output
    assert len(want.reasoning) + len(want.content) <= len(text)
    assert run_chunks(make, list(text)).key() == want.key()
    for cut in range(1, len(text)):
        assert run_chunks(make, split_at(text, [cut])).key() == want.key()
    rng = random.Random(len(text))
    for _ in range(RANDOM_SPLITS):
        assert run_chunks(make, random_char_splits(text, rng)).key() == want.key()
    pieces, ids = token_pieces(tok, text)
    for _ in range(RANDOM_SPLITS):
        texts, groups = random_token_groups(pieces, ids, rng)
        assert run_chunks(make, texts, groups).key() == want.key()


def test_expected_splits() -> None:
    def split(name: str, text: str, **kw):
        r = run_whole(lambda: get_reasoning_parser(name, None, **kw), text)
        return r.reasoning, r.content

    assert split("deepseek_r1", OUTPUTS["both"]) == ("I think 杭州 😀", "Answer.")
    assert split("deepseek_r1", OUTPUTS["none"]) == ("Just an answer.", "")  # R1 always thinks
    assert split("deepseek_v4", OUTPUTS["end_only"]) == ("I think", "\n\nAnswer.")
    assert split("deepseek_v4", OUTPUTS["none"], template_kwargs={"thinking": False}) == (
        "",
        "Just an answer.",
    )
    assert split("deepseek_v4", OUTPUTS["none"], template_kwargs={"reasoning_effort": "none"}) == (
        "",
        "Just an answer.",
    )
    assert split("deepseek_v3", OUTPUTS["both"]) == ("", OUTPUTS["both"])  # off by default
    assert split("deepseek_v3", OUTPUTS["both"], template_kwargs={"thinking": True}) == (
        "I think 杭州 😀",
        "Answer.",
    )
    assert split("qwen3", OUTPUTS["partial_at_end"]) == ("x", "answer </thi")


def test_prompt_decides_start_state(tok: Tokenizer, dsv4_dir: str) -> None:
    """A rendered DeepSeek V4 prompt opens <think> (thinking) or closes it (off):
    the parser starts where the prompt left off, whatever the kwargs default."""
    from vllm_pyfrontend.chat.template import load_chat_template

    template = load_chat_template(dsv4_dir)
    assert template is not None
    msgs = [{"role": "user", "content": "hi"}]
    on = template.render(msgs, chat_template_kwargs={"thinking": True})
    off = template.render(msgs, chat_template_kwargs={"thinking": False})
    style = ThinkStyle()
    assert prompt_state(style, prompt_text=on) is True
    assert prompt_state(style, prompt_text=off) is False
    assert prompt_state(style, tok, prompt_token_ids=tok.encode(on)) is True
    assert prompt_state(style, tok, prompt_token_ids=tok.encode(off)) is False
    assert prompt_state(style, prompt_text="plain prompt") is None
    # history with a closed think block long before the end is no evidence
    assert prompt_state(style, tok, prompt_token_ids=tok.encode("<think>a</think>" + "x " * 50)) is None

    out = "I reason</think>Answer"
    # kwargs say off, but the prompt the engine saw opened <think>: reasoning
    r = run_whole(
        lambda: get_reasoning_parser(
            "deepseek_v4", tok, prompt_token_ids=tok.encode(on), template_kwargs={"thinking": False}
        ),
        out,
    )
    assert (r.reasoning, r.content) == ("I reason", "Answer")
    r = run_whole(
        lambda: get_reasoning_parser("deepseek_v4", tok, prompt_text=off), "<think>x</think>y"
    )
    assert (r.reasoning, r.content) == ("x", "y")  # an explicit <think> still opens reasoning
    r = run_whole(lambda: get_reasoning_parser("deepseek_v4", tok, prompt_text=off), "Answer")
    assert (r.reasoning, r.content) == ("", "Answer")


def test_lookalike_think_is_text_with_token_ids(tok: Tokenizer) -> None:
    """``<think>`` spelt with ordinary tokens is text; the added token is the marker."""
    think_id = tok.token_to_id("<think>")
    end_id = tok.token_to_id("</think>")
    assert think_id is not None and end_id is not None
    plain = [tok.encode(c)[0] for c in "<"] + tok.encode("think") + tok.encode(">")
    assert think_id not in plain
    lookalike = tok.decode(plain, skip_special_tokens=False)
    assert lookalike == "<think>"
    body = tok.encode("about ")
    ids = body + plain + tok.encode(" tags") + [end_id] + tok.encode("Done")
    pieces = [tok.decode([i], skip_special_tokens=False) for i in ids]

    def make():
        return get_reasoning_parser("deepseek_v4", tok, template_kwargs={"thinking": True})

    with_ids = run_chunks(make, pieces, [[i] for i in ids])
    assert (with_ids.reasoning, with_ids.content) == ("about <think> tags", "Done")
    # text-only: the lookalike counts as a marker (absorbed duplicate <think>)
    text_only = run_chunks(make, pieces)
    assert (text_only.reasoning, text_only.content) == ("about  tags", "Done")


def test_reasoning_token_count(tok: Tokenizer) -> None:
    ids = tok.encode("<think>one two three</think>four five")
    p = get_reasoning_parser("deepseek_r1", tok)
    for i in ids:
        p.feed(tok.decode([i], skip_special_tokens=False), [i])
    p.finish()
    assert p.reasoning_tokens == len(tok.encode("one two three"))


# ------------------------------------------------------------- vs vLLM
@pytest.mark.parametrize("name", PARSERS)
def test_agrees_with_vllm(name: str, hf) -> None:
    """Same split as vLLM's own parser (non-streaming) on every output and
    kwargs setting. Documented differences: none on this corpus except
    ``partial_at_end``-style text is identical too."""
    from tests.parsers.vllm_ref import vllm_reasoning

    for out, text in OUTPUTS.items():
        for kw, kwargs in KWARGS.items():
            theirs = vllm_reasoning(name, hf, text, kwargs)
            r = run_whole(lambda: get_reasoning_parser(name, None, template_kwargs=kwargs), text)
            if (name, out, kw) in GLM45_NO_EVIDENCE:
                # deliberate: GLM-4.5's template does not open <think>, so with
                # no prompt evidence the output is the answer unless it opens
                # <think> itself (vLLM: reasoning until </think>)
                assert (r.reasoning, r.content) != theirs and theirs[0]
                assert r.reasoning == "" and r.content.replace("</think>", "") == r.content
                continue
            assert (r.reasoning, r.content) == theirs, (out, kw)


GLM45_NO_EVIDENCE = {
    ("glm45", out, kw) for out in ("none", "end_only") for kw in ("default", "on")
}


def test_glm45_answer_without_think(tok: Tokenizer) -> None:
    """No <think> in the output and none in the prompt: the answer (vLLM:
    reasoning). The prompt's evidence still decides when there is some."""
    text = "The answer is 42."
    r = run_whole(lambda: get_reasoning_parser("glm45", tok), text)
    assert (r.reasoning, r.content) == ("", text)
    r = run_whole(lambda: get_reasoning_parser("glm45", tok), "<think>hm</think>" + text)
    assert (r.reasoning, r.content) == ("hm", text)
    opened = tok.encode("<|assistant|>") + [tok.token_to_id("<think>")]
    r = run_whole(lambda: get_reasoning_parser("glm45", tok, prompt_token_ids=opened), "hm</think>" + text)
    assert (r.reasoning, r.content) == ("hm", text)


def test_qwen3_think_in_an_earlier_turn_is_not_the_prompt_opening_it(tok: Tokenizer) -> None:
    """``<think>`` followed by another special token in the prompt (a user
    quoting it, an earlier turn) is no evidence that the output starts inside
    reasoning; only a prompt that ends with it is."""
    think = tok.token_to_id("<think>")
    special = next(i for i, t in sorted(tok.added_token_ids.items()) if t not in ("<think>", "</think>"))
    style = ThinkStyle()
    assert prompt_state(style, tok, prompt_token_ids=tok.encode("hi") + [think] + tok.encode("\n")) is True
    quoted = tok.encode("what is") + [think] + tok.encode("?") + [special] + tok.encode("\n")
    assert prompt_state(style, tok, prompt_token_ids=quoted) is None
    # thinking switched off: the output is content, not reasoning
    off = {"enable_thinking": False}
    r = run_whole(
        lambda: get_reasoning_parser("qwen3", tok, prompt_token_ids=quoted, template_kwargs=off),
        "Plain answer.",
    )
    assert (r.reasoning, r.content) == ("", "Plain answer.")
