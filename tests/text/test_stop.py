"""StopStringMatcher: vLLM's final text under every split of the stream."""

from __future__ import annotations

import itertools
import random

import pytest
from vllm.v1.engine.detokenizer import check_stop_strings

from vllm_pyfrontend.text.stop import StopStringMatcher


def vllm_final(text: str, stops: list[str], include: bool) -> tuple[str, str | None]:
    """What vLLM outputs for `text` (its result does not depend on chunking)."""
    res = check_stop_strings(text, len(text), stops, include)
    if res is None:
        return text, None
    stop, cut = res
    return (text if cut == -1 else text[:cut]), stop


def splits(text: str):
    n = len(text)
    for mask in range(1 << max(n - 1, 0)):
        out, start = [], 0
        for i in range(1, n):
            if mask & (1 << (i - 1)):
                out.append(text[start:i])
                start = i
        out.append(text[start:])
        yield out


def run(chunks: list[str], stops: list[str], include: bool) -> tuple[str, str | None]:
    m = StopStringMatcher(stops, include)
    released, matched = [], None
    max_hold = max((len(s) for s in stops), default=1) - 1
    for c in chunks:
        out, stop = m.feed(c)
        released.append(out)
        so_far = "".join(released)
        if stop is not None:
            matched = stop
            break
        if not include:
            # Never more held back than a stop prefix can be long.
            assert len("".join(chunks)) - len(so_far) >= 0
            assert not any(s in so_far for s in stops)
        assert m.feed("") == ("", None)
    if matched is None:
        released.append(m.flush())
    else:
        assert m.feed("more") == ("", None)
        assert m.flush() == ""
    _ = max_hold
    return "".join(released), matched


CASES = [
    ("hello world, stop here", ["stop"]),
    ("abababc", ["abc"]),
    ("aaab", ["aab", "b"]),
    ("xyzxyz", ["zx", "yzx"]),
    ("the end</s>tail", ["</s>", "end<"]),
    ("no match at all", ["zzz", "qq"]),
    ("überstop€x", ["stop€", "€"]),
    ("ab", ["abc"]),
    ("aaaa", ["aa"]),
    ("\n\nUser:", ["\nUser:", "\n\n"]),
]


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("text,stops", CASES)
def test_every_split_matches_vllm(text: str, stops: list[str], include: bool) -> None:
    want = vllm_final(text, stops, include)
    for chunks in splits(text[:12]) if len(text) > 12 else splits(text):
        full = "".join(chunks)
        assert run(chunks, stops, include) == vllm_final(full, stops, include)
    if len(text) <= 12:
        assert run([text], stops, include) == want


def test_random_against_vllm() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        text = "".join(rng.choice("abc ") for _ in range(rng.randint(0, 25)))
        stops = ["".join(rng.choice("abc") for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        include = rng.random() < 0.5
        chunks, i = [], 0
        while i < len(text):
            k = rng.randint(1, 5)
            chunks.append(text[i : i + k])
            i += k
        assert run(chunks, stops, include) == vllm_final(text, stops, include), (text, stops, chunks)


def test_releases_early_when_no_prefix_possible() -> None:
    m = StopStringMatcher(["STOP"], False)
    assert m.feed("hello ") == ("hello ", None)
    assert m.feed("ST") == ("", None)
    assert m.feed("AR") == ("STAR", None)
    assert m.feed("xSTO") == ("x", None)
    assert m.feed("P!") == ("", "STOP")


def test_include_holds_nothing() -> None:
    m = StopStringMatcher(["STOP"], True)
    assert m.feed("aST") == ("aST", None)
    assert m.feed("OPzz") == ("OP", "STOP")


def test_no_stops_passthrough_and_empty_stop_ignored() -> None:
    m = StopStringMatcher(["", ""], False)
    assert m.feed("abc") == ("abc", None)
    assert m.flush() == ""


def test_check_stops_false_defers_matching() -> None:
    # min_tokens: text fed unchecked is not matched, but a stop that straddles
    # into checked text is.
    m = StopStringMatcher(["ab"], False)
    assert m.feed("xab", check_stops=False) == ("xab", None)
    assert m.feed("za", check_stops=False) == ("z", None)
    assert m.feed("b") == ("", "ab")


def test_all_split_product_small_alphabet() -> None:
    # Exhaustive over short strings: every text of length <= 5 over {a, b}.
    stops = ["ab", "bba"]
    for n in range(6):
        for letters in itertools.product("ab", repeat=n):
            text = "".join(letters)
            for include in (False, True):
                want = vllm_final(text, stops, include)
                for chunks in splits(text):
                    assert run(chunks, stops, include) == want


def test_held_suffix_is_the_longest_stop_prefix() -> None:
    """What is held back is exactly the longest suffix that could still start a stop string
    (checked against a brute-force search over every suffix)."""
    rng = random.Random(11)

    def longest(text: str, stops: list[str]) -> int:
        return max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)

    for _ in range(3000):
        stops = ["".join(rng.choice("ab#<") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 3))]
        text = "".join(rng.choice("ab#< ") for _ in range(rng.randint(0, 12)))
        m = StopStringMatcher(stops, False)
        held = longest(text, stops)
        released, _ = m.feed(text, check_stops=False)
        assert released == text[: len(text) - held], (text, stops)
        assert m.flush() == text[len(text) - held :], (text, stops)


class _NeverDisjoint:
    def isdisjoint(self, other) -> bool:
        return False


def test_text_without_a_stops_first_character_against_vllm() -> None:
    """Most deltas of real text hold none of the stops' first characters (prose against
    "###" or "</answer>"): the matcher then releases them whole and keeps no overlap. Stops
    whose later characters are common letters, split anywhere, with min_tokens-style
    unchecked text, still end exactly where vLLM ends."""
    rng = random.Random(11)
    stops_pool = [["</answer>", "###"], ["<end>"], ["#!", "x<y"], ["<a", "aa<"]]
    for _ in range(3000):
        stops = rng.choice(stops_pool)
        words = ["answer", "the", "end", " ", "an", "swer>", "#", "<", "</", "##", "a", "y", "x<", "\n"]
        text = "".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
        include = rng.random() < 0.3
        chunks, i = [], 0
        while i < len(text):
            k = rng.randint(1, 6)
            chunks.append(text[i : i + k])
            i += k
        assert run(chunks, stops, include) == vllm_final(text, stops, include), (text, stops, chunks)
        # unchecked first chunks (min_tokens): a stop is only found from the first checked
        # chunk on, as with the plain path
        unchecked = rng.randint(0, len(chunks))
        slow = StopStringMatcher(stops, include)
        slow._firsts = _NeverDisjoint()  # the general path for every delta
        got = _feed_unchecked_first(StopStringMatcher(stops, include), chunks, unchecked)
        assert got == _feed_unchecked_first(slow, chunks, unchecked), (text, stops, chunks, unchecked)


def _feed_unchecked_first(m: StopStringMatcher, chunks: list[str], unchecked: int) -> tuple[str, str | None]:
    """Released text and matched stop, the first `unchecked` chunks fed without matching."""
    out, matched = [], None
    for j, c in enumerate(chunks):
        released, matched = m.feed(c, check_stops=j >= unchecked)
        out.append(released)
        if matched is not None:
            break
    if matched is None:
        out.append(m.flush())
    return "".join(out), matched
