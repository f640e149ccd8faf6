"""Every check vLLM's Python server makes before it generates (tests/e2e/validation_cases.py),
sent to vLLM's server and to this frontend, each on its own real engine: the status codes must
agree. A request vLLM refuses must not cost engine time here (e.g. `max_tokens` past the context
length, which would otherwise generate to the context limit)."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.validation_cases import MODEL, STRICTER_THAN_VLLM, VALIDATION_CASES

pytestmark = pytest.mark.real_engine

ROUTES = {"chat": "/v1/chat/completions", "comp": "/v1/completions"}


@pytest.fixture(scope="module")
def servers(tiny_pair):
    return tiny_pair.ours, tiny_pair.vllm


@pytest.mark.parametrize("name,route,body", VALIDATION_CASES, ids=[c[0] for c in VALIDATION_CASES])
def test_same_status_as_vllm(servers, name, route, body):
    ours_url, vllm_url = servers
    ours = httpx.post(ours_url + ROUTES[route], json=body, timeout=120)
    theirs = httpx.post(vllm_url + ROUTES[route], json=body, timeout=120)
    if name in STRICTER_THAN_VLLM:
        assert ours.status_code == 400, f"{name}: {ours.text} ({STRICTER_THAN_VLLM[name]})"
        assert theirs.status_code == 200, f"{name}: vLLM changed? {theirs.text}"
        return
    assert ours.status_code == theirs.status_code, f"{name}: ours {ours.text[:300]} / vLLM {theirs.text[:300]}"
    if ours.status_code == 400:
        err = ours.json()["error"]
        assert err["code"] == 400 and err["type"] == "BadRequestError" and err["message"]


# Routes gated off by default (scale-out, development, profiler, tokenizer info): checked in
# tests/e2e/test_lora.py, on the one pair started without the flags that turn them on (the session
# pair has them on, for tests/e2e/test_scale_out_and_admin.py).


# vLLM's X-data-parallel-rank header (a router's choice of engine) on a deployment of one engine.
RANKS = ["0", "1", "-1", "one", ""]


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("rank", RANKS, ids=[r or "empty" for r in RANKS])
def test_data_parallel_rank_header_as_vllm(servers, route, rank):
    ours_url, vllm_url = servers
    body = {"model": MODEL, "max_tokens": 2}
    body.update({"messages": [{"role": "user", "content": "Hi"}]} if route == "chat" else {"prompt": "Hi"})
    headers = {"X-data-parallel-rank": rank}
    ours = httpx.post(ours_url + ROUTES[route], json=body, headers=headers, timeout=120)
    theirs = httpx.post(vllm_url + ROUTES[route], json=body, headers=headers, timeout=120)
    assert ours.status_code == theirs.status_code, f"ours {ours.text[:300]} / vLLM {theirs.text[:300]}"
    if theirs.status_code == 400:
        assert ours.json()["error"]["message"] == theirs.json()["error"]["message"], (ours.text, theirs.text)
