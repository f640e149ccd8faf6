"""TextStream (detokenizer + stop strings + min_tokens) against vLLM's own detokenizer, step by
step: the same final text, the same matched stop string and the same tokens kept when several
tokens arrive in one step (vLLM drops those after the token that completed the stop string)."""

from __future__ import annotations

import random
import types

import pytest
from vllm.sampling_params import SamplingParams
from vllm.v1.engine.detokenizer import FastIncrementalDetokenizer

from vllm_pyfrontend.text.text_stream import TextStream
from vllm_pyfrontend.text.tokenizer import Tokenizer

WORDS = ["a", "b", "c", "ab", " the", " cat", "!", "\n", "é", "ss"]


def _vllm(tok: Tokenizer, stops, min_tokens, include):
    params = SamplingParams(stop=stops, min_tokens=min_tokens, include_stop_str_in_output=include, max_tokens=500)
    req = types.SimpleNamespace(request_id="r", prompt_token_ids=[], sampling_params=params)
    return FastIncrementalDetokenizer(types.SimpleNamespace(_tokenizer=tok.hf_tokenizer), req)


def _run(tok: Tokenizer, steps: list[list[int]], stops, min_tokens, include, eos_last: bool):
    """Both sides over the same steps; returns ((text, stop, kept ids) ours, (...) vLLM's)."""
    ref = _vllm(tok, stops, min_tokens, include)
    ours = TextStream(tok.new_detokenizer([]), stops, include_stop_str_in_output=include, min_tokens=min_tokens)
    ref_text, ref_stop = "", None
    our_text, our_stop, our_ids = "", None, []
    for k, step in enumerate(steps):
        engine_stopped = eos_last and k == len(steps) - 1
        if ref_stop is None:
            ref_stop = ref.update(list(step), engine_stopped)
            ref_text += ref.get_next_output_text(ref_stop is not None or engine_stopped, True)
        if our_stop is None:
            text, our_stop = ours.feed(list(step), engine_stopped)
            our_text += text
            our_ids += step[: ours.num_kept] if our_stop is not None else step
    if our_stop is None and not eos_last:
        our_text += ours.finish()
        ref_text += ref.get_next_output_text(True, True)
    return (our_text, our_stop, our_ids), (ref_text, ref_stop, list(ref.output_token_ids))


def _steps(rng: random.Random, ids: list[int], sizes: list[int]) -> list[list[int]]:
    """`ids` cut into engine steps of sizes drawn from `sizes`."""
    steps, i = [], 0
    while i < len(ids):
        n = rng.choice(sizes)
        steps.append(ids[i : i + n])
        i += n
    return steps


def test_min_tokens_boundary_inside_a_step(tok):
    a, b, c = (tok.encode(x, add_special_tokens=False)[0] for x in "abc")
    # min_tokens=1, "a" "b" "c" in separate steps: "ab" ends after the boundary -> stops, empty text.
    ours, ref = _run(tok, [[a], [b], [c]], ["ab"], 1, False, False)
    assert ours == ref and ref[1] == "ab" and ref[0] == ""
    # One 3-token step with min_tokens=2: "ab" ends at the boundary token -> vLLM does not stop.
    ours, ref = _run(tok, [[a, b, c]], ["ab"], 2, False, False)
    assert ours == ref and ref[1] is None


def test_tokens_after_the_stop_in_one_step_are_dropped(tok):
    ids = tok.encode("xx ab cd ef", add_special_tokens=False)
    ours, ref = _run(tok, [ids], [" cd"], 0, False, False)
    assert ours == ref and ref[1] == " cd" and len(ref[2]) < len(ids)


@pytest.mark.parametrize("seed", range(300))
def test_random_steps_match_vllm(tok, seed):
    rng = random.Random(seed)
    text = "".join(rng.choice(WORDS) for _ in range(rng.randint(1, 14)))
    ids = tok.encode(text, add_special_tokens=False)
    stops = rng.sample(["ab", "b", "cat", " the", "é", "s!", "c\n", "abc"], rng.randint(1, 3))
    include = rng.random() < 0.3
    min_tokens = rng.choice([0, 0, 1, 2, 3, 5])
    eos = tok.eos_token_id
    eos_last = rng.random() < 0.3
    stream = ids + ([eos] if eos_last else [])
    steps = _steps(rng, stream, [1, 1, 2, 3, 4])
    ours, ref = _run(tok, steps, stops, min_tokens, include, eos_last)
    assert ours == ref, (text, stops, include, min_tokens, steps)


PROSE = [" river", " runs", " under", " the", " old", " bridge", ".", "\n", " é", "#", "##", "<", "/", "answer", ">", " <"]


@pytest.mark.parametrize("seed", range(200))
def test_backlogged_prose_steps_match_vllm(tok, seed):
    """Several tokens per step (a drained backlog) of mostly prose with rare stop characters:
    steps holding none of the stops' first characters go out whole (`StopStringMatcher.passes`),
    the others token by token; the text, the stop and the kept tokens stay vLLM's."""
    rng = random.Random(1000 + seed)
    words = [rng.choice(PROSE[:9]) if rng.random() < 0.85 else rng.choice(PROSE[9:]) for _ in range(rng.randint(5, 60))]
    ids = tok.encode("".join(words), add_special_tokens=False)
    stops = rng.choice([["###", "</answer>"], ["###"], ["</answer>"], [" <", "##"]])
    include = rng.random() < 0.2
    min_tokens = rng.choice([0, 0, 0, 3, 10])
    steps = _steps(rng, ids, [1, 2, 3, 5, 8])
    ours, ref = _run(tok, steps, stops, min_tokens, include, False)
    assert ours == ref, (words, stops, include, min_tokens, steps)
