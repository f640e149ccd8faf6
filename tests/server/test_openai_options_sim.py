"""OpenAI request fields and `vllm serve` flags with vLLM's meaning, end to end on the simulated
engine: `return_tokens_as_token_ids`, `logprob_token_ids`, `truncation_side`, stream usage
options, custom roles, lax field types, pydantic's range error types, `/v1/models` root, and the
flags `--root-path`, `--response-role`, `--enable-force-include-usage`,
`--return-tokens-as-token-ids`, `--default-chat-template-kwargs`,
`--exclude-tools-when-tool-choice-none`, `--max-logprobs`."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from tests.inprocess import InProcessStack
from tests.stack import Stack

MODEL = "demo:deepseek-v4"
KEY = "sk-options"


@pytest.fixture(scope="module")
def plain():
    s = InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "4096",
                        "--served-model-name", "dsv4", "--max-logprobs", "64", "--trust-request-chat-template", MODEL],
                       ready_timeout=120, env={"VLLM_USE_RUST_FRONTEND": "1"})
    yield s
    assert s.terminate() == 0, s.logs()


@pytest.fixture(scope="module")
def flagged():
    s = Stack(["--engine", "sim", "--workers", "2", "--sim-step-time", "0.002", "--max-model-len", "4096",
               "--served-model-name", "dsv4", "--api-key", KEY, "--root-path", "/llm/",
               "--response-role", "helper", "--enable-force-include-usage", "--return-tokens-as-token-ids",
               "--default-chat-template-kwargs", '{"thinking": false}',
               "--exclude-tools-when-tool-choice-none", MODEL],
              ready_timeout=120)
    yield s
    assert s.terminate() == 0, s.logs()


def _client(stack, prefix: str = "", key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + prefix + "/v1", api_key=key, max_retries=0, timeout=30)


HELLO = [{"role": "user", "content": "Hello there"}]


def _ids(tokens) -> list[int]:
    assert all(t.startswith("token_id:") for t in tokens), tokens
    return [int(t.removeprefix("token_id:")) for t in tokens]


def test_return_tokens_as_token_ids_per_request(plain):
    c = _client(plain)
    r = c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=6, logprobs=True, top_logprobs=2,
                                  extra_body={"return_tokens_as_token_ids": True})
    content = r.choices[0].logprobs.content
    assert len(_ids([e.token for e in content])) == r.usage.completion_tokens == 6
    for e in content:
        _ids([t.token for t in e.top_logprobs])
        assert len(e.top_logprobs) == 2
    text = c.completions.create(model="dsv4", prompt="Hello", max_tokens=5, logprobs=1,
                                extra_body={"return_tokens_as_token_ids": True})
    lp = text.choices[0].logprobs
    assert len(_ids(lp.tokens)) == 5
    assert [next(iter(d)) for d in lp.top_logprobs] == lp.tokens  # the sampled token comes first
    # streaming, and the default is text
    chunks = list(c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=4, logprobs=True, stream=True,
                                            extra_body={"return_tokens_as_token_ids": True}))
    streamed = [e.token for ch in chunks if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert len(_ids(streamed)) == 4
    plain_r = c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=3, logprobs=True)
    assert not any(e.token.startswith("token_id:") for e in plain_r.choices[0].logprobs.content)


def test_logprob_token_ids_lists_exactly_the_asked_ids(plain):
    c = _client(plain)
    r = c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=3, logprobs=True, top_logprobs=5,
                                  extra_body={"logprob_token_ids": [100, 2000], "return_tokens_as_token_ids": True})
    for e in r.choices[0].logprobs.content:
        sampled = _ids([e.token])[0]
        assert set(_ids([t.token for t in e.top_logprobs])) == {sampled, 100, 2000}
    t = c.completions.create(model="dsv4", prompt="Hello", max_tokens=2, logprobs=0,
                             extra_body={"logprob_token_ids": [7, 8]})
    assert all(len(d) == 3 for d in t.choices[0].logprobs.top_logprobs)
    with pytest.raises(openai.BadRequestError, match="logprobs` must be set to true"):
        c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=2, extra_body={"logprob_token_ids": [5]})
    with pytest.raises(openai.BadRequestError, match="beam search"):
        c.completions.create(model="dsv4", prompt="x", max_tokens=2, logprobs=1,
                             extra_body={"logprob_token_ids": [5], "use_beam_search": True})


def test_top_logprobs_minus_one_within_max_logprobs(plain):
    # -1 is the whole vocabulary; `--max-logprobs 64` (forwarded to the engine) is below it
    with pytest.raises(openai.BadRequestError, match="greater than max allowed: 64"):
        _client(plain).chat.completions.create(model="dsv4", messages=HELLO, max_tokens=1, logprobs=True,
                                               top_logprobs=-1)
    r = _client(plain).chat.completions.create(model="dsv4", messages=HELLO, max_tokens=1, logprobs=True,
                                               top_logprobs=64)
    assert 20 < len(r.choices[0].logprobs.content[0].top_logprobs) <= 64  # (the sim repeats some ids)


def test_truncation_side(plain):
    c = _client(plain)
    prompt = list(range(300, 320))
    right = c.completions.create(model="dsv4", prompt=prompt, max_tokens=1, echo=True,
                                 extra_body={"truncate_prompt_tokens": 5, "truncation_side": "right",
                                             "return_token_ids": True})
    left = c.completions.create(model="dsv4", prompt=prompt, max_tokens=1, echo=True,
                                extra_body={"truncate_prompt_tokens": 5, "return_token_ids": True})
    assert right.choices[0].prompt_token_ids == prompt[:5]
    assert left.choices[0].prompt_token_ids == prompt[-5:]


def test_stream_usage_options(plain):
    c = _client(plain)
    chunks = list(c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=3, stream=True,
                                            stream_options={"include_usage": False,
                                                            "continuous_usage_stats": True}))
    assert all(ch.usage is None for ch in chunks)
    chunks = list(c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=3, stream=True,
                                            stream_options={"include_usage": True,
                                                            "continuous_usage_stats": True}))
    assert all(ch.usage is not None for ch in chunks)
    for options in ({"include_usage": None}, {"include_usage": True}):
        with pytest.raises(openai.BadRequestError, match="stream=True"):
            c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=3, stream=False,
                                      stream_options=options)


def test_custom_roles_reach_the_template(plain):
    c = _client(plain)
    template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:"
    a = c.chat.completions.create(model="dsv4", messages=[{"role": "my-custom-role", "content": "what is 1+1?"}],
                                  temperature=0, max_tokens=5, extra_body={"chat_template": template})
    b = c.chat.completions.create(model="dsv4", messages=[{"role": "my-custom-role", "content": [
        {"type": "text", "text": "what is 1+1?"}]}], temperature=0, max_tokens=5, extra_body={"chat_template": template})
    assert a.choices[0].message.content == b.choices[0].message.content
    # the template decides what a role means: DeepSeek V4's refuses one it does not know
    with pytest.raises(openai.BadRequestError, match="Invalid role: my-custom-role"):
        c.chat.completions.create(model="dsv4", messages=[{"role": "my-custom-role", "content": "hi"}], max_tokens=2)


def test_lax_types_and_pydantic_range_errors(plain):
    url = plain.base_url + "/v1/chat/completions"
    body = {"model": "dsv4", "messages": HELLO, "max_tokens": "2", "logprobs": "true", "top_logprobs": 1}
    r = httpx.post(url, json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"][0]["logprobs"]["content"]) == 2
    for seed, kind in ((-(2**63) - 1, "greater_than_equal"), (2**63, "less_than_equal")):
        r = httpx.post(url, content=json.dumps({"model": "dsv4", "messages": HELLO, "seed": seed}), timeout=30,
                       headers={"content-type": "application/json"})
        assert r.status_code == 400 and kind in r.json()["error"]["message"], r.text


def test_models_root_and_version(plain):
    r = _client(plain).chat.completions.create(model="dsv4", messages=HELLO, max_tokens=1)
    assert r.system_fingerprint.startswith("vllm-0.32.0-")  # --fingerprint-mode full (one engine)
    models = httpx.get(plain.base_url + "/v1/models", timeout=10).json()["data"]
    assert models[0]["id"] == "dsv4" and models[0]["root"] == MODEL
    version = httpx.get(plain.base_url + "/version", timeout=10).json()
    assert version["rust_frontend_version"] == version["version"]


def test_root_path_serves_both_forms_behind_the_key(flagged):
    for prefix in ("", "/llm"):
        r = _client(flagged, prefix, KEY).chat.completions.create(model="dsv4", messages=HELLO, max_tokens=2)
        assert r.choices[0].message.role == "helper"  # --response-role
        with pytest.raises(openai.AuthenticationError):
            _client(flagged, prefix, "wrong").chat.completions.create(model="dsv4", messages=HELLO, max_tokens=2)
    assert httpx.get(flagged.base_url + "/llm/health", timeout=10).status_code == 200


def test_flags_for_every_request(flagged):
    c = _client(flagged, "", KEY)
    chunks = list(c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=3, stream=True, logprobs=True))
    assert chunks[0].choices[0].delta.role == "helper"
    assert all(ch.usage is not None for ch in chunks)  # --enable-force-include-usage: continuous too
    tokens = [e.token for ch in chunks if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert len(_ids(tokens)) == 3  # --return-tokens-as-token-ids
    # continuing a message keeps its role (vLLM's get_chat_request_role)
    r = c.chat.completions.create(model="dsv4", max_tokens=2, messages=[*HELLO, {"role": "assistant", "content": "Hi"}],
                                  extra_body={"add_generation_prompt": False, "continue_final_message": True})
    assert r.choices[0].message.role == "assistant"


def test_default_template_kwargs_and_tools_excluded_with_choice_none(flagged):
    c = _client(flagged, "", KEY)

    def prompt_tokens(**kw) -> int:
        return c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=1, **kw).usage.prompt_tokens

    default = prompt_tokens()
    assert prompt_tokens(extra_body={"chat_template_kwargs": {"thinking": False}}) == default
    assert prompt_tokens(extra_body={"chat_template_kwargs": {"thinking": True}}) != default
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}}}}}]
    assert prompt_tokens(tools=tools, tool_choice="none") == default


def test_load_counts_the_whole_deployment(flagged):
    """/load's server_load is every worker's in-flight requests, whichever worker answers."""
    c = _client(flagged, "", KEY)
    stream = c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=3000, stream=True,
                                       extra_body={"ignore_eos": True})
    next(iter(stream))  # admitted and generating
    try:
        answers: list[dict] = []
        while len({a["worker"] for a in answers}) < 2 and len(answers) < 200:  # until both answered
            answers.append(httpx.get(flagged.base_url + "/load", timeout=10).json())
        assert all(a["server_load"] == 1 for a in answers), answers
        assert sorted({a["worker_load"] for a in answers}) == [0, 1]
    finally:
        stream.close()


def test_kv_transfer_prompt_token_ids_skip_the_template(plain):
    """Disaggregated serving: the prefill stage's ids are the prompt (no template, no tokenizer)."""
    c = _client(plain)
    ids = [1000, 1001, 1002, 1003, 1004, 1005, 1006]
    r = c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=2,
                                  extra_body={"kv_transfer_params": {"prompt_token_ids": ids},
                                              "return_token_ids": True})
    assert r.usage.prompt_tokens == len(ids) and r.prompt_token_ids == ids
    echoed = c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=2,
                                       extra_body={"kv_transfer_params": {"prompt_token_ids": ids}, "echo": True})
    assert echoed.usage.prompt_tokens != len(ids)  # echo renders the messages: the ids are ignored
    for bad in ([], [1, -2], [10**9]):
        with pytest.raises(openai.BadRequestError, match="prompt_token_ids"):
            c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=2,
                                      extra_body={"kv_transfer_params": {"prompt_token_ids": bad}})


def test_request_mm_kwargs_need_the_trust_flag(plain):
    c = _client(plain)
    for field in ("mm_processor_kwargs", "media_io_kwargs"):
        value = {"num_crops": 4} if field == "mm_processor_kwargs" else {"video": {"num_frames": 4}}
        with pytest.raises(openai.BadRequestError, match="--trust-request-mm-kwargs"):
            c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=2, extra_body={field: value})


def test_fingerprint_mode_content_format_and_error_stacks():
    """--fingerprint-mode custom; --chat-template-content-format openai hands the template
    OpenAI's list of parts (a template that reads `content[0].text` sees the text);
    --log-error-stack puts an error response's stack trace in the log."""
    template = "{% for m in messages %}{{ m.role }}: {{ m.content[0].text }}\n{% endfor %}assistant:"
    s = InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--served-model-name", "dsv4",
                        "--fingerprint-mode", "custom", "--fingerprint-value", "fp-test",
                        "--chat-template-content-format", "openai", "--trust-request-chat-template",
                        "--log-error-stack", MODEL], ready_timeout=120)
    try:
        c = _client(s)
        r = c.chat.completions.create(model="dsv4", messages=[{"role": "user", "content": "a b c d e f g"}],
                                      max_tokens=2, extra_body={"chat_template": template})
        short = c.chat.completions.create(model="dsv4", messages=[{"role": "user", "content": "a"}], max_tokens=2,
                                          extra_body={"chat_template": template})
        assert r.system_fingerprint == "fp-test"
        assert r.usage.prompt_tokens > short.usage.prompt_tokens  # the text reached the template
        with pytest.raises(openai.BadRequestError):
            c.chat.completions.create(model="dsv4", messages=HELLO, max_tokens=-3)
        # The log line and its stack trace reach the supervisor's log as they are relayed
        # (possibly in several reads): wait for the trace after the line.
        marker = "error response 400 on POST /v1/chat/completions"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "Traceback" not in s.logs().partition(marker)[2]:
            time.sleep(0.1)
        assert "Traceback" in s.logs().partition(marker)[2], s.logs()[-2000:]
    finally:
        assert s.terminate() == 0, s.logs()


@pytest.mark.parametrize("body", [
    {"prompt": None, "prompt_embeds": []},  # vLLM's test_prompt_validation::test_empty_prompt
    {},
    {"prompt": ""},
    {"prompt": None, "max_tokens": "many"},  # vLLM checks this before any field
    {"model": "nope"},  # ... and before the model
])
def test_completion_needs_a_prompt_or_embeddings(plain, body):
    r = httpx.post(plain.base_url + "/v1/completions", json={"model": "dsv4", "max_tokens": 5, **body}, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {
        "message": "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
        "type": "BadRequestError", "param": "prompt", "code": 400}


def test_prompt_embeddings_need_the_engine_flag(plain):
    """vLLM loads prompt embeddings only with --enable-prompt-embeds (and never with echo or
    prompt logprobs); an empty list leaves the prompt alone."""
    c = _client(plain)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="dsv4", prompt=None, max_tokens=5, extra_body={"prompt_embeds": "AAAA"})
    assert e.value.body["message"] == (
        "You must set `--enable-prompt-embeds` to input `prompt_embeds`. (parameter=prompt_embeds)")
    assert e.value.body["param"] == "prompt_embeds"
    with pytest.raises(openai.BadRequestError, match="Echo is unsupported with prompt embeds."):
        c.completions.create(model="dsv4", prompt="Hi", echo=True, max_tokens=5, extra_body={"prompt_embeds": []})
    r = c.completions.create(model="dsv4", prompt="Hi", max_tokens=2, extra_body={"prompt_embeds": []})
    assert r.usage.completion_tokens == 2
    with pytest.raises(openai.BadRequestError, match="out of vocabulary"):
        c.completions.create(model="dsv4", prompt=[999999999], max_tokens=5)
