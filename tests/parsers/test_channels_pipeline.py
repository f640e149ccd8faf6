"""Formats that drop framing markers (channels.py) behind the reasoning parser, in the pipeline."""

from __future__ import annotations

import json
import random

from tests.parsers.harness import random_char_splits
from vllm_pyfrontend.parsers.pipeline import make_assistant_stream

KIMI_K3 = (
    "<|open|>response<|sep|>Let me check.<|close|>response<|sep|><|open|>tools<|sep|>"
    '<|open|>call tool="get_weather" index="1"<|sep|>'
    '<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>'
    '<|open|>argument key="days" type="integer"<|sep|>3<|close|>argument<|sep|>'
    "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
)
INKLING = (
    "<think>plan</think><|message_model|><|content_text|>Let me check.<|end_message|>"
    '<|message_model|><|content_invoke_tool_json|>{"name": "get_weather", "args": {"city": "Paris", "days": 3}}'
    "<|end_message|>"
)


def _run(reasoning: str | None, tool: str, chunks: list[str]) -> tuple[str, str, list[tuple[str, dict]], int]:
    p = make_assistant_stream(reasoning, tool, None)
    outs = [p.feed(c) for c in chunks] + [p.finish()]
    outs = [o for o in outs if o is not None]
    calls: dict[int, list[str]] = {}
    for o in outs:
        for item in o.tool_calls:
            slot = calls.setdefault(item["index"], ["", ""])
            slot[0] += item["function"].get("name", "")
            slot[1] += item["function"].get("arguments", "")
    return (
        "".join(o.content or "" for o in outs),
        "".join(o.reasoning or "" for o in outs),
        [(n, json.loads(a)) for n, a in calls.values()],
        p.n_tool_calls,
    )


def test_kimi_k3_response_channel_and_call_any_split() -> None:
    want = ("Let me check.", "", [("get_weather", {"city": "Paris", "days": 3})], 1)
    assert _run(None, "kimi_k3", [KIMI_K3]) == want
    rng = random.Random(7)
    for _ in range(20):
        assert _run(None, "kimi_k3", random_char_splits(KIMI_K3, rng)) == want


def test_inkling_blocks_behind_a_reasoning_parser_any_split() -> None:
    want = ("Let me check.", "plan", [("get_weather", {"city": "Paris", "days": 3})], 1)
    assert _run("deepseek_r1", "inkling", [INKLING]) == want
    rng = random.Random(11)
    for _ in range(20):
        assert _run("deepseek_r1", "inkling", random_char_splits(INKLING, rng)) == want
