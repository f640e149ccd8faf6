"""Requests vLLM's Python server refuses (or accepts) before generating, one row each: the checks
of vLLM 0.32's `SamplingParams._verify_args` / `__post_init__`, its request protocol validators
(chat and completion `protocol.py`), `TokenizeParams` (context length) and the serving checks.
tests/e2e/test_validation_parity.py sends each row to both servers and compares status codes."""

from __future__ import annotations

from typing import Any

MODEL = "tiny"
U = {"role": "user", "content": "Hi"}


def chat(**kw) -> dict:
    return {"model": MODEL, "messages": [U], "temperature": 0, "max_tokens": 2, **kw}


def comp(**kw) -> dict:
    return {"model": MODEL, "prompt": "Hello", "temperature": 0, "max_tokens": 2, **kw}


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}

# (name, route, body): route is "chat" or "comp".
VALIDATION_CASES: list[tuple[str, str, dict[str, Any]]] = [
    # -- SamplingParams._verify_args ------------------------------------------------------
    ("stop_empty_string", "chat", chat(stop=[""])),
    ("stop_empty_string_comp", "comp", comp(stop=["a", ""])),
    ("stop_empty_single", "chat", chat(stop="")),
    ("stop_five_strings", "chat", chat(stop=["a", "b", "c", "d", "e"])),
    ("stop_four_strings_ok", "chat", chat(stop=["a", "b", "c", "d"])),
    ("presence_penalty_high", "chat", chat(presence_penalty=2.5)),
    ("presence_penalty_low", "comp", comp(presence_penalty=-2.5)),
    ("frequency_penalty_high", "chat", chat(frequency_penalty=3)),
    ("repetition_penalty_zero", "chat", chat(repetition_penalty=0)),
    ("repetition_penalty_negative", "comp", comp(repetition_penalty=-1)),
    ("temperature_negative", "chat", chat(temperature=-0.5)),
    ("temperature_above_two", "comp", comp(temperature=2.5)),
    ("temperature_two_ok", "chat", chat(temperature=2.0, seed=1)),
    ("top_p_above_one", "chat", chat(top_p=1.5)),
    ("top_p_negative", "comp", comp(top_p=-0.1)),
    ("top_k_minus_two", "chat", chat(top_k=-2, temperature=1, seed=1)),
    ("top_k_minus_one_ok", "chat", chat(top_k=-1, temperature=1, seed=1)),
    ("top_k_float", "chat", chat(top_k=1.5, temperature=1)),
    ("min_p_above_one", "chat", chat(min_p=1.5, temperature=1)),
    ("min_p_negative", "comp", comp(min_p=-0.1, temperature=1)),
    ("max_tokens_zero", "chat", chat(max_tokens=0)),
    ("max_tokens_zero_comp", "comp", comp(max_tokens=0)),
    ("max_completion_tokens_zero", "chat", chat(max_tokens=None, max_completion_tokens=0)),
    ("min_tokens_negative", "chat", chat(min_tokens=-1)),
    ("min_tokens_above_max", "chat", chat(min_tokens=5, max_tokens=3)),
    ("min_tokens_above_max_comp", "comp", comp(min_tokens=5, max_tokens=3)),
    ("n_negative", "comp", comp(n=-1)),
    ("n_greedy_comp", "comp", comp(n=2)),
    ("logprobs_minus_two_comp", "comp", comp(logprobs=-2)),
    ("top_logprobs_negative", "chat", chat(logprobs=True, top_logprobs=-2)),
    ("top_logprobs_minus_one", "chat", chat(logprobs=True, top_logprobs=-1)),
    ("logprobs_minus_one_comp", "comp", comp(logprobs=-1)),
    ("logprobs_21_comp", "comp", comp(logprobs=21)),
    ("stop_token_ids_strings", "chat", chat(stop_token_ids=["a"])),
    ("bad_words_empty_string", "chat", chat(bad_words=[""])),
    ("logit_bias_value_string", "chat", chat(logit_bias={"5": "x"})),
    ("logit_bias_out_of_vocab", "chat", chat(logit_bias={"999999999": 1})),
    ("allowed_token_ids_out_of_vocab", "chat", chat(allowed_token_ids=[999999999])),
    ("allowed_token_ids_empty", "chat", chat(allowed_token_ids=[])),
    ("seed_too_large", "chat", chat(seed=2**64)),
    ("vllm_xargs_huge_int", "chat", chat(vllm_xargs={"a": 2**70})),
    # -- context length (TokenizeParams, get_max_tokens) ----------------------------------
    ("max_tokens_huge", "chat", chat(max_tokens=10_000_000)),
    ("max_tokens_huge_comp", "comp", comp(max_tokens=10_000_000)),
    ("max_completion_tokens_huge", "chat", chat(max_tokens=None, max_completion_tokens=10_000_000)),
    ("max_tokens_model_len_plus_one", "comp", comp(max_tokens=4097)),
    ("truncate_prompt_tokens_huge", "comp", comp(truncate_prompt_tokens=5000)),
    ("truncate_prompt_tokens_huge_chat", "chat", chat(truncate_prompt_tokens=5000)),
    ("truncate_prompt_tokens_minus_two", "comp", comp(truncate_prompt_tokens=-2)),
    ("prompt_too_long_comp", "comp", comp(prompt="word " * 5000)),
    ("prompt_ids_too_long_comp", "comp", comp(prompt=[100] * 4097)),
    ("prompt_ids_exactly_model_len", "comp", comp(prompt=[100] * 4096)),
    # -- request protocol validators --------------------------------------------------------
    ("stream_options_falsy_without_stream", "chat", chat(stream_options={"include_usage": False})),
    ("stream_options_comp_without_stream", "comp", comp(stream_options={"include_usage": True})),
    ("continue_final_and_generation_prompt", "chat",
     chat(messages=[U, {"role": "assistant", "content": "x"}], continue_final_message=True, add_generation_prompt=True)),
    ("tools_empty_array", "chat", chat(tools=[])),
    ("tool_choice_without_tools", "chat", chat(tool_choice="required")),
    ("tool_choice_bad_string", "chat", chat(tools=[TOOL], tool_choice="sometimes")),
    ("tool_choice_unknown_function", "chat", chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "g"}})),
    ("tool_choice_function_without_name", "chat", chat(tools=[TOOL], tool_choice={"type": "function", "function": {}})),
    ("structured_two_constraints", "chat", chat(structured_outputs={"regex": "a", "choice": ["a"]})),
    ("structured_two_constraints_comp", "comp", comp(structured_outputs={"regex": "a", "json": {"type": "object"}})),
    ("json_schema_missing_comp", "comp", comp(response_format={"type": "json_schema"})),
    ("cache_salt_empty", "chat", chat(cache_salt="")),
    ("cache_salt_slash", "comp", comp(cache_salt="a/b")),
    ("cache_salt_too_long", "chat", chat(cache_salt="a" * 129)),
    ("cache_salt_not_string", "chat", chat(cache_salt=5)),
    ("priority_nonzero_fcfs", "chat", chat(priority=1)),
    ("prompt_empty_list_comp", "comp", comp(prompt=[])),
    ("prompt_empty_string_comp", "comp", comp(prompt="")),
    ("prompt_negative_token_comp", "comp", comp(prompt=[-1])),
    ("messages_empty", "chat", chat(messages=[])),
    ("n_huge", "comp", comp(n=20000, temperature=1)),
    ("stream_interval_zero", "chat", chat(stream_interval=0)),
    ("temperature_string", "chat", chat(temperature="0.5")),
    ("top_p_bool", "chat", chat(top_p=True)),
    ("logprobs_bool_comp", "comp", comp(logprobs=True)),
]

# Numeric strings ("0.5" for a number) are read as vLLM's lax pydantic models read them. Where
# pydantic goes further and takes a boolean for a number, this frontend refuses on purpose (a
# client sending `true` for top_p has a bug it should hear about): vLLM answers 200, this 400.
STRICTER_THAN_VLLM: dict[str, str] = {
    "top_p_bool": "a boolean is not a number",
    "logprobs_bool_comp": "a boolean is not an integer",
}
