"""`use_beam_search` on the OpenAI generation routes: `frontend/llm/beam_search.py` runs the
search, and its best beams are answered through the same `RequestRun` pipeline as sampled
choices (chat or completion formatter, JSON or SSE), each beam one choice with its final text.

As vLLM: `n` is the beam width, the request's temperature (default: the generation config's,
else 1.0) is each step's, the text of a beam is the tokenizer's decode of its tokens (a final EOS
left out), and the whole answer comes at once (streamed chat: one content chunk per beam;
completions refuse `stream`, as vLLM does).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from vllm_pyfrontend.engine.types import EngineDeadError
from vllm_pyfrontend.llm.beam_search import BeamSearchFailed, BeamSearchParams, beam_search
from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.llm.generation import Generation
from vllm_pyfrontend.llm.sampling import GenerationDefaults, SamplingOptions, lower_sampling
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.responder import Answer, answer_run
from vllm_pyfrontend.serving.scope import RequestScope
from vllm_pyfrontend.serving.request_pipeline import Choice, RequestRun

log = logging.getLogger(__name__)


class _FixedText:
    """A choice's TextStream stand-in: the beam's text, already decoded."""

    def __init__(self) -> None:
        self.text = ""
        self.num_kept = 0

    def feed(self, token_ids: list[int], engine_stopped: bool) -> tuple[str, None]:
        self.num_kept = len(token_ids)
        text, self.text = self.text, ""
        return text, None

    def finish(self) -> str:
        return ""


class _NoEngine:
    """The choices' Generations stand for finished beams: nothing to abort."""

    def abort(self, request_ids) -> None:
        pass


def beam_choice(index: int, assistant) -> Choice:
    return Choice(index, _FixedText(), assistant)  # type: ignore[arg-type]


def step_sampling(state, width: int, temperature: float | None) -> dict[str, Any]:
    """Each step's engine sampling map (vLLM: SamplingParams(logprobs=2 * width, max_tokens=1,
    temperature=...), then the tokenizer's and generation config's EOS ids)."""
    if temperature is None:
        temperature = state.limits.defaults.sampling.get("temperature", 1.0)
    defaults = GenerationDefaults(eos_token_ids=list(state.limits.defaults.eos_token_ids))
    sampling = lower_sampling(SamplingOptions(temperature=temperature), max_tokens=1,
                              eos_token_id=state.limits.eos_token_id, defaults=defaults)
    sampling["logprobs"] = 2 * width
    return sampling


async def answer_beam_search(
    state, scope: RequestScope, run: RequestRun, prompts: list[list[int]], params: list[BeamSearchParams],
    sampling: dict[str, Any], *, skip_special_tokens: bool, lora_request: list[Any] | None,
    priority: int, cache_salt: str | None, role_chunks: bool,
) -> Answer:
    """Search every prompt's beams (`params[i]` for prompt i, whose beams are choices
    i*width ..), in the request's scope (its step requests counted and aborted with it, the
    tenant's tokens reserved for every beam), then answer."""
    cap = scope.max_tokens_cap
    if cap is not None:  # a named key's max_tokens caps the beams
        params = [replace(p, max_tokens=min(p.max_tokens, cap)) for p in params]
    width = params[0].beam_width
    scope.reserve_tokens(sum(len(ids) + width * p.max_tokens for ids, p in zip(prompts, params)))
    scope.name(run.response_id, run.model)
    scope.follow(run)
    id_prefix = run.response_id.split("-", 1)[0]
    engine = _NoEngine()

    async def search_one(pi: int, prompt_ids: list[int]):
        return pi, await beam_search(
            state.engine, state.worker_index, prompt_ids, params[pi], sampling,
            eos_token_id=state.limits.eos_token_id, id_prefix=id_prefix, external_id=run.response_id,
            lora_request=lora_request, priority=priority, cache_salt=cache_salt, send=scope.submit_steps,
        )

    def answer(found) -> None:
        for pi, results in found:
            prompt_len = len(prompts[pi])
            for bi, beam in enumerate(results):
                choice = run.choices[pi * width + bi]
                gen = Generation(f"{run.response_id}-beam-{bi}", choice.index, run, engine, prompt_len)
                gen.num_output_tokens = len(beam.token_ids)
                gen._finish(beam.finish_reason, beam.stop_reason)
                scope.adopt(gen, prompts[pi], params[pi].max_tokens)
                choice.gen = gen
                choice.text.text = state.tokenizer.decode(beam.text_token_ids,  # type: ignore[union-attr]
                                                          skip_special_tokens=skip_special_tokens)
            for bi in range(len(results), width):  # fewer beams than asked (none left): no choice
                run.choices[pi * width + bi].finished = True
        for pi, results in found:
            for bi, beam in enumerate(results):
                choice = run.choices[pi * width + bi]
                run.on_delta(choice.gen, beam.token_ids, beam.logprobs, beam.finish_reason, beam.stop_reason)
        if not run.done.done():  # every choice answered (or none was left)
            run._remaining = 0
            run.done.set_result(None)

    async def search_all():
        tasks = [asyncio.ensure_future(search_one(pi, ids)) for pi, ids in enumerate(prompts)]
        try:
            return await asyncio.gather(*tasks)
        finally:
            for t in tasks:  # one prompt's search failed: the others stop (and abort) too
                t.cancel()

    async def search() -> None:
        try:
            answer(await search_all())
        except BeamSearchFailed as e:
            run.fail(APIError(503 if e.failure.kind.engine_unavailable else 500, e.failure.message))
            return
        except InvalidRequestError as e:
            run.fail(APIError(400, e.message, e.param))
            return
        except EngineDeadError as e:
            run.fail(APIError(503, f"The engine is not available: {e}"))
            return
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the request must end with an answer
            log.exception("beam search %s failed", run.response_id)
            run.fail(APIError(500, "Internal server error."))

    task = asyncio.ensure_future(search())
    scope.on_end(task.cancel)  # (a no-op once the search is over)
    scope.on_end(run.release)
    return await answer_run(state, run, role_chunks=role_chunks)
