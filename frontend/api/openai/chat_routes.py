"""POST /v1/chat/completions: messages -> chat template -> n engine requests -> SSE or JSON.

The body becomes a `ChatRequest` and is lowered by `serving/lowering/chat.py` (the same lowering
as every chat-shaped API style); the pipeline itself lives in `request_pipeline.py`
(RequestRun) and `formatters.py` (ChatFormatter).
"""

from __future__ import annotations

import time

from vllm_pyfrontend.llm.request_ids import make_request_id
from vllm_pyfrontend.serving.beam_generation import answer_beam_search, step_sampling
from vllm_pyfrontend.serving.formatters import ChatFormatter
from vllm_pyfrontend.api.openai.lowering import chat_request_from_openai, openai_request
from vllm_pyfrontend.serving.lowering.chat import chat_run, lower_chat, submit_chat
from vllm_pyfrontend.serving.responder import Answer, answer_run, new_sse
from vllm_pyfrontend.serving.scope import RequestScope
from vllm_pyfrontend.api.openai.schemas import ChatCompletionRequest
from vllm_pyfrontend.serving.web_app import http_route


def chat_response_role(response_role: str, chat) -> str:
    """vLLM's `get_chat_request_role`: `--response-role` for a new message, else the role of the
    message being continued."""
    if chat.add_generation_prompt or not chat.messages:
        return response_role
    return str(chat.messages[-1].get("role") or response_role)


async def chat_completions(state, scope: RequestScope, body: bytes) -> Answer:
    """The endpoint: a request body, in its scope, to its answer (HTTP routes and batch lines)."""
    model, lora, chat = openai_request(state, scope, body, ChatCompletionRequest, chat_request_from_openai)
    low = await lower_chat(state, chat)

    response_id = f"chatcmpl-{chat.request_id}" if chat.request_id else make_request_id("chatcmpl", state.worker_index)
    created = int(time.time())
    beam = chat.use_beam_search
    formatter = ChatFormatter(
        state.token_text, chat.top_logprobs or 0,
        prompt_logprobs=not beam and low.prompt.prompt_logprobs is not None,
        # vLLM's beam tokens have no decoded text of their own: no repair, no `bytes`
        decode=None if beam else (lambda ids: state.tokenizer.decode(ids, skip_special_tokens=False)),
        token_bytes=not beam,
        as_token_ids=chat.return_tokens_as_token_ids or state.config.policy.return_tokens_as_token_ids,
        all_top=bool(chat.logprob_token_ids),
        role=chat_response_role(state.config.policy.response_role, chat),
        prompt_tokens_details=state.config.policy.enable_prompt_tokens_details,
        per_request_metrics=state.config.policy.enable_per_request_metrics,
        # vLLM: `completion_tokens_details.reasoning_tokens` whenever a reasoning parser is configured
        reasoning_details=state.parsers.reasoning_parser is not None,
        forced_tool_choice=low.plan.mode in ("required", "named"),
    )
    sse = new_sse(state, response_id, model, created, "chat.completion.chunk") if chat.stream else None
    run = chat_run(state, chat, low, response_id=response_id, model=model, created=created, formatter=formatter,
                   sse=sse)
    if beam:
        return await answer_beam_search(
            state, scope, run, [low.prompt.prompt_ids], [low.beams], step_sampling(state, low.prompt.n,
                                                                                     chat.options.temperature),
            skip_special_tokens=chat.options.skip_special_tokens, lora_request=lora, priority=chat.priority,
            cache_salt=chat.cache_salt, role_chunks=True,
        )
    if state.output_log is not None:
        state.output_log.attach(run)
    submit_chat(state, scope, chat, low, run)
    return await answer_run(state, run, role_chunks=True)


handle_chat_completions = http_route("chat.completions", chat_completions)
