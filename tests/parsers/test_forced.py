"""tool_choice "required" / named function outputs (structured-output JSON)."""

from __future__ import annotations

import json
import random

from vllm_pyfrontend.parsers.tool import forced_tool_parser
from tests.parsers.harness import random_char_splits, run_chunks, run_whole, split_at

REQUIRED = '[{"name": "get_weather", "parameters": {"city": "杭州"}}, {"name": "noop", "parameters": {}}]'
NAMED = '{"city": "Paris", "nested": {"a": [1, "\\"x\\""]}}'


def _check_invariant(make, text: str) -> None:
    want = run_whole(make, text).key()
    for cut in range(1, len(text)):
        assert run_chunks(make, split_at(text, [cut])).key() == want
    rng = random.Random(1)
    for _ in range(200):
        assert run_chunks(make, random_char_splits(text, rng)).key() == want


def test_required() -> None:
    make = lambda: forced_tool_parser(None)  # noqa: E731
    r = run_whole(make, REQUIRED)
    assert r.decoded_calls() == [("get_weather", {"city": "杭州"}), ("noop", {})]
    assert r.content == ""
    _check_invariant(make, REQUIRED)
    # cut by max_tokens after the name: the call was streamed, so it is
    # completed with the arguments so far (closed into valid JSON)
    truncated = REQUIRED[:40]
    r = run_whole(make, truncated)
    assert r.content == "" and r.decoded_calls() == [("get_weather", {})]
    _check_invariant(make, truncated)
    # cut before the name was complete: text
    r = run_whole(make, REQUIRED[:15])
    assert r.content == REQUIRED[:15] and not r.calls


def test_named() -> None:
    make = lambda: forced_tool_parser("get_weather")  # noqa: E731
    r = run_whole(make, NAMED)
    assert [(n, json.loads(a)) for n, a, _ in r.calls] == [("get_weather", json.loads(NAMED))]
    assert r.calls[0][1] == NAMED  # raw, not re-serialised
    _check_invariant(make, NAMED)
    # streamed before the object closes
    p = make()
    d = p.feed(NAMED[:20])
    assert d is not None and d.tool_calls[0]["function"]["name"] == "get_weather"
    # the name is known before the output starts: every argument streams,
    # and output cut short still ends as the call, its arguments closed
    r = run_whole(make, NAMED[:-1])
    assert r.content == "" and r.decoded_calls() == [("get_weather", json.loads(NAMED))]
    r = run_whole(make, NAMED[:12])
    assert r.decoded_calls() == [("get_weather", {"city": "Pa"})]
    _check_invariant(make, NAMED[:-1])
