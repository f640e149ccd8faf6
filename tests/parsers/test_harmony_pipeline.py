"""gpt-oss harmony beyond the differential cases: arguments stream as generated, and both
parsers together (or either alone) through the assistant pipeline."""

from __future__ import annotations

import json

from tests.parsers.harness import collect
from vllm_pyfrontend.parsers.harmony import harmony_encoding
from vllm_pyfrontend.parsers.pipeline import make_assistant_stream

ARGS = json.dumps({"path": "a.py", "content": "print('hello world')\n" * 20})
OUT = ("<|channel|>analysis<|message|>Write the file.<|end|>"
       "<|start|>assistant<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>"
       + ARGS + "<|call|>")


def _token_texts(text: str) -> list[str]:
    enc = harmony_encoding()
    return [enc.decode([t]) for t in enc.encode(text, allowed_special="all")]


def test_arguments_stream_before_the_call_closes() -> None:
    stream = make_assistant_stream("openai_gptoss", "openai", None)
    pieces = _token_texts(OUT)
    deltas = []
    arg_deltas_before_close = 0
    for i, piece in enumerate(pieces):
        d = stream.feed(piece)
        deltas.append(d)
        if d is not None and i < len(pieces) - 1:
            arg_deltas_before_close += sum(1 for c in d.tool_calls if c["function"].get("arguments"))
    deltas.append(stream.finish())
    result, _ = collect(deltas)
    assert arg_deltas_before_close > 10  # one long argument, many deltas, all before <|call|>
    assert result.reasoning == "Write the file."
    assert result.content == ""
    assert [(n, a) for n, a, _ in result.calls] == [("write_file", ARGS)]
    assert stream.n_tool_calls == 1
    assert stream.reasoning_tokens > 0


def test_reasoning_parser_alone_drops_calls_and_tool_parser_alone_drops_reasoning() -> None:
    text = OUT + "<|start|>assistant<|channel|>final<|message|>Done.<|return|>"
    r = make_assistant_stream("openai_gptoss", None, None)
    res, _ = collect([r.feed(text), r.finish()])
    assert (res.reasoning, res.content, res.calls) == ("Write the file.", "Done.", [])
    t = make_assistant_stream(None, "openai", None)
    res, _ = collect([t.feed(text), t.finish()])
    assert (res.reasoning, res.content, [c[0] for c in res.calls]) == ("", "Done.", ["write_file"])


# ------------------------------------------------------------------ token ids
def _engine_steps(text: str, per_step: int = 1) -> list[tuple[str, list[int]]]:
    """(text, ids) per engine step, as the serving path feeds them: the harmony tokens of
    ``text``, the text an incremental detokenizer releases for them (a character cut between
    tokens is held until its last byte)."""
    enc = harmony_encoding()
    ids = enc.encode(text, allowed_special="all")
    steps, done = [], ""
    for k in range(0, len(ids), per_step):
        released = enc.decode(ids[: k + per_step]).rstrip("\ufffd")  # an incomplete last character
        steps.append((released[len(done) :], ids[k : k + per_step]))
        done = released
    assert "".join(t for t, _ in steps) == text
    return steps


def _texts() -> list[str]:
    from tests.parsers.cases import load

    cases = load()
    out = [c.text for c in cases.tool_cases if c.parser == "openai"]
    out += [c.text for c in cases.reasoning_cases if c.parser == "openai_gptoss"]
    out += [OUT, "Hello <|message|>Done.", "a 杭州 😀", "x 州",
            "Hi.\n\n<|channel|>analysis<|message|>Think.<|end|>Done.",
            "<|channel|>final<|message|>Done.<|end|>x<|call|>",
            "<|channel|><|message|>x<|start|>assistant<|channel|>final<|message|>杭州<|end|><|start|>as"]
    return out


def _run(make, feeds) -> tuple:
    p = make()
    deltas = [p.feed(t, ids) for t, ids in feeds] + [p.finish()]
    res, _ = collect(deltas)
    return res.key(), p.n_tool_calls, p.reasoning_tokens


def test_engine_token_ids_give_the_text_result() -> None:
    """With the engine's ids (one or several per step, characters cut between tokens) the
    result is the one of the text alone, for each parser combination."""
    for text in _texts():
        for names in (("openai_gptoss", "openai"), ("openai_gptoss", None), (None, "openai")):
            make = lambda: make_assistant_stream(*names, None)  # noqa: E731
            want = _run(make, [(text, None)])
            for per_step in (1, 3):
                got = _run(make, _engine_steps(text, per_step))
                assert got[:2] == want[:2], (text, names, per_step)


def test_token_ids_are_what_is_parsed() -> None:
    """Given ids, the text is not read (the ids are the output, as in vLLM's HarmonyParser)."""
    text = ("<|channel|>analysis<|message|>Think.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>杭州<|return|>")
    ids = harmony_encoding().encode(text, allowed_special="all")
    stream = make_assistant_stream("openai_gptoss", "openai", None)
    res, _ = collect([stream.feed("not this text", ids), stream.finish()])
    assert (res.reasoning, res.content) == ("Think.", "杭州")


def test_mirrored_parser_state() -> None:
    """The stream's mirror of the harmony parser's state is the parser's own, token by token,
    over random mixtures of its special tokens and text (errors included)."""
    import random

    from vllm_pyfrontend.parsers.harmony import HarmonyStream, _CONTENT_STATE, _EXPECT_START, _HEADER

    enc = harmony_encoding()
    names = {_EXPECT_START: "ExpectStart", _HEADER: "Header", _CONTENT_STATE: "Content"}
    pieces = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>",
              "<|call|>", "<|endoftext|>", "assistant", "analysis", "final", " to=functions.f", "user",
              " json", "x", "杭州", " ", "Hi."]
    rng = random.Random(7)
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        s = HarmonyStream(reasoning=True, tools=True)
        for tid in enc.encode(text, allowed_special="all"):
            s.feed("", [tid])
            raw = s._parser.state  # the Rust parser's: JSON; openai-harmony's wrapper: an enum
            state = json.loads(raw)["state"] if isinstance(raw, str) else raw.value
            assert names[s._state] == state, text


def test_vllm_parity_for_text_that_is_not_harmony() -> None:
    """As vLLM's HarmonyParser: text before a ``<|message|>`` is a header (a bare recipient is
    a function: vLLM's chat path makes it a call, whatever its arguments); text with no
    harmony is content, never garbled."""
    import logging

    from tests.parsers.corpus import TOOLS
    from tests.parsers.vllm_ref import vllm_harmony
    from vllm_pyfrontend.parsers.tool import get_tool_parser

    texts = ("Hello <|message|>Done.", "a 杭州", "a 杭州 😀<|end|>x",
             "<|channel|>final<|message|>Done.<|end|>xyz")
    for text in texts:
        logging.disable(logging.ERROR)
        try:
            _, v_content, v_calls = vllm_harmony(None, TOOLS, text, reasoning=False, tools_on=True)
        finally:
            logging.disable(logging.NOTSET)
        p = get_tool_parser("openai", None, TOOLS)
        res, _ = collect([p.feed(text), p.finish()])
        calls = [(n, json.loads(a) if a.startswith("{") else ("<invalid JSON>", a)) for n, a, _ in res.calls]
        assert (res.content, calls) == (v_content, v_calls), text
