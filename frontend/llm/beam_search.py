"""Beam search as vLLM's API server runs it: in the frontend, one token at a time.

vLLM's engine has no beam search. Its server (`vllm/entrypoints/generate/beam_search/online.py`)
grows the beams itself: each step sends one engine request per live beam (the prompt plus the
beam's tokens, `max_tokens=1`, `logprobs=2*beam_width`, the request's temperature), takes every
token of each answer's logprob row as a candidate continuation (cumulative logprob + the token's),
moves candidates that end in EOS to the finished set (unless `ignore_eos`), and keeps the
`beam_width` best of the others. After `max_tokens` steps (or when no beam is left) the finished
and live beams are ranked by `cum_logprob / len ** length_penalty` (EOS not counted) and the best
`beam_width` returned, best first. Stop strings, `early_stopping` and penalties play no part there,
and none here: the results are vLLM's. Candidate selection uses numpy's `argpartition` /
`argsort` exactly as vLLM does, so ties break the same way (numpy is imported by the first beam
search, not by every worker at start: ~6 MiB a process that serves none).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vllm_pyfrontend.engine.types import Failure, Logprobs
from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.llm.generation import DeltaConsumer, Generation
from vllm_pyfrontend.llm.submission import Submission

MAX_BEAM_WIDTH = 1024  # vLLM's VLLM_MAX_N_SEQUENCES default


@dataclass(frozen=True, slots=True)
class BeamSearchParams:
    beam_width: int
    max_tokens: int
    ignore_eos: bool = False
    length_penalty: float = 1.0
    include_stop_str_in_output: bool = False


# One generated position: the engine's logprob row (token ids, logprobs, the sampled one's rank).
Row = tuple[list[int], list[float], int]


@dataclass(slots=True)
class Beam:
    tokens: list[int]  # prompt + generated
    cum_logprob: float = 0.0
    rows: list[Row] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass(slots=True)
class BeamResult:
    token_ids: list[int]  # generated only (EOS included only with include_stop_str_in_output)
    text_token_ids: list[int]  # what the text decodes (never the final EOS)
    cum_logprob: float
    logprobs: Logprobs  # one row per generated position
    finish_reason: str
    stop_reason: int | str | None


class BeamSearchFailed(Exception):
    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure


def check_beam_width(n: int | None) -> int:
    """vLLM's bounds on `n` as the beam width (greedy is fine: beams are chosen, not sampled)."""
    n = 1 if n is None else n
    if n < 1:
        raise InvalidRequestError(f"beam_width must be at least 1, got {n}.", "n")
    if n > MAX_BEAM_WIDTH:
        raise InvalidRequestError(f"beam_width must be at most {MAX_BEAM_WIDTH}, got {n}.", "n")
    return n


def beam_score(tokens: list[int], cum_logprob: float, eos_token_id: int | None, length_penalty: float) -> float:
    """vLLM's get_beam_search_score (after Hugging Face's)."""
    seq_len = len(tokens)
    if tokens[-1] == eos_token_id:
        seq_len -= 1
    try:
        denominator = max(seq_len, 1) ** length_penalty
    except OverflowError:  # an absurd length_penalty (vLLM raises): still a ranking, not a crash
        denominator = math.inf
    if denominator == 0:
        return math.copysign(math.inf, cum_logprob) if cum_logprob else 0.0
    return cum_logprob / denominator


class _Step(DeltaConsumer):
    """The GenerationConsumer of one step's requests: each beam's logprob row."""

    def __init__(self, size: int):
        self.rows: list[Row | None] = [None] * size
        self.finish: list[str | None] = [None] * size
        self.remaining = size
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_delta(self, gen: Generation, token_ids: list[int], logprobs: Logprobs | None,
                 finish_reason: str | None, stop_reason: int | str | None) -> None:
        if token_ids and logprobs is not None and logprobs.token_ids and self.rows[gen.index] is None:
            self.rows[gen.index] = (list(logprobs.token_ids[0]), list(logprobs.logprobs[0]),
                                    logprobs.sampled_ranks[0])
        if finish_reason is not None and self.finish[gen.index] is None:
            self.finish[gen.index] = finish_reason
            self.remaining -= 1
            if self.remaining == 0 and not self.done.done():
                self.done.set_result(None)

    def on_error(self, gen: Generation, failure: Failure) -> None:
        if not self.done.done():
            self.done.set_exception(BeamSearchFailed(failure))


def _row_items(row: Row) -> list[tuple[int, float]]:
    """The row as vLLM's logprob dict: first position per token, the last value written."""
    out: dict[int, float] = {}
    for t, v in zip(row[0], row[1]):
        out[t] = v
    return list(out.items())


async def beam_search(
    engine: Any,
    worker_index: int,
    prompt_ids: list[int],
    params: BeamSearchParams,
    step_sampling: dict[str, Any],
    *,
    eos_token_id: int | None,
    id_prefix: str,
    external_id: str,
    lora_request: list[Any] | None = None,
    priority: int = 0,
    cache_salt: str | None = None,
    trace_headers: dict[str, str] | None = None,
    send: Callable[[Submission], None] | None = None,
) -> list[BeamResult]:
    """Run vLLM's beam search; `step_sampling` is each step's engine sampling map
    (`max_tokens` 1, `logprobs` 2 * beam width, the request's temperature). `send`: sends one
    step's submission (the request's scope, which counts and aborts them); default: submit it."""
    import numpy as np

    width = params.beam_width
    prompt_len = len(prompt_ids)
    beams = [Beam(list(prompt_ids))]
    completed: list[Beam] = []
    for _ in range(params.max_tokens):
        step = _Step(len(beams))
        sub = Submission(engine, worker_index, step, id_prefix)
        for i, beam in enumerate(beams):
            sub.add(i, beam.tokens, step_sampling, external_id=external_id, priority=priority,
                    cache_salt=cache_salt, trace_headers=trace_headers, lora_request=lora_request)
        if send is not None:
            send(sub)
        else:
            sub.submit()
        try:
            await step.done
        finally:
            for _, gen in sub.requests:
                gen.cancel()  # a no-op for finished requests; aborts the rest when cancelled
        if any(f == "abort" for f in step.finish):
            for beam in beams:
                beam.finish_reason = "abort"
            break
        candidates: list[tuple[float, int, Beam, Row]] = []
        for beam, row in zip(beams, step.rows):
            if row is None:
                continue
            for token_id, logprob in _row_items(row):
                score = beam.cum_logprob + logprob
                if token_id == eos_token_id and not params.ignore_eos:
                    tokens = beam.tokens + [token_id] if params.include_stop_str_in_output else beam.tokens
                    completed.append(Beam(tokens, score, beam.rows + [row], "stop", eos_token_id))
                else:
                    candidates.append((score, int(token_id), beam, row))
        scores = np.fromiter((c[0] for c in candidates), dtype=np.float64, count=len(candidates))
        if len(candidates) <= width:
            top = np.argsort(-scores)
        else:
            top = np.argpartition(-scores, width - 1)[:width]
            top = top[np.argsort(-scores[top])]
        beams = []
        for idx in top:
            score, token_id, beam, row = candidates[int(idx)]
            beams.append(Beam(beam.tokens + [token_id], score, beam.rows + [row]))
        if not beams:
            break
    completed.extend(beams)
    best = sorted(completed, key=lambda b: beam_score(b.tokens, b.cum_logprob, eos_token_id, params.length_penalty),
                  reverse=True)[:width]
    results = []
    for beam in best:
        generated = beam.tokens[prompt_len:]
        text_ids = generated[:-1] if (generated and generated[-1] == eos_token_id and not params.ignore_eos) \
            else generated
        rows = beam.rows[:len(generated)]
        results.append(BeamResult(
            token_ids=generated, text_token_ids=text_ids, cum_logprob=beam.cum_logprob,
            logprobs=Logprobs([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
            finish_reason=beam.finish_reason or "length", stop_reason=beam.stop_reason,
        ))
    return results
