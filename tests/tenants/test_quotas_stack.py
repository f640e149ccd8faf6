"""Named keys with quotas end to end: the supervisor with four workers on the simulated engine,
a keys file (`--api-keys-file`) beside an anonymous `--api-key`, clients on the official
`openai` SDK (no retries) and raw sockets.

Every limit holds for the deployment, not per worker: requests come on new connections, which
SO_REUSEPORT spreads over the four workers, and the counts a worker checks are every worker's."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time

import openai
import pytest

from tests.reliability.helpers import (
    SERVED, chat_body, open_stream, read_until, request, sim_args, sse_events, wait_all_serving, wait_for,
)
from tests.stack import Stack

WORKERS = 4
KEYS = """
- {name: limited, key: key-limited, requests_per_second: 10}
- {name: free, key: key-free}
- {name: pair, key: key-pair, max_concurrency: 2}
- {name: metered, key: key-metered, tokens_per_minute: 400}
- {name: capped, key_sha256: %s, max_tokens: 8}
- {name: ops, key: key-ops, admin: true}
""" % hashlib.sha256(b"key-capped").hexdigest()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.yaml"
    path.write_text(KEYS)
    with Stack(sim_args("--api-keys-file", str(path), "--api-key", "key-anon", workers=WORKERS, step=0.01)) as s:
        wait_all_serving(s)
        yield s


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _chat(stack: Stack, key: str, **kw):
    return request(stack, "/v1/chat/completions", chat_body(**kw), headers=_auth(key))


def _messages(stack: Stack, key: str, **kw):
    body = {"model": SERVED, "max_tokens": 4, "messages": [{"role": "user", "content": "Hello"}], **kw}
    return request(stack, "/v1/messages", json.dumps(body).encode(), headers={"x-api-key": key})


def test_burst_past_the_rate_gets_429_while_another_tenant_is_unaffected(stack):
    async def burst():
        a = openai.AsyncOpenAI(base_url=stack.base_url + "/v1", api_key="key-limited", max_retries=0)
        b = openai.AsyncOpenAI(base_url=stack.base_url + "/v1", api_key="key-free", max_retries=0)

        async def one(client):
            try:
                r = await client.chat.completions.create(
                    model=SERVED, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
                return r.usage.completion_tokens
            except openai.RateLimitError as e:
                return e

        t0 = time.monotonic()
        results = await asyncio.gather(*[one(a) for _ in range(60)], *[one(b) for _ in range(30)])
        elapsed = time.monotonic() - t0
        await a.close()
        await b.close()
        return results[:60], results[60:], elapsed

    a, b, elapsed = asyncio.run(burst())
    limited = [r for r in a if isinstance(r, openai.RateLimitError)]
    served = [r for r in a if not isinstance(r, Exception)]
    assert limited, "no 429 for a burst past 10 requests per second"
    # At most 10 a second, deployment-wide (a worker may admit one more each at the same instant).
    assert len(served) <= 10 * (int(elapsed) + 1) + WORKERS - 1, (len(served), elapsed)
    for e in limited:
        assert e.status_code == 429
        assert int(e.response.headers["Retry-After"]) >= 1
        assert 0 < int(e.response.headers["retry-after-ms"]) <= 2000
        assert e.body["code"] == "rate_limit_exceeded" and e.body["type"] == "requests"
        assert "requests per second" in e.body["message"]
    assert all(r == 2 for r in b), [r for r in b if r != 2]  # never a 429, all served


def _long_stream(stack: Stack, key: str):
    s = open_stream(stack, chat_body(stream=True, max_tokens=900, ignore_eos=True), headers=_auth(key))
    first = read_until(s, b"data: ")
    assert b" 200 " in first.split(b"\r\n", 1)[0], first[:300]
    return s


def _refused_for_concurrency(stack: Stack) -> None:
    for _ in range(8):  # new connections: spread over the workers
        r = _chat(stack, "key-pair")
        assert r.status == 429, (r.status, r.body)
        err = r.json()["error"]
        assert err["code"] == "rate_limit_exceeded" and "Concurrency limit" in err["message"], err


def test_concurrency_limit_is_deployment_wide_and_every_end_gives_it_back(stack):
    streams = [_long_stream(stack, "key-pair") for _ in range(2)]
    _refused_for_concurrency(stack)
    # Anthropic's route answers in Anthropic's shape, Retry-After kept.
    r = _messages(stack, "key-pair")
    assert r.status == 429
    assert r.json() == {"type": "error", "error": {"type": "rate_limit_error", "message": r.json()["error"]["message"]}}
    assert "Concurrency limit" in r.json()["error"]["message"]
    # The clients go away mid-stream: their slots come back.
    for s in streams:
        s.close()
    wait_for(lambda: _chat(stack, "key-pair").status == 200, 20, "the slots given back", stack)
    # Requests that end in every other way: a refused body, a request the engine fails, a
    # streamed one that completes, an Anthropic one.
    for _ in range(3):
        assert request(stack, "/v1/chat/completions", b"{not json", headers=_auth("key-pair")).status == 400
        failed = _chat(stack, "key-pair", vllm_xargs={"sim_token_ids": ["x"]})
        assert failed.status >= 500, (failed.status, failed.body)
        assert _chat(stack, "key-pair", stream=True).status == 200
        assert _messages(stack, "key-pair").status == 200
    # Nothing leaked: exactly two requests fit again.
    streams = [_long_stream(stack, "key-pair") for _ in range(2)]
    _refused_for_concurrency(stack)
    for s in streams:
        s.close()


def test_tokens_per_minute_is_deployment_wide(stack):
    first = _chat(stack, "key-metered")
    assert first.status == 200, first.body
    usage = first.json()["usage"]
    per_request = usage["prompt_tokens"] + usage["completion_tokens"]
    # Request k+1 is refused once k requests and its prompt exceed 400 tokens.
    expected = next(k for k in range(1, 100) if k * per_request + usage["prompt_tokens"] > 400)
    served = 1
    while True:
        r = _chat(stack, "key-metered")
        if r.status != 200:
            break
        served += 1
        assert served <= expected, "tokens per minute were not counted across the workers"
    assert served == expected and r.status == 429, (served, expected, r.status, r.body)
    err = r.json()["error"]
    assert err["type"] == "tokens" and err["code"] == "rate_limit_exceeded" and "tokens per min" in err["message"]
    # The tokens stay spent for the minute: refused before any work now, on every worker.
    for _ in range(4):
        assert _chat(stack, "key-metered").status == 429
    assert _chat(stack, "key-free").status == 200


def test_max_tokens_limit_and_key_sha256_entry(stack):
    client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="key-capped", max_retries=0)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "Hi"}], max_tokens=50)
    assert "limit of 8" in e.value.body["message"] and e.value.body["param"] == "max_tokens"
    # Not asked: capped to the limit.
    r = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "Hi"}],
                                       extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 8 and r.choices[0].finish_reason == "length"
    # Completions: null is "not asked" (capped); absent is OpenAI's default of 16, asked.
    r = request(stack, "/v1/completions", json.dumps({"model": SERVED, "prompt": "Hello", "max_tokens": None,
                                                      "ignore_eos": True}).encode(), headers=_auth("key-capped"))
    assert r.status == 200 and r.json()["usage"]["completion_tokens"] == 8, r.body
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=SERVED, prompt="Hello")
    assert client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=8).usage.completion_tokens <= 8
    m = _messages(stack, "key-capped", max_tokens=50)
    assert m.status == 400 and m.json()["error"]["type"] == "invalid_request_error", m.body
    assert "limit of 8" in m.json()["error"]["message"]
    client.close()


def test_wrong_or_missing_key_still_gets_401(stack):
    for headers in ({}, _auth("key-wrong"), _auth(hashlib.sha256(b"key-capped").hexdigest()),
                    {"Authorization": "Basic key-free"}):
        r = request(stack, "/v1/chat/completions", chat_body(), headers=headers)
        assert r.status == 401, (headers, r.status)
        assert r.json()["error"]["message"] == "Unauthorized: a valid API key is required."
    m = _messages(stack, "key-wrong")
    assert m.status == 401 and m.json()["error"]["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=stack.base_url + "/v1", api_key="nope", max_retries=0).models.list()
    # The anonymous --api-key key works beside the named ones, and so does x-api-key.
    assert _chat(stack, "key-anon").status == 200
    assert _messages(stack, "key-free").status == 200


def _series(text: str, family: str) -> dict[str, float]:
    out = {}
    for m in re.finditer(r"^%s\{([^}]*)\} (\S+)$" % re.escape(family), text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def test_per_tenant_metrics(stack):
    assert _chat(stack, "key-free").status == 200
    assert _chat(stack, "key-anon").status == 200

    def scraped():
        text = request(stack, "/metrics", headers=_auth("key-ops")).body.decode()
        req = _series(text, "vllm_frontend_tenant_requests_total")
        return text if req.get('tenant="free"', 0) >= 1 and req.get('tenant="metered"', 0) >= 1 else None

    text = wait_for(scraped, 10, "per-tenant series", stack)
    requests = _series(text, "vllm_frontend_tenant_requests_total")
    assert set(requests) <= {f'tenant="{n}"' for n in ("limited", "free", "pair", "metered", "capped", "ops")}
    rejected = _series(text, "vllm_frontend_tenant_rejections_total")
    assert rejected.get('reason="requests_per_second",tenant="limited"', 0) >= 1, rejected
    assert rejected.get('reason="max_concurrency",tenant="pair"', 0) >= 16, rejected
    assert rejected.get('reason="tokens_per_minute",tenant="metered"', 0) >= 5, rejected
    assert rejected.get('reason="max_tokens",tenant="capped"', 0) >= 3, rejected
    assert _series(text, "vllm_frontend_tenant_prompt_tokens_total")['tenant="metered"'] > 0
    assert _series(text, "vllm_frontend_tenant_completion_tokens_total")['tenant="capped"'] >= 16
    assert 'tenant=""' not in text  # anonymous keys have no series
    # Only an admin key reads them: to anyone else /metrics names no tenant.
    for headers in ({}, _auth("key-free")):
        assert "vllm_frontend_tenant_" not in request(stack, "/metrics", headers=headers).body.decode()
