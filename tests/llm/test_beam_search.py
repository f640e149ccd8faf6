"""llm/beam_search.py on a scripted engine (one-token requests answered with logprob rows);
tests/e2e/test_generation_features.py compares it with vLLM's server on the real engine."""

from __future__ import annotations

import asyncio
import itertools
import math
import random

import pytest

from vllm_pyfrontend.engine.types import EngineOutput, FINISH_LENGTH, FINISH_STOP, Logprobs
from vllm_pyfrontend.llm.beam_search import BeamSearchParams, beam_score, beam_search

VOCAB = 6
EOS = 5


def _dist(seq: tuple[int, ...]) -> list[float]:
    """A fixed next-token distribution per sequence (log-softmax of seeded scores)."""
    rng = random.Random(hash(seq))
    scores = [rng.uniform(-3, 3) for _ in range(VOCAB)]
    z = math.log(sum(math.exp(s) for s in scores))
    return [s - z for s in scores]


class _Engine:
    """Answers each request on the next loop turn: the greedy token and the top-k row."""

    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.sent: list[list[int]] = []
        self.aborted: list[str] = []

    def add_request(self, req, sink) -> None:
        self.sent.append(list(req.prompt_token_ids))
        dist = _dist(tuple(req.prompt_token_ids))
        k = req.sampling_params["logprobs"]
        top = sorted(range(VOCAB), key=lambda t: -dist[t])[:k]
        row_ids = [top[0], *top]
        out = EngineOutput(req.request_id, [top[0]], finish_reason=FINISH_STOP if top[0] == EOS else FINISH_LENGTH,
                           new_logprobs=Logprobs([row_ids], [[dist[t] for t in row_ids]], [1]))
        asyncio.get_running_loop().call_later(self.delay, sink.on_output, out)

    def abort(self, ids) -> None:
        self.aborted.extend(ids)


def _run(engine, prompt, params):
    async def go():
        return await beam_search(engine, 0, prompt, params, {"logprobs": 2 * params.beam_width, "max_tokens": 1},
                                 eos_token_id=EOS, id_prefix="cmpl", external_id="cmpl-x")
    return asyncio.run(go())


def test_a_beam_as_wide_as_every_candidate_finds_the_best_sequence():
    """With room for every candidate, the best beam is the exhaustive search's best (no length
    penalty: the score is the cumulative logprob)."""
    prompt, steps = [1, 2], 3
    width = VOCAB ** steps
    results = _run(_Engine(), prompt, BeamSearchParams(width // 2, steps, ignore_eos=True, length_penalty=0.0))
    best = max(itertools.product(range(VOCAB), repeat=steps),
               key=lambda seq: sum(_dist(tuple(prompt) + seq[:i])[t] for i, t in enumerate(seq)))
    assert results[0].token_ids == list(best)
    assert results[0].finish_reason == "length"
    assert len(results[0].logprobs.token_ids) == steps


@pytest.mark.parametrize("include_stop", [False, True])
def test_eos_ends_a_beam(include_stop):
    results = _run(_Engine(), [3], BeamSearchParams(4, 5, include_stop_str_in_output=include_stop))
    stopped = [r for r in results if r.finish_reason == "stop"]
    assert stopped, "the scripted model never picks EOS in the best 4"
    for r in stopped:
        assert r.stop_reason == EOS
        assert EOS not in r.text_token_ids
        assert (r.token_ids[-1:] == [EOS]) is include_stop
        assert len(r.logprobs.token_ids) == len(r.token_ids)
    scores = [beam_score([3, *r.token_ids], r.cum_logprob, EOS, 1.0) for r in results]
    assert scores == sorted(scores, reverse=True)


def test_cancelled_search_aborts_its_requests():
    engine = _Engine(delay=10)

    async def go():
        task = asyncio.ensure_future(beam_search(engine, 0, [1], BeamSearchParams(2, 3), {"logprobs": 4, "max_tokens": 1},
                                                 eos_token_id=EOS, id_prefix="cmpl", external_id="cmpl-x"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert len(engine.sent) == 1 and len(engine.aborted) == 1
