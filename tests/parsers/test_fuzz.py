"""Random mixtures of each format's own pieces: never raises, never depends on
chunking, and output with no call comes back exactly as content."""

from __future__ import annotations

import random

import pytest

from vllm_pyfrontend.parsers.tool import get_tool_parser, tool_markers
from tests.parsers.corpus import EMPTY, FORMATS, ONE, RENDER, TOOLS
from tests.parsers.harness import random_char_splits, run_chunks, run_whole


def _alphabet(fmt: str) -> list[str]:
    pieces = tool_markers(fmt)
    pieces += [RENDER[fmt](ONE), RENDER[fmt](EMPTY)]
    whole = RENDER[fmt](ONE)
    # fragments of a real call, so near-misses are common
    for k in range(0, len(whole), 7):
        pieces.append(whole[k : k + 7])
    pieces += [" ", "\n", "x", "{", "}", '"', "<", ">", "\\", "杭州", ":", ",", "[", "]"]
    return pieces


@pytest.mark.parametrize("fmt", FORMATS)
def test_fuzz(fmt: str) -> None:
    rng = random.Random(fmt)
    alphabet = _alphabet(fmt)
    make = lambda: get_tool_parser(fmt, None, TOOLS)  # noqa: E731
    for _ in range(150):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        want = run_whole(make, text)
        if not want.calls:
            assert want.content == text
        for _ in range(4):
            assert run_chunks(make, random_char_splits(text, rng)).key() == want.key(), text


@pytest.mark.parametrize("reasoning", ["deepseek_r1", "deepseek_v4", "qwen3"])
@pytest.mark.parametrize("fmt", ["deepseek_v4", "hermes", "qwen3_coder"])
def test_fuzz_pipeline(reasoning: str, fmt: str) -> None:
    """Reasoning + tool parsing composed stays chunking-invariant."""
    from vllm_pyfrontend.parsers.pipeline import make_assistant_stream

    rng = random.Random(reasoning + fmt)
    alphabet = _alphabet(fmt) + ["<think>", "</think>", "\n\n"]
    for kwargs in (None, {"thinking": False, "enable_thinking": False}):
        make = lambda: make_assistant_stream(reasoning, fmt, None, None, kwargs, TOOLS)  # noqa: E731
        for _ in range(60):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
            want = run_whole(make, text)
            for _ in range(3):
                assert run_chunks(make, random_char_splits(text, rng)).key() == want.key(), text
