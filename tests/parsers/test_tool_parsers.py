"""Every tool parser on the shared corpus: results, split invariance, delta contract."""

from __future__ import annotations

import random

import pytest

from vllm_pyfrontend.parsers.tool import get_tool_parser
from vllm_pyfrontend.text.tokenizer import Tokenizer
from tests.parsers.corpus import ALL_CASES, TOOLS, Case
from tests.parsers.harness import (
    random_char_splits,
    random_token_groups,
    run_chunks,
    run_whole,
    split_at,
    token_pieces,
)
from tests.sample_size import sample_size

CASES = pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
# Random character splits and random token groupings per case, on top of its every two-way
# split and its one-character stream (those run in full whatever this is).
RANDOM_SPLITS = sample_size(200, 50)


def factory(case: Case, tok: Tokenizer | None):
    return lambda: get_tool_parser(case.fmt, tok, TOOLS)


@CASES
def test_result(case: Case, tok: Tokenizer) -> None:
    r = run_whole(factory(case, tok), case.text)
    if case.committed:
        # the call whose name was complete, arguments closed; the rest is text
        (name, args), = r.decoded_calls()
        assert name in ("get_weather", "f") and isinstance(args, dict)
        assert case.text.endswith(r.content)
        return
    assert r.content == case.content
    assert r.decoded_calls() == case.calls
    if case.malformed:
        assert r.content == case.text, "malformed output comes back whole, as text"


@CASES
def test_every_two_way_split_and_char_stream(case: Case, tok: Tokenizer) -> None:
    make = factory(case, tok)
    want = run_whole(make, case.text).key()
    assert run_chunks(make, list(case.text)).key() == want
    for cut in range(1, len(case.text)):
        assert run_chunks(make, split_at(case.text, [cut])).key() == want, cut


@CASES
def test_random_splits(case: Case, tok: Tokenizer) -> None:
    make = factory(case, tok)
    want = run_whole(make, case.text).key()
    rng = random.Random(hash(case.id) & 0xFFFF)
    for _ in range(RANDOM_SPLITS):
        assert run_chunks(make, random_char_splits(case.text, rng)).key() == want
    pieces, ids = token_pieces(tok, case.text)
    for _ in range(RANDOM_SPLITS):
        texts, groups = random_token_groups(pieces, ids, rng)
        # with ids: markers must be real tokens, and they are here
        assert run_chunks(make, texts, groups).key() == want

