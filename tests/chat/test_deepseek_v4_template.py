"""frontend/chat/templates/deepseek_v4.jinja equals vLLM's DeepSeek V4 encoding.

Reference: vLLM's chat parser (content_format "openai", as its DeepSeek V4
renderer uses) followed by the DeepSeek V4 tokenizer wrapper's
apply_chat_template (-> deepseek_v4_encoding.encode_messages).
"""

from __future__ import annotations

import copy
import types

import pytest
from vllm.renderers import chat_utils
from vllm.tokenizers.deepseek_v4 import get_deepseek_v4_tokenizer

from vllm_pyfrontend.chat.template import ChatTemplate, ChatTemplateError, load_chat_template
from vllm_pyfrontend.supervisor.demo_model import deepseek_v4_template_path, materialize_deepseek_v4
from vllm_pyfrontend.text.tokenizer import Tokenizer


class _TextOnlyParser:
    """Stands in for vLLM's multimodal parser: accepts media, stores nothing."""

    model_config = types.SimpleNamespace(enable_prompt_embeds=False)

    def __getattr__(self, name):
        return lambda *a, **k: None


class _Tracker:
    def create_parser(self, **kwargs):
        return _TextOnlyParser()


class _BaseTok:
    def encode(self, text, add_special_tokens=False):
        return text

    def get_added_vocab(self):
        return {}


_WRAPPED = get_deepseek_v4_tokenizer(_BaseTok())


def vllm_prompt(messages, tools=None, **kwargs) -> str:
    raw = copy.deepcopy(messages)
    for m in raw:  # request validation: reasoning_content -> reasoning
        rc = m.pop("reasoning_content", None)
        if rc is not None and m.get("reasoning") is None:
            m["reasoning"] = rc
    conversation = []
    for m in raw:
        conversation.extend(chat_utils._parse_chat_message_content(m, _Tracker(), "openai", False))
    chat_utils._postprocess_messages(conversation)
    return _WRAPPED.apply_chat_template(raw, tools=tools, conversation=conversation, tokenize=False, **kwargs)


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city ☀", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": None, "parameters": {"type": "object", "properties": {}}, "strict": None}},
]

CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3, "opts": {"unit": "°C", "x": [1, 2.5, true, null]}}'}},
    {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": ""}},
]

CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    "multi_turn": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1", "reasoning": "R1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2", "reasoning_content": "R2"},
        {"role": "user", "content": "Q3"},
    ],
    "tool_round_trip": [
        {"role": "user", "content": "Weather in Paris and news?"},
        {"role": "assistant", "content": "Let me check.", "reasoning": "need tools", "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "call_2", "content": "no news"},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": "22°C"}]},
    ],
    "tool_then_answer_then_user": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": CALLS[:1]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        {"role": "assistant", "content": "It rains.", "reasoning": "saw result"},
        {"role": "user", "content": "Thanks"},
    ],
    "assistant_last": [
        {"role": "user", "content": "Say hi"},
        {"role": "assistant", "content": "hi", "reasoning": "easy"},
    ],
    "list_content_and_image": [
        {"role": "system", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]},
        {"role": "user", "content": [{"type": "text", "text": "look:"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}, {"type": "text", "text": "what is it?"}]},
    ],
    "consecutive_users": [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"},
    ],
    "developer": [
        {"role": "developer", "content": "dev rules"},
        {"role": "user", "content": "go"},
    ],
    "empty_and_none_content": [
        {"role": "system", "content": ""},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": None},
        {"role": "user", "content": "?"},
    ],
    "latest_reminder_and_task": [
        {"role": "user", "content": "classify this", "task": "query"},
        {"role": "latest_reminder", "content": "remember"},
        {"role": "user", "content": "act", "task": "action"},
    ],
    "trailing_system": [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "now answer"},
    ],
}

KWARGS = [
    {},
    {"thinking": False},
    {"thinking": True},
    {"enable_thinking": False},
    {"enable_thinking": True, "reasoning_effort": "max"},
    {"reasoning_effort": "none", "enable_thinking": False},
    {"reasoning_effort": "medium", "enable_thinking": True},
    {"reasoning_effort": "high"},
    {"thinking": None},
    {"drop_thinking": False},
]


@pytest.fixture(scope="module")
def template() -> ChatTemplate:
    return ChatTemplate(deepseek_v4_template_path().read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("with_tools", [False, True], ids=["no_tools", "tools"])
def test_equals_vllm_encode_messages(template: ChatTemplate, name: str, with_tools: bool) -> None:
    messages = CONVERSATIONS[name]
    tools = TOOLS if with_tools else None
    for kwargs in KWARGS:
        want = vllm_prompt(messages, tools=tools, **kwargs)
        got = template.render(copy.deepcopy(messages), tools=tools, chat_template_kwargs=kwargs)
        assert got == want, (name, kwargs)


def test_errors_like_vllm(template: ChatTemplate) -> None:
    with pytest.raises(ChatTemplateError, match="developer"):
        template.render([{"role": "developer", "content": ""}])
    with pytest.raises(ChatTemplateError, match="Invalid task"):
        template.render([{"role": "user", "content": "x", "task": "nope"}])
    with pytest.raises(ChatTemplateError, match="Invalid role"):
        template.render([{"role": "wizard", "content": "x"}])


def test_model_dir_uses_template_and_tokenizes(tmp_path) -> None:
    d = materialize_deepseek_v4(str(tmp_path / "m"))
    tok = Tokenizer.load(d, backend="tokenizers")
    tpl = load_chat_template(d)
    assert tpl is not None
    text = tpl.render([{"role": "user", "content": "Hi"}], template_vars=tok.template_vars())
    assert text == "<｜begin▁of▁sentence｜>" + vllm_prompt([{"role": "user", "content": "Hi"}])[len("<｜begin▁of▁sentence｜>"):]
    ids = tok.encode(text)
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.token_to_id("<think>")
    assert tok.token_to_id("<｜User｜>") in ids and tok.token_to_id("<｜Assistant｜>") in ids
