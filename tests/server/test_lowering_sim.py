"""The shared lowering (`serving/lowering/`) on a worker over the simulated engine: the render
routes' steps are generation's own, and /invocations reaches the handlers the app registered."""

from __future__ import annotations

import asyncio

import httpx
import msgspec
import pytest

from tests.reliability.test_fault_injection import MODEL, Worker
from vllm_pyfrontend.config import WorkerConfig, WorkerPolicy
from vllm_pyfrontend.api.openai.lowering import chat_request_from_openai
from vllm_pyfrontend.serving.lowering.chat import lower_chat, lower_chat_prompt
from vllm_pyfrontend.api.openai.lowering import completion_request_from_openai
from vllm_pyfrontend.serving.lowering.completion import (
    lower_completion,
    lower_completion_prompts,
)
from vllm_pyfrontend.api.openai.sagemaker_routes import _EXPECTED
from vllm_pyfrontend.api.openai.schemas import ChatCompletionRequest, CompletionRequest

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CHAT_BODIES = [
    {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 8},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}],
     "tools": TOOLS, "tool_choice": "required", "reasoning_effort": "high", "logit_bias": {"5": 1.5}},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}],
     "add_generation_prompt": False, "continue_final_message": True, "truncate_prompt_tokens": 4,
     "chat_template_kwargs": {"thinking": True}},
]


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = Worker(tmp_path_factory.mktemp("lowering"))
    yield w
    w.close()


def _on_loop(worker: Worker, coro):
    return asyncio.run_coroutine_threadsafe(coro, worker.loop).result(20)


@pytest.mark.parametrize("body", CHAT_BODIES, ids=["plain", "tools-effort-bias", "continue-truncate"])
def test_render_lowers_a_chat_request_as_chat_does(worker, body):
    """The render route's steps (render=True) give the prompt ids, choices and options that chat
    completions sends."""
    raw = msgspec.json.encode({"model": MODEL, **body})

    async def both():
        state = worker.state
        req = msgspec.json.decode(raw, type=ChatCompletionRequest)
        chat = chat_request_from_openai(state, req)
        low = await lower_chat(state, chat)
        req = msgspec.json.decode(raw, type=ChatCompletionRequest)
        rendered = chat_request_from_openai(state, req, render=True)
        prompt = await lower_chat_prompt(state, rendered)
        return chat, low, rendered, prompt

    chat, low, rendered, prompt = _on_loop(worker, both())
    assert prompt.prompt_ids == low.prompt.prompt_ids
    assert prompt.n == low.prompt.n and prompt.plan == low.prompt.plan
    assert rendered.options.logit_bias == chat.options.logit_bias
    assert len(low.samplings) == low.prompt.n
    if body.get("tool_choice") == "required":
        assert "structured_outputs" in low.samplings[0]  # the forced call


def test_render_lowers_a_completion_request_as_completions_does(worker):
    raw = msgspec.json.encode({"model": MODEL, "prompt": ["Hello", "Goodbye"], "max_tokens": 5,
                               "truncate_prompt_tokens": 1, "temperature": 0.5, "n": 2})

    def both():
        state = worker.state
        comp = completion_request_from_openai(state, msgspec.json.decode(raw, type=CompletionRequest))
        low = lower_completion(state, comp)
        rendered = completion_request_from_openai(state, msgspec.json.decode(raw, type=CompletionRequest),
                                                  render=True)
        return low, lower_completion_prompts(state, rendered)

    low, prompts = worker.call(both)
    assert prompts.prompt_ids == low.prompts.prompt_ids and all(len(ids) == 1 for ids in prompts.prompt_ids)
    assert prompts.n == low.prompts.n == 2
    assert [len(s) for s in low.samplings] == [2, 2]


def test_invocations_dispatches_to_the_registered_handlers(worker):
    chat = httpx.post(worker.base + "/invocations", json={
        "model": MODEL, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}, timeout=20)
    assert chat.status_code == 200, chat.text
    assert chat.json()["object"] == "chat.completion"
    comp = httpx.post(worker.base + "/invocations", json={"model": MODEL, "prompt": "Hello", "max_tokens": 4},
                      timeout=20)
    assert comp.status_code == 200, comp.text
    assert comp.json()["object"] == "text_completion"
    neither = httpx.post(worker.base + "/invocations", json={"model": MODEL}, timeout=20)
    assert neither.status_code == 400
    assert neither.json()["error"]["message"] == _EXPECTED


def test_openai_conversions_put_each_field_in_its_place():
    """`chat_request_from_openai` / `completion_request_from_openai` build their struct
    positionally: every field lands where its name says (distinct values, checked by name)."""
    class State:
        trust_request_chat_template = True
        max_model_len = 4096
        config = WorkerConfig(0, 1, "h", 0, "m", ["m"], "", "",
                              policy=WorkerPolicy(trust_request_mm_kwargs=True))

    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "tools": TOOLS, "tool_choice": "auto",
            "parallel_tool_calls": False, "response_format": {"type": "json_object"},
            "structured_outputs": {"regex": "a"}, "logit_bias": {"3": 1.0}, "chat_template_kwargs": {"k": 1},
            "reasoning_effort": "low", "add_generation_prompt": False, "continue_final_message": True,
            "documents": [{"title": "t"}], "chat_template": "{{ messages }}", "mm_processor_kwargs": {"m": 1}, "n": 3,
            # (prompt_logprobs 0: vLLM refuses more with `stream`)
            "logprobs": True, "top_logprobs": 4, "prompt_logprobs": 0, "echo": True, "truncate_prompt_tokens": 6,
            "bad_words": ["b"], "include_reasoning": False, "return_token_ids": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}, "priority": 7,
            "cache_salt": "salt", "request_id": "rid", "use_beam_search": True, "length_penalty": 0.5}
    req = msgspec.json.decode(msgspec.json.encode(body), type=ChatCompletionRequest)
    got = chat_request_from_openai(State, req, ["lora"])
    for name in ("tools", "tool_choice", "parallel_tool_calls", "response_format", "structured_outputs",
                 "logit_bias", "chat_template_kwargs", "reasoning_effort", "add_generation_prompt",
                 "continue_final_message", "documents", "chat_template", "mm_processor_kwargs", "n", "logprobs",
                 "top_logprobs", "prompt_logprobs", "echo", "truncate_prompt_tokens", "bad_words",
                 "include_reasoning", "return_token_ids", "stream", "priority", "cache_salt", "request_id",
                 "use_beam_search", "length_penalty"):
        assert getattr(got, name) == body[name], name
    assert got.messages == body["messages"] and got.lora == ["lora"]
    assert (got.include_usage, got.continuous_usage, got.messages_normalized, got.allow_media) == (
        True, True, False, True)
    assert got.options.logit_bias is None and got.options.max_tokens is None
    rendered = chat_request_from_openai(State, req, render=True)
    assert (rendered.allow_media, rendered.use_beam_search) == (False, False)
    later = {"return_tokens_as_token_ids": True, "logprob_token_ids": [1, 2], "truncation_side": "right",
             "media_io_kwargs": {"video": {"num_frames": 2}}}
    for cls, base, build in ((ChatCompletionRequest, {"messages": [{"role": "user", "content": "x"}], "logprobs": True},
                              chat_request_from_openai),
                             (CompletionRequest, {"prompt": "p", "logprobs": 1}, completion_request_from_openai)):
        fields = {k: v for k, v in later.items() if k != "media_io_kwargs" or cls is ChatCompletionRequest}
        got = build(State, msgspec.json.decode(msgspec.json.encode({**base, **fields}), type=cls))
        for name, value in fields.items():
            assert getattr(got, name) == value, name

    # (no beam search: vLLM refuses it with `echo` and `logprobs`; the chat body above places it)
    body = {"model": MODEL, "prompt": "p", "logit_bias": {"3": 1.0}, "add_special_tokens": False, "n": 3,
            "logprobs": 4, "prompt_logprobs": 0, "echo": True, "truncate_prompt_tokens": 6, "bad_words": ["b"],
            "structured_outputs": {"regex": "a"}, "response_format": {"type": "json_object"},
            "return_token_ids": True, "stream": True, "stream_options": {"include_usage": True,
                                                                         "continuous_usage_stats": True},
            "priority": 7, "cache_salt": "salt", "request_id": "rid",
            "length_penalty": 0.5, "max_tokens": 9}
    req = msgspec.json.decode(msgspec.json.encode(body), type=CompletionRequest)
    got = completion_request_from_openai(State, req, ["lora"])
    for name in ("prompt", "logit_bias", "add_special_tokens", "n", "logprobs", "prompt_logprobs", "echo",
                 "truncate_prompt_tokens", "bad_words", "structured_outputs", "response_format", "return_token_ids",
                 "stream", "priority", "cache_salt", "request_id", "length_penalty"):
        assert getattr(got, name) == body[name], name
    assert (got.lora, got.include_usage, got.continuous_usage, got.options.max_tokens) == (["lora"], True, True, 9)
