"""`TextStream.feed_one` (the one-token step of plain streamed content) against `feed`: over
random outputs of the real DeepSeek V4 tokenizer (words, multi-byte characters, pieces of a
character, special tokens, stop strings that begin, straddle and complete), a stream that tries
`feed_one` first and takes `feed` when it declines releases the same text at every step, matches
the same stop string and counts the same tokens as one fed by `feed` alone."""

from __future__ import annotations

import random

import pytest

from vllm_pyfrontend.text.text_stream import TextStream

PIECES = ["The", " river", " runs", " under", " the", " bridge", ".", "\n", " é", "日本語", " 🙂", "#", "##",
          "###", "</", "answer", ">", " an", "swer", "ss", "<", "#a", " ###x"]
STOP_LISTS = [[], ["###"], ["###", "</answer>"], ["\n\n"], ["e"], ["日本"], ["🙂"]]


@pytest.fixture(scope="module")
def partial_ids(tok) -> list[int]:
    """Tokens that are not complete UTF-8 on their own (pieces of a character)."""
    table = tok.new_detokenizer([]).one_token_table()
    ids = [i for i, text in enumerate(table) if text is None]
    assert len(ids) > 10
    return ids


def _outputs(tok, rng: random.Random, n: int, partial_ids: list[int]) -> list[int]:
    text = "".join(rng.choice(PIECES) for _ in range(n))
    ids = tok.encode(text, add_special_tokens=False)
    specials = sorted(tok.special_token_ids)
    for _ in range(rng.randint(0, 3)):  # special tokens here and there
        ids.insert(rng.randrange(len(ids) + 1), rng.choice(specials))
    for _ in range(rng.randint(0, 2)):  # a piece of a character, then whatever follows
        ids.insert(rng.randrange(len(ids) + 1), rng.choice(partial_ids))
    return ids


@pytest.mark.parametrize("skip_special", [True, False])
def test_feed_one_equals_feed(tok, partial_ids, skip_special):
    rng = random.Random(11 + skip_special)
    taken = declined = 0
    for trial in range(400):
        stops = rng.choice(STOP_LISTS)
        min_tokens = rng.choice([0, 0, 3])
        include = rng.random() < 0.2
        ids = _outputs(tok, rng, rng.randint(1, 40), partial_ids)
        ref = TextStream(tok.new_detokenizer([], skip_special_tokens=skip_special), stops,
                         include_stop_str_in_output=include, min_tokens=min_tokens)
        ours = TextStream(tok.new_detokenizer([], skip_special_tokens=skip_special), stops,
                          include_stop_str_in_output=include, min_tokens=min_tokens)
        assert ours.has_one_token_step
        for tid in ids:
            want = ref.feed([tid], False)
            got = ours.feed_one(tid)
            if got is None:
                declined += 1
                got_pair = ours.feed([tid], False)
            else:
                taken += 1
                got_pair = (got, None)
            assert got_pair == want, (trial, stops, ids)
            assert ours.num_tokens == ref.num_tokens and ours.matched == ref.matched
            if want[1] is not None:
                assert ours.feed_one(tid) is None  # after a match: nothing more, by `feed`
                break
        assert ours.finish() == ref.finish()
    # Both ways are exercised: most steps are common ones, the rest (a character split over
    # tokens, a stop string's first character, text held) are declined.
    assert taken > 2 * declined and declined > 300


def test_no_one_token_step_without_table(tok_hf):
    """A detokenizer without the table (the `tokenizers` DecodeStream backend): feed_one always
    declines and `feed` does the work."""
    ts = TextStream(tok_hf.new_detokenizer([]), ["###"])
    if ts.has_one_token_step:
        pytest.skip("this backend has the one-token table")
    assert ts.feed_one(tok_hf.encode("hello", add_special_tokens=False)[0]) is None
    assert ts.num_tokens == 0
