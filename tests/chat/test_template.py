"""ChatTemplate: HF-compatible rendering (checked against transformers' jinja2 renderer)."""

from __future__ import annotations

import json
import os

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from vllm_pyfrontend.chat.template import ChatTemplate, ChatTemplateError, load_chat_template

# A ChatML/Qwen-style template with tools, in the HF dialect.
CHATML = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "system" and loop.first %}{% continue %}{% endif %}
    {%- if message.role == "user" or message.role == "system" %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content.strip() + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.reasoning_content %}
            {{- '\\n<think>\\n' + message.reasoning_content.strip('\\n') + '\\n</think>' }}
        {%- endif %}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- set tool_call = tool_call.function if tool_call.function is defined else tool_call %}
            {{- '\\n<tool_call>\\n{"name": "' }}{{ tool_call.name }}{{ '", "arguments": ' }}{{ tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Exercises filters/methods/whitespace control the HF dialect relies on.
FEATURES = """{{ bos_token }}
{% for m in messages %}
  {% if loop.index > 3 %}{% break %}{% endif %}
  [{{ loop.index0 }}|{{ m.role | upper }}|{{ m.content.replace('a', 'A') | trim }}|{{ m.content.split() | length }}|{{ m.content.startswith('He') }}|{{ m.content | title }}]
  {% for k, v in m.items() %}{{ k }}={{ v | string | length }};{% endfor %}
  {{ m.get('name', 'anon') }} {{ m.keys() | list | length }}
{% endfor %}
{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}count={{ ns.n }}
{{ tools | tojson(indent=2) }}
{{ {'é': [1, 2.5, none, true]} | tojson }}
{{ messages | map(attribute='role') | join(',') }} {{ messages | selectattr('role', 'equalto', 'user') | list | length }}
{{ "%s-%d" | format("x", 3) }} {{ [3, 1, 2] | sort | first }} {{ "abc"[1:] }} {{ "a,b".split(",")[-1] }} {{ 7 // 2 }} {{ 7 % 3 }}
{%- if add_generation_prompt %}GEN{% endif %}
{{ eos_token }}
"""

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "  Hello there, a question  "},
    {"role": "assistant", "content": "Answer é", "reasoning_content": "\nthink\n"},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris", "days": 2}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]
TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Weather ☀", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}


def hf_render(source: str, messages, **kw) -> str:
    # What vLLM hands HF: tool-call arguments parsed to objects, reasoning
    # under both names.
    msgs = json.loads(json.dumps(messages))
    for m in msgs:
        if m.get("reasoning_content") is not None:
            m["reasoning"] = m["reasoning_content"]
        for tc in m.get("tool_calls") or []:
            tc["function"]["arguments"] = json.loads(tc["function"]["arguments"])
    rendered, _ = render_jinja_template([msgs], chat_template=source, **SPECIAL, **kw)
    return rendered[0]


@pytest.mark.parametrize("source", [CHATML, FEATURES], ids=["chatml", "features"])
@pytest.mark.parametrize("gen", [True, False])
@pytest.mark.parametrize("with_tools", [True, False])
def test_matches_transformers(source: str, gen: bool, with_tools: bool) -> None:
    tools = TOOLS if with_tools else None
    want = hf_render(source, MESSAGES, tools=tools, add_generation_prompt=gen)
    got = ChatTemplate(source).render(MESSAGES, tools=tools, add_generation_prompt=gen, template_vars=SPECIAL)
    assert got == want


def test_continue_final_message_matches_transformers() -> None:
    msgs = MESSAGES[:2] + [{"role": "assistant", "content": "The answer is"}]
    want = hf_render(CHATML, msgs, continue_final_message=True)
    got = ChatTemplate(CHATML).render(msgs, add_generation_prompt=False, continue_final_message=True)
    assert got == want and got.endswith("The answer is")
    # List content: the last text block is continued.
    msgs2 = MESSAGES[:2] + [{"role": "assistant", "content": [{"type": "text", "text": "Part"}]}]
    tpl = ChatTemplate("{% for m in messages %}<{{ m.role }}>{% for b in m.content if b is mapping %}{{ b.text }}{% endfor %}{% if m.content is string %}{{ m.content }}{% endif %}</{{ m.role }}>{% endfor %}")
    assert tpl.render(msgs2, add_generation_prompt=False, continue_final_message=True).endswith("<assistant>Part")
    with pytest.raises(ChatTemplateError):
        ChatTemplate(CHATML).render(msgs, add_generation_prompt=True, continue_final_message=True)


def test_kwargs_and_reserved_names() -> None:
    tpl = ChatTemplate("{{ messages | length }} {{ flag }} {{ bos_token }} {{ tools is none }}")
    out = tpl.render([{"role": "user", "content": "x"}], template_vars={"bos_token": "<s>"}, chat_template_kwargs={"flag": "on", "messages": [], "bos_token": "B"})
    assert out == "1 on B True"


def test_strftime_now_and_raise_exception() -> None:
    tpl = ChatTemplate("{{ strftime_now('%Y') }}{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}")
    assert len(tpl.render([{"role": "user", "content": "x"}])) == 4
    with pytest.raises(ChatTemplateError, match="first message must be from the user"):
        tpl.render([{"role": "assistant", "content": "x"}])


def test_errors_are_chat_template_errors() -> None:
    with pytest.raises(ChatTemplateError, match="invalid chat template"):
        ChatTemplate("{% if %}")
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{{ messages[0].content.nope() }}").render([{"role": "user", "content": "x"}])
    with pytest.raises(ChatTemplateError):
        ChatTemplate("x").render(["not a dict"])  # type: ignore[list-item]


def test_rendering_is_bounded() -> None:
    msgs = [{"role": "user", "content": "x"}]
    runaway = "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}"
    with pytest.raises(ChatTemplateError, match="budget"):
        ChatTemplate(runaway).render(msgs)
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").render(msgs)
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{% set ns = namespace(s='xy') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}").render(msgs)
    with pytest.raises(ChatTemplateError, match="exceeds"):
        ChatTemplate("{{ messages[0].content }}{{ messages[0].content }}", max_output_chars=10).render([{"role": "user", "content": "123456"}])


def test_budget_scales_with_conversation() -> None:
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 200} for i in range(2000)]
    out = ChatTemplate(CHATML).render(msgs)
    assert out.count("<|im_start|>") == 2001


def test_load_chat_template(tmp_path) -> None:
    assert load_chat_template(None) is None
    d = tmp_path / "model"
    d.mkdir()
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": "CFG{{ messages|length }}"}))
    assert load_chat_template(str(d)).render([]) == "CFG0"
    f = tmp_path / "t.jinja"
    f.write_text("FILE")
    assert load_chat_template(str(d), str(f)).render([]) == "FILE"
    assert load_chat_template(str(d), "INLINE{{ 1 + 1 }}").render([]) == "INLINE2"
    assert "DeepSeek V4" in load_chat_template(None, "deepseek_v4").source
    with pytest.raises(ChatTemplateError):
        load_chat_template(str(d), "/no/such/file.jinja")
    (d / "tokenizer_config.json").write_text("{}")
    assert load_chat_template(str(d)) is None
    assert os.path.isdir(d)
