"""Request bodies vLLM refuses in its request models' validators, answered with vLLM's messages:
a VLLMValidationError's text ends in ` (parameter=P[, value=V])` and its `param` is P (vLLM 0.32
`chat_completion/protocol.py`, `completion/protocol.py`, `sampling_params.py`, `TokenizeParams`).
Each message below is what vLLM 0.32's own server answered for the same body (the rows of
tests/e2e/validation_cases.py, which tests/e2e/test_validation_parity.py sends to both servers,
and the chat body's other validators), and the validators' order decides which error wins.

In process: one worker and the simulated engine, `--max-model-len 4096 --max-logprobs 5` (the
engine flags the recorded answers had)."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.validation_cases import MODEL, VALIDATION_CASES
from tests.inprocess import InProcessStack

ROUTES = {"chat": "/v1/chat/completions", "comp": "/v1/completions"}
U = {"role": "user", "content": "Hi"}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'


@pytest.fixture(scope="module")
def client():
    s = InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "4096",
                        "--max-logprobs", "5", "--served-model-name", MODEL, "--shutdown-timeout", "5",
                        "demo:deepseek-v4"])
    with httpx.Client(base_url=s.base_url, timeout=60) as c:
        yield c
    s.terminate()


# validation_cases.py row -> (vLLM's message, vLLM's param; ... where this frontend names the
# OpenAI-level field instead: chat's `top_logprobs`)
VLLM_ANSWERS = {
    'temperature_negative': ('temperature must be non-negative, got -0.5. (parameter=temperature, value=-0.5)',
                            'temperature'),
    'temperature_above_two': ('temperature must be in [0, 2], got 2.5. (parameter=temperature, value=2.5)',
                             'temperature'),
    'top_p_above_one': ('top_p must be in (0, 1], got 1.5. (parameter=top_p, value=1.5)',
                       'top_p'),
    'top_p_negative': ('top_p must be in (0, 1], got -0.1. (parameter=top_p, value=-0.1)',
                      'top_p'),
    'max_tokens_zero': ('max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)',
                       'max_tokens'),
    'max_tokens_zero_comp': ('max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)',
                            'max_tokens'),
    'max_completion_tokens_zero': ('max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)',
                                  'max_tokens'),
    'logprobs_minus_two_comp': ('`logprobs` must be a positive value or -1. (parameter=logprobs, value=-2)',
                               'logprobs'),
    'top_logprobs_negative': ('`top_logprobs` must be a positive value or -1. (parameter=top_logprobs, value=-2)',
                             'top_logprobs'),
    'top_logprobs_minus_one': ('Requested sample logprobs of 129280, which is greater than max allowed: 5 (parameter=logprobs, value=129280)',
                              ...),
    'logprobs_minus_one_comp': ('Requested sample logprobs of 129280, which is greater than max allowed: 5 (parameter=logprobs, value=129280)',
                               ...),
    'logprobs_21_comp': ('Requested sample logprobs of 21, which is greater than max allowed: 5 (parameter=logprobs, value=21)',
                        ...),
    'allowed_token_ids_empty': ('allowed_token_ids is not None and empty! (parameter=allowed_token_ids, value=[])',
                               'allowed_token_ids'),
    'vllm_xargs_huge_int': ('extra_args integers must be between -2**63 and 2**64 - 1. (parameter=extra_args)',
                           'extra_args'),
    'max_tokens_huge': ('max_tokens=10000000 cannot be greater than max_model_len=4096. Please request fewer output tokens. (parameter=max_tokens, value=10000000)',
                       'max_tokens'),
    'max_tokens_huge_comp': ('max_tokens=10000000 cannot be greater than max_model_len=4096. Please request fewer output tokens. (parameter=max_tokens, value=10000000)',
                            'max_tokens'),
    'max_completion_tokens_huge': ('max_completion_tokens=10000000 cannot be greater than max_model_len=4096. Please request fewer output tokens. (parameter=max_completion_tokens, value=10000000)',
                                  'max_completion_tokens'),
    'max_tokens_model_len_plus_one': ('max_tokens=4097 cannot be greater than max_model_len=4096. Please request fewer output tokens. (parameter=max_tokens, value=4097)',
                                     'max_tokens'),
    'truncate_prompt_tokens_huge': ('truncate_prompt_tokens=5000 cannot be greater than max_model_len = 4096. Please request a smaller truncation size. (parameter=truncate_prompt_tokens, value=5000)',
                                   'truncate_prompt_tokens'),
    'truncate_prompt_tokens_huge_chat': ('truncate_prompt_tokens=5000 cannot be greater than max_model_len = 4096. Please request a smaller truncation size. (parameter=truncate_prompt_tokens, value=5000)',
                                        'truncate_prompt_tokens'),
    'stream_options_falsy_without_stream': ('Stream options can only be defined when `stream=True`. (parameter=stream_options)',
                                           'stream_options'),
    'stream_options_comp_without_stream': ('Stream options can only be defined when `stream=True`. (parameter=stream_options)',
                                          'stream_options'),
    'continue_final_and_generation_prompt': ('Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
                                            None),
    'tools_empty_array': ('`tools` must not be an empty array. Either provide at least one tool or omit the field entirely. (parameter=tools)',
                         'tools'),
    'tool_choice_without_tools': ('When using `tool_choice`, `tools` must be set. (parameter=tool_choice)',
                                 'tool_choice'),
    'tool_choice_bad_string': ('Invalid value for `tool_choice`: sometimes! Only named tools, "none", "auto" or "required" are supported. (parameter=tool_choice)',
                              'tool_choice'),
    'tool_choice_unknown_function': ('The tool specified in `tool_choice` does not match any of the specified `tools` (parameter=tool_choice)',
                                    'tool_choice'),
    'tool_choice_function_without_name': ('Expected field `name` in `function` in `tool_choice`! Correct usage: `{"type": "function", "function": {"name": "my_function"}}` (parameter=tool_choice.function.name)',
                                         'tool_choice.function.name'),
    'structured_two_constraints': ("You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice').",
                                  None),
    'structured_two_constraints_comp': ("You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice'). (parameter=structured_outputs)",
                                       'structured_outputs'),
    'json_schema_missing_comp': ("When response_format type is 'json_schema', the 'json_schema' field must be provided. (parameter=response_format)",
                                'response_format'),
    'cache_salt_empty': ("Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)",
                        'cache_salt'),
    'cache_salt_slash': ("Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL. (parameter=cache_salt)",
                        'cache_salt'),
    'cache_salt_too_long': ("Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL. (parameter=cache_salt)",
                           'cache_salt'),
    'cache_salt_not_string': ("Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)",
                             'cache_salt'),
    'prompt_empty_string_comp': ('Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)',
                                'prompt'),
}

CASES = {name: (route, body) for name, route, body in VALIDATION_CASES}


def chat(**kw) -> dict:
    return {"model": MODEL, "messages": [U], "max_tokens": 2, **kw}


def comp(**kw) -> dict:
    return {"model": MODEL, "prompt": "Hello", "max_tokens": 2, **kw}


# More of the chat and completion bodies' validators (vLLM 0.32's answers), and their order: the
# one defined last runs first (pydantic's "before" model validators).
MORE = [
    ("tool_choice_auto_without_tools", "chat", chat(tool_choice="auto"),
     "When using `tool_choice`, `tools` must be set. (parameter=tool_choice)", "tool_choice"),
    ("tool_choice_function_not_object", "chat", chat(tools=[TOOL], tool_choice={"function": 5}),
     f"Invalid value for `function`: `5` in `tool_choice`! {USAGE} (parameter=tool_choice.function)",
     "tool_choice.function"),
    ("tool_choice_empty_name", "chat", chat(tools=[TOOL], tool_choice={"function": {"name": ""}}),
     f"Invalid `name` in `function`: `` in `tool_choice`! {USAGE} (parameter=tool_choice.function.name)",
     "tool_choice.function.name"),
    ("tool_choice_number", "chat", chat(tools=[TOOL], tool_choice=5),
     'Invalid value for `tool_choice`: 5! Only named tools, "none", "auto" or "required" are supported. '
     "(parameter=tool_choice)", "tool_choice"),
    ("structured_and_named_tool", "chat",
     chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "f"}}, structured_outputs={"regex": "a"}),
     "You can only either use constraints for structured outputs or tools, not both.", None),
    ("top_logprobs_without_logprobs", "chat", chat(logprobs=False, top_logprobs=2),
     "when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)", "top_logprobs"),
    ("prompt_logprobs_negative", "chat", chat(prompt_logprobs=-2),
     "`prompt_logprobs` must be a positive value or -1. (parameter=prompt_logprobs, value=-2)", "prompt_logprobs"),
    ("prompt_logprobs_streamed", "chat", chat(stream=True, prompt_logprobs=1),
     "`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)", "prompt_logprobs"),
    ("logprob_token_ids_without_logprobs", "chat", chat(logprob_token_ids=[1]),
     "when using `logprob_token_ids`, `logprobs` must be set to true. (parameter=logprob_token_ids)",
     "logprob_token_ids"),
    ("json_schema_missing", "chat", chat(response_format={"type": "json_schema"}),
     "When response_format type is 'json_schema', the 'json_schema' field must be provided. "
     "(parameter=response_format)", "response_format"),
    ("comp_prompt_logprobs_negative", "comp", comp(prompt_logprobs=-2),
     "`prompt_logprobs` must be a positive value or -1. (parameter=prompt_logprobs, value=-2)", "prompt_logprobs"),
    ("comp_prompt_logprobs_streamed", "comp", comp(stream=True, prompt_logprobs=1),
     "`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)", "prompt_logprobs"),
    ("comp_logprob_token_ids_without_logprobs", "comp", comp(logprob_token_ids=[1]),
     "when using `logprob_token_ids`, `logprobs` must be set. (parameter=logprob_token_ids)", "logprob_token_ids"),
    # the order: empty tools before stream options and the cache salt; the generation prompt first
    ("order_tools_before_stream_options", "chat", chat(stream_options={"include_usage": True}, tools=[]),
     "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely. "
     "(parameter=tools)", "tools"),
    ("order_tools_before_cache_salt", "chat", chat(cache_salt="", tools=[]),
     "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely. "
     "(parameter=tools)", "tools"),
    ("order_generation_prompt_first", "chat",
     chat(messages=[U, {"role": "assistant", "content": "x"}], continue_final_message=True, tools=[]),
     "Cannot set both `continue_final_message` and `add_generation_prompt` to True.", None),
    # before the model is looked up (vLLM validates the body first)
    ("before_the_model", "chat", {**chat(stream_options={"include_usage": True}), "model": "no-such-model"},
     "Stream options can only be defined when `stream=True`. (parameter=stream_options)", "stream_options"),
]


@pytest.mark.parametrize("name", sorted(VLLM_ANSWERS))
def test_validation_case_answers_as_vllm(client, name):
    route, body = CASES[name]
    message, param = VLLM_ANSWERS[name]
    r = client.post(ROUTES[route], json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["message"] == message
    if param is not ...:
        assert err["param"] == param
    assert err["type"] == "BadRequestError"


@pytest.mark.parametrize("route,body,message,param", [c[1:] for c in MORE], ids=[c[0] for c in MORE])
def test_body_validator_answers_as_vllm(client, route, body, message, param):
    r = client.post(ROUTES[route], json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["message"], err["param"]) == (message, param)


def test_stream_options_with_stream_and_tool_choice_none_pass(client):
    """What the validators let through: stream options with `stream`, `tool_choice: "none"`
    without tools, an empty `stream_options` without `stream`, a named tool choice without its
    `type` (vLLM's default: "function"), structured outputs without a tool choice or with
    "none"."""
    for body in (chat(stream=True, stream_options={"include_usage": True}), chat(tool_choice="none"),
                 chat(stream_options={}), chat(tools=[TOOL], tool_choice={"function": {"name": "f"}}),
                 chat(structured_outputs={"choice": ["a", "b"]}),
                 chat(tools=[TOOL], tool_choice="none", structured_outputs={"regex": "a"})):
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, (body, r.text)
