"""POST /v1/completions: prompt(s) as text or token ids -> n engine requests each -> SSE or JSON.

The body becomes a `TextCompletionRequest` and is lowered by `serving/lowering/completion.py`
(shared with the completion render route); the pipeline is `RequestRun` with the
`CompletionFormatter`.
"""

from __future__ import annotations

import time

from vllm_pyfrontend.llm.request_ids import make_request_id
from vllm_pyfrontend.serving.beam_generation import answer_beam_search, step_sampling
from vllm_pyfrontend.api.openai.lowering import completion_request_from_openai, openai_request
from vllm_pyfrontend.serving.lowering.completion import (
    completion_run,
    lower_completion,
    submit_completion,
)
from vllm_pyfrontend.serving.responder import Answer, answer_run, new_sse
from vllm_pyfrontend.serving.scope import RequestScope
from vllm_pyfrontend.api.openai.schemas import CompletionRequest
from vllm_pyfrontend.serving.web_app import http_route


async def completions(state, scope: RequestScope, body: bytes) -> Answer:
    """The endpoint: a request body, in its scope, to its answer (HTTP routes and batch lines)."""
    model, lora, comp = openai_request(state, scope, body, CompletionRequest, completion_request_from_openai)
    low = lower_completion(state, comp)

    response_id = f"cmpl-{comp.request_id}" if comp.request_id else make_request_id("cmpl", state.worker_index)
    created = int(time.time())
    sse = new_sse(state, response_id, model, created, "text_completion") if comp.stream else None
    run = completion_run(state, comp, low, response_id=response_id, model=model, created=created, sse=sse)
    if comp.use_beam_search:
        return await answer_beam_search(
            state, scope, run, low.prompts.prompt_ids, low.beams,
            step_sampling(state, low.prompts.n, comp.options.temperature),
            skip_special_tokens=comp.options.skip_special_tokens, lora_request=lora, priority=comp.priority,
            cache_salt=comp.cache_salt, role_chunks=False,
        )
    submit_completion(state, scope, comp, low, run)
    return await answer_run(state, run, role_chunks=False)


handle_completions = http_route("completions", completions)
