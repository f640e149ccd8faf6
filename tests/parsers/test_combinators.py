"""The combinator library: three-way results, monotone failure, JSON scanning, safe_text."""

from __future__ import annotations

import json
import random

import pytest

from vllm_pyfrontend.parsers.combinators import (
    NEED,
    Fail,
    Ok,
    choice,
    find_first,
    fmap,
    json_value,
    lit,
    many,
    opt,
    partial_tail,
    safe_text,
    scan_json,
    seq,
    take_until,
    ws,
)


def test_lit_three_way() -> None:
    p = lit("<tool_call>")
    assert p.parse("<tool_call>x", 0, False) == Ok(11, "<tool_call>")
    assert p.parse("<tool_", 0, False) is NEED
    assert isinstance(p.parse("<tool_", 0, True), Fail)
    assert p.parse("<tooX", 0, False) == Fail(4)


def test_seq_choice_many_opt() -> None:
    item = fmap(seq(lit("<a>"), take_until("</a>"), lit("</a>")), lambda v: v[1])
    items = many(item, sep=ws())
    assert items("<a>1</a> <a>2</a>\n<a></a>") == Ok(25, [["1", "2", ""], None])
    # a trailing separator with no item after it backtracks
    assert seq(items, ws())("<a>1</a>  ").value[0] == [["1"], "  "]
    assert items("<a>1</a> <a>2", eof=False) is NEED
    assert choice(lit("ab"), lit("ac")).parse("ac", 0, True) == Ok(2, "ac")
    assert choice(lit("ab"), lit("ac")).parse("a", 0, False) is NEED
    assert opt(lit("x"), "d").parse("y", 0, True) == Ok(0, "d")


def test_fmap_value_error_is_failure() -> None:
    def positive(v: str) -> int:
        n = int(v)
        if n <= 0:
            raise ValueError
        return n

    p = fmap(take_until(";"), positive)
    assert p.parse("5;", 0, True) == Ok(1, 5)
    assert isinstance(p.parse("-5;", 0, True), Fail)


JSON_SAMPLES = [
    '{"a": [1, 2.5e-3, -0, true, false, null, {"b": "c\\"d\\\\e\\u00e9\\n"}]}',
    "[]",
    "{}",
    '"杭州 😀 \u2028"',
    "-12.5E+7",
    "0",
    '{"nested": {"deep": [[[[]]]]}}',
]
BAD_JSON = ['{"a" 1}', "[1,,2]", "{'a': 1}", '{"a": tru}', "01", '"\x01"', '{"a": "\\x"}', "[1 2]"]


@pytest.mark.parametrize("raw", JSON_SAMPLES)
def test_scan_json_raw_slice_and_prefixes(raw: str) -> None:
    r = scan_json(raw + " tail", 0, True)
    assert r == Ok(len(raw), raw)  # the model's own text, not re-serialised
    json.loads(raw)
    # every proper prefix is undecided, never a failure
    for k in range(1, len(raw)):
        assert scan_json(raw[:k], 0, False) is NEED, raw[:k]


@pytest.mark.parametrize("raw", BAD_JSON)
def test_scan_json_rejects_like_json_loads(raw: str) -> None:
    with pytest.raises(ValueError):
        json.loads(raw)
    r = scan_json(raw, 0, True)
    assert isinstance(r, Fail) or (isinstance(r, Ok) and r.end < len(raw))


def test_failure_is_monotone() -> None:
    """If a prefix fails, every extension fails: decisions never depend on chunking."""
    rng = random.Random(7)
    p = seq(lit("<x>"), ws(), json_value("{"), ws(), lit("</x>"))
    alphabet = ['<x>', '</x>', '{', '}', '"a"', ':', '1', ',', ' ', 'z', '[', ']']
    for _ in range(2000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
        if isinstance(p.parse(s, 0, False), Fail):
            for extra in ("}", "</x>", " ", '"'):
                assert isinstance(p.parse(s + extra, 0, False), Fail), s


def test_safe_text() -> None:
    markers = ["<tool_call>", "<think>"]
    assert safe_text("hello", markers) == 5
    assert safe_text("hello <to", markers) == 6  # "<to" may start a marker: held
    assert safe_text("hello <tx", markers) == 9  # cannot: released
    assert safe_text("a<think>b", markers) == 1  # stops before a full marker
    assert safe_text("a<", markers) == 1
    assert safe_text("", markers) == 0
    assert safe_text("x <｜DSML", ["<｜DSML｜tool_calls>"]) == 2
    assert partial_tail("ab<thi", markers) == 2
    assert find_first("x<tool><tool_call>", ["<tool>", "<tool_call>"]) == (1, "<tool>")
    assert find_first("x<tool_call>", ["<tool", "<tool_call>"]) == (1, "<tool_call>")


def test_safe_text_releases_as_soon_as_possible() -> None:
    """Held text is exactly the longest suffix that is a proper marker prefix."""
    markers = ["<tool_call>", "</think>"]
    rng = random.Random(3)
    for _ in range(500):
        s = "".join(rng.choice("<>/tolc_ahink x") for _ in range(rng.randint(0, 14)))
        cut = safe_text(s, markers)
        assert not any(m in s[:cut] for m in markers)
        if cut < len(s):
            rest = s[cut:]
            assert any(m.startswith(rest) or rest.startswith(m) for m in markers)
