"""The simulated engine's greedy continuation: a request moved to another engine (its prompt
followed by the tokens generated so far) goes on exactly where the uninterrupted answer was."""

from __future__ import annotations

import random

from vllm_pyfrontend.supervisor.sim.continuation import greedy_offset, prefix_crcs

MASK = (1 << 12) - 1
SPECIAL = 10_000  # a template token: never in the word stream


def _stream(seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(50) for _ in range(MASK + 1)]


def _prompt(seed: int) -> list[int]:
    rng = random.Random(seed)
    return [SPECIAL + 1] + [rng.randrange(50) for _ in range(20)] + [SPECIAL]


def test_a_continuation_reads_on_from_where_its_original_was():
    stream = _stream(1)
    prompt = _prompt(2)
    start = greedy_offset(prompt, stream, MASK)
    assert start == prefix_crcs(prompt)[len(prompt)] & MASK
    for k in (1, 2, 7, 40):
        generated = [stream[(start + i) & MASK] for i in range(k)]
        assert greedy_offset(prompt + generated, stream, MASK) == (start + k) & MASK


def test_a_longer_prompt_that_matches_by_chance_is_not_taken():
    """The continuation's last token happens to be where `continuation[:-1]` would start its
    own output: read as "that longer prompt and one generated token", the output would go on
    from another place of the stream (a moved stream's text went astray this way)."""
    prompt = _prompt(3)
    for seed in range(20):
        stream = _stream(seed)
        start = prefix_crcs(prompt)[len(prompt)] & MASK
        k = 12
        continuation = prompt + [stream[(start + i) & MASK] for i in range(k)]
        j = prefix_crcs(continuation)[len(continuation) - 1] & MASK
        if start <= j <= start + k:
            continue  # (the forged position would change the output itself)
        stream[j] = continuation[-1]
        assert greedy_offset(continuation, stream, MASK) == (start + k) & MASK
        return
    raise AssertionError("no stream to forge the chance match in")
