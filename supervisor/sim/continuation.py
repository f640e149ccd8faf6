"""Greedy text that a continuation reproduces, as a real model's would.

The simulated engine's greedy output for a prompt is the word stream read from an offset that
is a hash of the prompt. A request moved off an engine that went down comes back as its
continuation: the original prompt followed by the tokens generated so far. A real model's
greedy continuation of that is exactly the rest of the uninterrupted answer; here, the prompt
is recognised as "a prompt P followed by the first k tokens of P's own greedy output", and the
output goes on from P's offset + k. The shortest such P is taken: a longer one (P and some of
its output) matches by chance whenever the few tokens after it are where its own output would
start (one token alike: about one continuation in the word list's size), and its output then
reads the stream from elsewhere; a shorter one would need the template's end of the prompt,
which the word stream never holds, to be its output. Every prefix hash comes from one pass over
the prompt (crc32 is incremental), and a split is only compared in full when the token after it
is the one P's output starts with, so the search costs O(prompt length). Scripted output (`sim_text`,
`sim_token_ids`) continues the same way: a prompt that ends with the script's first k tokens
gets the rest of it.
"""

from __future__ import annotations

import zlib


def prefix_crcs(prompt: list[int]) -> list[int]:
    """`crcs[m] == zlib.crc32(repr(prompt[:m]).encode())` for m in 0..len(prompt)."""
    crc32 = zlib.crc32
    running = crc32(b"[")
    crcs = [crc32(b"]", running)]
    sep = b""
    for t in prompt:
        running = crc32(sep + str(t).encode(), running)
        crcs.append(crc32(b"]", running))
        sep = b", "
    return crcs


def greedy_offset(prompt: list[int], stream: list[int], mask: int) -> int:
    """Where the greedy output of `prompt` starts reading `stream`: the prompt's own offset,
    or, for a continuation of a shorter prompt's greedy output, that one's offset moved past
    the tokens already generated."""
    crcs = prefix_crcs(prompt)
    n = len(prompt)
    for m in range(1, n):  # the shortest P first (see the module docstring)
        start = crcs[m] & mask
        if prompt[m] != stream[start]:
            continue
        k = n - m
        if all(prompt[m + i] == stream[(start + i) & mask] for i in range(1, k)):
            return (start + k) & mask
    return crcs[n] & mask


def scripted_done(prompt: list[int], script: list[int]) -> int:
    """How many of `script`'s tokens the prompt already ends with (a continuation of a
    scripted request): the longest such prefix, 0 for none."""
    n = min(len(prompt), len(script))
    for k in range(n, 0, -1):
        if prompt[-k] == script[0] and prompt[-k:] == script[:k]:
            return k
    return 0
