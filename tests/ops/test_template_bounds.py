"""Chat template rendering is bounded: templates that loop (practically) forever, recurse, or
build huge strings are cut off with a clear error — in the renderer, and as a 400 through the
server when a trusted request brings such a template (`--trust-request-chat-template`)."""

from __future__ import annotations

import time

import openai
import pytest

from vllm_pyfrontend.chat.template import ChatTemplate, ChatTemplateError
from tests.inprocess import InProcessStack

MODEL = "demo:deepseek-v4"
MESSAGES = [{"role": "user", "content": "hi"}]

RUNAWAY = {
    # 10^8 loop iterations doing nothing: only the work budget stops it.
    "nested_loops": "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
    "triple_loops": ("{% for i in range(10000) %}{% for j in range(10000) %}{% for k in range(10000) %}"
                     "{{ k }}{% endfor %}{% endfor %}{% endfor %}"),
    "recursive_macro": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "recursive_loop": "{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}",
    "doubling_string": ("{% set ns = namespace(s='x') %}{% for i in range(100) %}"
                        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}"),
    "huge_repeat": "{{ ('x' * 10000000000)|length }}",
    "output_flood": "{% for i in range(10000) %}{{ 'x' * 1000000 }}{% endfor %}",
}


@pytest.mark.parametrize("name", sorted(RUNAWAY))
def test_runaway_templates_are_cut_off(name):
    template = ChatTemplate(RUNAWAY[name])
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError) as e:
        template.render(MESSAGES)
    # Not a timing assertion: a generous sanity bound so a regression to "forever" fails loudly.
    assert time.monotonic() - t0 < 60
    assert "work budget" in str(e.value) or "recursion" in str(e.value)


@pytest.fixture(scope="module")
def trusting_stack():
    s = InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.005", "--max-model-len", "4096",
                        "--served-model-name", "dsv4", "--trust-request-chat-template", MODEL], ready_timeout=120)
    yield s
    s.terminate()


def test_trusted_request_template_is_used(trusting_stack):
    client = openai.OpenAI(base_url=trusting_stack.base_url + "/v1", api_key="x", max_retries=0, timeout=60)
    r = client.chat.completions.create(model="dsv4", messages=MESSAGES, max_tokens=2,
                                       extra_body={"chat_template": "{{ messages[0].content }}!!"})
    assert r.usage.prompt_tokens < 10  # the tiny request template, not the model's


def test_looping_request_template_gets_a_clear_400(trusting_stack):
    client = openai.OpenAI(base_url=trusting_stack.base_url + "/v1", api_key="x", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="dsv4", messages=MESSAGES, max_tokens=2,
                                       extra_body={"chat_template": RUNAWAY["nested_loops"]})
    assert e.value.status_code == 400
    assert "work budget" in e.value.body["message"]
    # The worker is fine afterwards.
    r = client.chat.completions.create(model="dsv4", messages=MESSAGES, max_tokens=2)
    assert r.usage.completion_tokens == 2
