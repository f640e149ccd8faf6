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
