"""chat/renderers: a Python renderer registered for a template renders what the template
renders, for every input it accepts, and declines the rest (which the template renders)."""

from __future__ import annotations

import random

from vllm_pyfrontend.chat import renderers
from vllm_pyfrontend.chat.template import ChatTemplate, bundled_template_path


def _source() -> str:
    with open(bundled_template_path("deepseek_v4"), encoding="utf-8") as f:
        return f.read()


def _template_only(source: str) -> ChatTemplate:
    t = ChatTemplate(source)
    t._renderer = None  # the template itself renders everything
    return t


def test_the_deepseek_v4_renderer_is_keyed_by_the_exact_template() -> None:
    source = _source()
    assert renderers.renderer_for(source) is not None
    assert renderers.renderer_for(source + " ") is None
    assert ChatTemplate(source)._renderer is not None
    assert ChatTemplate("{{ messages[0].content }}")._renderer is None


_WORDS = ["Paris", "天气", " ", "\n", "<｜User｜>", "</think>", "{\"a\": 1}", "é", "", "\\", "\"q\"", "ok"]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 6)))


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 2 else 5)
    if kind == 0:
        return _text(rng)
    if kind == 1:
        return rng.randint(-5, 10**12)
    if kind == 2:
        return rng.choice([0.5, 1.0, -2.25, 1e-7])
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return None
    if kind == 5:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {_text(rng) or "k": _value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def _tool(rng: random.Random) -> dict:
    fn = {"name": rng.choice(["get_weather", "run", "ä_tool"])}
    if rng.random() < 0.7:
        fn["description"] = _text(rng)
    if rng.random() < 0.8:
        fn["parameters"] = {"type": "object", "properties": {
            _text(rng) or "p": {"type": rng.choice(["string", "number"]), "enum": [_value(rng) for _ in range(2)]}
            for _ in range(rng.randint(0, 3))}, "required": []}
    if rng.random() < 0.3:
        fn["strict"] = _value(rng)
    return {"type": "function", "function": fn}


def _kwargs(rng: random.Random) -> dict:
    out = {}
    for key, values in (
        ("thinking", [True, False, None, "", 1, "yes", 0]),
        ("enable_thinking", [True, False, None]),
        ("reasoning_effort", [None, "none", "max", "low", "minimal", "medium", "high", "xhigh", 3, ""]),
        ("drop_thinking", [True, False]),
        ("other", ["x"]),
    ):
        if rng.random() < 0.4:
            out[key] = rng.choice(values)
    return out


def test_deepseek_v4_renderer_equals_the_template() -> None:
    source = _source()
    fast, slow = ChatTemplate(source), _template_only(source)
    rng = random.Random(4)
    taken = declined = 0
    for _ in range(1500):
        messages = [{"role": "user", "content": _text(rng)}]
        if rng.random() < 0.5:
            messages.insert(0, {"role": "system", "content": _text(rng)})
        # inputs the renderer must leave to the template
        r = rng.random()
        if r < 0.05:
            messages.append({"role": "assistant", "content": "a"})
        elif r < 0.1:
            messages[-1]["content"] = [{"type": "text", "text": "x"}, {"type": "text", "text": _text(rng)}]
        elif r < 0.13:
            messages[-1]["task"] = rng.choice(["query", "action", None])
        elif r < 0.16:
            messages[0] = {"role": "developer", "content": "d"}
        elif r < 0.19 and len(messages) == 2:
            messages[0]["content"] = None
        elif r < 0.22:
            messages = [{"role": "user", "content": "1"}, {"role": "user", "content": "2"}]
        tools = None
        t = rng.random()
        if t < 0.5:
            tools = [_tool(rng) for _ in range(rng.randint(1, 3))]
        elif t < 0.6:
            tools = []
        kwargs = _kwargs(rng)
        want = slow.render(messages, tools=tools, chat_template_kwargs=kwargs)
        got = fast.render(messages, tools=tools, chat_template_kwargs=kwargs)
        assert got == want, (messages, tools, kwargs)
        took = fast._renderer(messages, tools, {**kwargs, "messages": messages, "tools": tools}) is not None
        taken += took
        declined += not took
    assert taken > 1000 and declined > 100, (taken, declined)


def test_renderer_output_still_obeys_the_output_limit() -> None:
    import pytest

    from vllm_pyfrontend.chat.template import ChatTemplateError

    t = ChatTemplate(_source(), max_output_chars=100)
    assert t._renderer is not None
    with pytest.raises(ChatTemplateError, match="exceeds 100"):
        t.render([{"role": "user", "content": "x" * 200}])


def test_tool_json_memo_tells_apart_what_json_tells_apart():
    """`tojson_tool` remembers a tool's JSON by its msgpack bytes: values whose JSON differs
    (NaN and None, 1 and 1.0, true and 1) never share an entry, and a value that msgpack cannot
    hold still gets its JSON."""
    from vllm_pyfrontend.chat.template import _tojson, tojson_tool

    values = [{"a": None}, {"a": float("nan")}, {"a": 1}, {"a": 1.0}, {"a": True}, {"a": [1, 2]},
              {"a": (1, 2)}, {1: "x"}, {"1": "x"}, {"a": "é"}, {"a": 2**70}, {"d": {"b": 1, "a": 2}}]
    for _ in range(2):  # the second round reads the entries
        for v in values:
            assert tojson_tool(v) == _tojson(v)
