"""Prompt logprobs (`prompt_logprobs`, completions' `echo` + `logprobs`) and beam search
(`use_beam_search`) against vLLM's own server, each on its own real CPU engine (`tiny_pair`).

Beam search runs in the frontend on both sides (one-token engine requests with logprobs), so the
beams, their texts, token ids, finish reasons and usage must be vLLM's. Logprob values come from
two engines that batch differently; they are compared to 1e-3.
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.vllm_pair import MODEL

pytestmark = pytest.mark.real_engine

ROUTES = {"chat": "/v1/chat/completions", "comp": "/v1/completions"}
MSGS = [{"role": "user", "content": "Write a short poem about the sea."}]


def _post(base: str, route: str, body: dict) -> httpx.Response:
    return httpx.post(base + ROUTES[route], json=body, timeout=300)


def _both(pair, route: str, body: dict) -> tuple[dict, dict]:
    a, b = _post(pair.ours, route, body), _post(pair.vllm, route, body)
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    return a.json(), b.json()


def _close(a: Any, b: Any, path: str = "") -> None:
    """Equal JSON, floats to 1e-3 (logprob values of two engines)."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), (path, a, b)
        assert math.isclose(a, b, abs_tol=1e-3), (path, a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), (path, a, b)
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    else:
        assert a == b, (path, a, b)


# -------------------------------------------------------------------------- prompt logprobs

@pytest.mark.parametrize("route,body", [
    ("comp", {"prompt": "The capital of France is", "prompt_logprobs": 2}),
    ("comp", {"prompt": [[100, 200, 300, 400], [500, 600]], "prompt_logprobs": 0, "n": 2, "temperature": 1.0,
              "seed": 3}),
    ("chat", {"messages": MSGS, "prompt_logprobs": 3}),
    ("chat", {"messages": MSGS, "prompt_logprobs": 1, "logprobs": True, "top_logprobs": 2}),
], ids=["comp", "comp_token_prompts_n2", "chat", "chat_with_logprobs"])
def test_prompt_logprobs_as_vllm(tiny_pair, route, body):
    body = {"model": MODEL, "max_tokens": 4, "temperature": 0, **body}
    ours, theirs = _both(tiny_pair, route, body)
    if route == "chat":
        _close(ours["prompt_logprobs"], theirs["prompt_logprobs"])
        assert ours["prompt_logprobs"][0] is None and len(ours["prompt_logprobs"]) == ours["usage"]["prompt_tokens"]
        _close(ours["choices"][0]["logprobs"], theirs["choices"][0]["logprobs"])
    else:
        for a, b in zip(ours["choices"], theirs["choices"], strict=True):
            _close(a["prompt_logprobs"], b["prompt_logprobs"])
            assert a["text"] == b["text"]
    # Position 0 has none; every other position lists the prompt token first, then the top-K.
    plp = ours["prompt_logprobs"] if route == "chat" else ours["choices"][0]["prompt_logprobs"]
    k = body["prompt_logprobs"]
    assert all(k <= len(entry) <= k + 1 for entry in plp[1:])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("body", [
    {"prompt": "The capital of France is", "echo": True, "logprobs": 2},
    {"prompt": [[100, 200, 300], [400, 500]], "echo": True, "logprobs": 0, "max_tokens": 3},
], ids=["text", "token_prompts"])
def test_echo_with_logprobs_as_vllm(tiny_pair, body, stream):
    """`echo` + `logprobs` (a 400 before): the prompt's tokens open `logprobs`, the first one with
    no logprob, as vLLM's."""
    body = {"model": MODEL, "max_tokens": 5, "temperature": 0, **body, "stream": stream}

    def collect(base: str) -> list[dict]:
        r = _post(base, "comp", body)
        assert r.status_code == 200, r.text
        if not stream:
            return [{"text": c["text"], **c["logprobs"]} for c in r.json()["choices"]]
        out: dict[int, dict] = {}
        for line in r.text.splitlines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for c in json.loads(line[6:])["choices"]:
                acc = out.setdefault(c["index"], {"text": "", "text_offset": [], "token_logprobs": [],
                                                  "tokens": [], "top_logprobs": []})
                acc["text"] += c["text"]
                for k in ("text_offset", "token_logprobs", "tokens", "top_logprobs"):
                    acc[k] += (c["logprobs"] or {}).get(k, [])
        return [out[i] for i in sorted(out)]

    ours, theirs = collect(tiny_pair.ours), collect(tiny_pair.vllm)
    _close(ours, theirs)
    assert ours[0]["token_logprobs"][0] is None and ours[0]["top_logprobs"][0] is None
    assert ours[0]["text_offset"][0] == 0


@pytest.mark.parametrize("route,body", [
    ("comp", {"prompt": "Hi", "prompt_logprobs": 1, "stream": True}),
    ("chat", {"messages": MSGS, "prompt_logprobs": 1, "stream": True}),
    ("comp", {"prompt": "Hi", "prompt_logprobs": -2}),
    ("chat", {"messages": MSGS, "prompt_logprobs": -2}),
    ("comp", {"prompt": "Hi", "prompt_logprobs": 50}),
    ("comp", {"prompt": "Hi", "prompt_logprobs": -1}),  # the whole vocabulary: past --max-logprobs
    ("comp", {"prompt": "Hi", "use_beam_search": True, "n": 2, "stream": True}),
    ("comp", {"prompt": "Hi", "use_beam_search": True, "n": 2, "echo": True, "logprobs": 1}),
], ids=["comp_stream", "chat_stream", "comp_negative", "chat_negative", "comp_too_many", "comp_all", "beam_comp_stream",
        "beam_echo_logprobs"])
def test_refused_as_vllm(tiny_pair, route, body):
    body = {"model": MODEL, "max_tokens": 3, **body}
    a, b = _post(tiny_pair.ours, route, body), _post(tiny_pair.vllm, route, body)
    assert a.status_code == b.status_code == 400, (a.text, b.text)


def test_no_runtime_lora_routes_without_the_env_var(tiny_pair):
    """VLLM_ALLOW_RUNTIME_LORA_UPDATING unset: vLLM has no load/unload routes (404)."""
    for path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        body = {"lora_name": "x", "lora_path": "/tmp/x"}
        a = httpx.post(tiny_pair.ours + path, json=body, timeout=30)
        b = httpx.post(tiny_pair.vllm + path, json=body, timeout=30)
        assert a.status_code == b.status_code == 404


# -------------------------------------------------------------------------- beam search

def _beams(route: str, payload: dict) -> dict:
    choices = []
    for c in payload["choices"]:
        text = c["message"]["content"] if route == "chat" else c["text"]
        lp = c.get("logprobs")
        choices.append({"index": c["index"], "text": text, "finish": c["finish_reason"], "stop": c.get("stop_reason"),
                        "token_ids": c.get("token_ids"), "logprobs": lp})
    u = payload["usage"]
    return {"choices": choices, "usage": (u["prompt_tokens"], u["completion_tokens"], u["total_tokens"])}


@pytest.mark.parametrize("route,body", [
    ("comp", {"prompt": "The capital of France is", "n": 3, "max_tokens": 6, "temperature": 0}),
    ("comp", {"prompt": "Once upon a time", "n": 2, "max_tokens": 5, "length_penalty": 0.5,
              "return_token_ids": True}),
    ("comp", {"prompt": ["Hello", "Goodbye my friend"], "n": 2, "max_tokens": 4, "temperature": 0,
              "logprobs": 2}),
    ("comp", {"prompt": "The sea", "n": 2, "max_tokens": 4, "temperature": 0, "ignore_eos": True,
              "stop": ["e"], "early_stopping": True}),
    ("chat", {"messages": MSGS, "n": 2, "max_tokens": 5, "temperature": 0, "return_token_ids": True}),
    # Greedy: each beam step's engine request also samples one token, and vLLM's beam search
    # lists it among the token's alternatives; at temperature 1 that one is random on both sides.
    ("chat", {"messages": MSGS, "n": 3, "max_tokens": 4, "logprobs": True, "top_logprobs": 2, "temperature": 0}),
], ids=["comp_n3", "comp_length_penalty_default_temperature", "comp_2prompts_logprobs", "comp_stop_ignored",
        "chat_n2", "chat_n3_logprobs"])
def test_beam_search_as_vllm(tiny_pair, route, body):
    body = {"model": MODEL, "use_beam_search": True, **body}
    ours, theirs = _both(tiny_pair, route, body)
    a, b = _beams(route, ours), _beams(route, theirs)
    _close(a, b)
    assert len(a["choices"]) == body["n"] * (len(body["prompt"]) if isinstance(body.get("prompt"), list) else 1)
    # Beam search is not sampling: the beams differ from each other.
    texts = [c["text"] for c in a["choices"][:body["n"]]]
    assert len(set(texts)) == len(texts)


def test_beam_search_streamed_chat_as_vllm(tiny_pair):
    """Streamed chat with beam search: the whole answer at once, one choice per beam."""
    body = {"model": MODEL, "messages": MSGS, "use_beam_search": True, "n": 2, "max_tokens": 4, "temperature": 0,
            "stream": True}

    def texts(base: str) -> dict[int, str]:
        r = _post(base, "chat", body)
        assert r.status_code == 200
        out: dict[int, str] = {}
        for line in r.text.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for c in json.loads(line[6:])["choices"]:
                    out[c["index"]] = out.get(c["index"], "") + (c["delta"].get("content") or "")
        return out

    assert texts(tiny_pair.ours) == texts(tiny_pair.vllm)


def test_beam_search_through_the_openai_client(tiny_pair):
    c = openai.OpenAI(base_url=tiny_pair.ours + "/v1", api_key="none", max_retries=0, timeout=300)
    r = c.completions.create(model=MODEL, prompt="Hello", n=2, max_tokens=3, temperature=0,
                             extra_body={"use_beam_search": True})
    assert len(r.choices) == 2 and r.choices[0].text != r.choices[1].text
    assert r.usage.completion_tokens > 0
