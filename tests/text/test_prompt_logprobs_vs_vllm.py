"""Prompt logprobs as vLLM's LogprobsProcessor builds them (serving/prompt_logprobs.py), on the
real DeepSeek V4 tokenizer: random prompt rows, many of whose tokens are pieces of multi-byte
characters (decoded alone they end in U+FFFD and are repaired from the preceding prompt tokens)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from vllm.tokenizers import get_tokenizer
from vllm.v1.engine.logprobs import LogprobsProcessor
from vllm.v1.outputs import LogprobsTensors

from vllm_pyfrontend.engine.types import Logprobs
from vllm_pyfrontend.serving.prompt_logprobs import echo_logprobs, prompt_logprobs_json
from vllm_pyfrontend.text.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def vllm_tok(dsv4_dir):
    return get_tokenizer(dsv4_dir)


@pytest.fixture(scope="module")
def pool(tok: Tokenizer) -> list[int]:
    rng = random.Random(0)
    ids = tok.encode("海上生明月，天涯共此时。Ünïcödé ✓ 🚀🌊 naïve café — The sea, the sea!", add_special_tokens=False)
    partial = [i for i in rng.sample(range(1000, 129000), 20000)
               if tok.decode([i], skip_special_tokens=False).endswith("\ufffd")][:40]
    assert partial, "no byte-piece tokens found"
    return ids + partial + rng.sample(range(1000, 129000), 40)


def _vllm(vllm_tok, rows: Logprobs, k: int) -> list:
    proc = LogprobsProcessor(tokenizer=vllm_tok, logprobs=None, prompt_logprobs=[None], cumulative_logprob=None,
                             num_logprobs=None, num_prompt_logprobs=k)
    proc._update_prompt_logprobs(LogprobsTensors(torch.tensor(rows.token_ids), torch.tensor(rows.logprobs),
                                                 torch.tensor(rows.sampled_ranks)))
    return [None if d is None else {t: {"logprob": lp.logprob, "rank": lp.rank, "decoded_token": lp.decoded_token}
                                    for t, lp in d.items()} for d in proc.pop_prompt_logprobs()]


@pytest.mark.parametrize("seed", range(6))
def test_prompt_logprobs_equal_vllm(tok: Tokenizer, vllm_tok, pool, seed):
    rng = random.Random(seed)
    k = rng.choice([0, 1, 3])
    prompt = [rng.choice(pool) for _ in range(rng.randint(2, 24))]
    rows = Logprobs([], [], [])
    for t in prompt[1:]:
        tops = [rng.choice(pool) for _ in range(k)]
        rows.token_ids.append([t, *tops])
        rows.logprobs.append([float(np.float32(-rng.random() * 5)) for _ in range(k + 1)])  # as the engine's
        rows.sampled_ranks.append(rng.randint(1, 50))

    def text(i: int) -> str:
        return tok.decode([i], skip_special_tokens=False)

    def decode(ids: list[int]) -> str:
        return tok.decode(ids, skip_special_tokens=False)

    ours = prompt_logprobs_json(rows, text, decode)
    theirs = _vllm(vllm_tok, rows, k)
    assert ours == theirs
    echo = echo_logprobs(prompt, rows, text, k, decode)
    assert echo["tokens"][1:] == [d[t]["decoded_token"] for d, t in zip(theirs[1:], prompt[1:])]
    assert echo["token_logprobs"][0] is None and echo["top_logprobs"][0] is None


@pytest.mark.parametrize("seed", range(4))
def test_sampled_logprob_texts_equal_vllm(tok: Tokenizer, vllm_tok, pool, seed):
    """The same repair of sampled-token logprobs (context: the tokens sampled before)."""
    from vllm.v1.outputs import LogprobsLists

    from vllm_pyfrontend.serving.prompt_logprobs import SampledTexts

    rng = random.Random(100 + seed)
    k = rng.choice([0, 2])
    steps = [[rng.choice(pool) for _ in range(k + 1)] for _ in range(rng.randint(2, 20))]
    proc = LogprobsProcessor(tokenizer=vllm_tok, logprobs=[], prompt_logprobs=None, cumulative_logprob=0.0,
                             num_logprobs=k, num_prompt_logprobs=None)
    texts = SampledTexts(lambda i: tok.decode([i], skip_special_tokens=False),
                         lambda ids: tok.decode(ids, skip_special_tokens=False))
    for ids in steps:
        proc._update_sample_logprobs(LogprobsLists(np.array([ids]), np.array([[-1.0] * (k + 1)], dtype=np.float32),
                                                   np.array([1]), None))
        ours = texts.row(0, ids)
        theirs = {t: lp.decoded_token for t, lp in proc.logprobs[-1].items()}
        assert ours == theirs
