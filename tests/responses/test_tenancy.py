"""Stored responses scoped by API key, through the official `openai` SDK: key B can neither read,
continue, overwrite (a client-supplied `request_id`: B's is B's own record, and nothing tells
B that A has one of that id) nor cancel key A's response, on any worker
of one deployment (SQLite store) and on either of two deployments sharing one Redis; another
key's id is answered exactly as an id that does not exist."""

from __future__ import annotations

import time

import httpx
import openai
import pytest
import redis

from tests.responses.helpers import client, create_on, on_worker
from tests.inprocess import InProcessStack
from tests.stack import Stack

KEY_A, KEY_B = "key-of-tenant-a", "key-of-tenant-b"
SIM = ["--engine", "sim", "--sim-step-time", "0.002", "--max-model-len", "8192", "--served-model-name", "dsv4",
       "--shutdown-timeout", "5", "--api-key", KEY_A, KEY_B]


def _not_found_body(base_url: str, key: str, path: str, method: str) -> dict:
    r = httpx.request(method, f"{base_url}{path}", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 404, r.text
    return r.json()


def _same_as_unknown(base_url: str, key: str, path: str, response_id: str, method: str = "GET") -> None:
    """The 404 for another key's id is byte for byte the 404 for an id that does not exist."""
    unknown = "resp_" + "0" * 32
    theirs = _not_found_body(base_url, key, path.format(response_id), method)
    never = _not_found_body(base_url, key, path.format(unknown), method)
    assert theirs == {**never, "error": {**never["error"],
                                         "message": never["error"]["message"].replace(unknown, response_id)}}


def _check_isolation(url_a: str, url_b: str, worker_a: int | None, worker_b: int | None) -> None:
    """A stores through `url_a` (on `worker_a`), B tries everything through `url_b` (`worker_b`)."""
    first, _ = create_on(url_a, worker_a, api_key=KEY_A, model="dsv4", input="Hello from A",
                         max_output_tokens=5, metadata={"secret": "A's"})
    ca, cb = client(url_b, api_key=KEY_A), client(url_b, api_key=KEY_B)

    # read
    with pytest.raises(openai.NotFoundError):
        on_worker(url_b, worker_b, lambda c: c.responses.with_raw_response.retrieve(first.id), api_key=KEY_B)
    _same_as_unknown(url_b, KEY_B, "/v1/responses/{}", first.id)
    # continue
    with pytest.raises(openai.NotFoundError):
        cb.responses.create(model="dsv4", input="More", previous_response_id=first.id, max_output_tokens=5)
    # overwrite: B's request_id is B's own record (as any id of B's: nothing says A has one);
    # A's own id taken again is A's 409; A's record is unchanged
    forged = cb.responses.create(model="dsv4", input="Forged", max_output_tokens=5, metadata={"by": "B"},
                                 extra_body={"request_id": first.id})
    assert forged.id == first.id and cb.responses.retrieve(first.id).metadata == {"by": "B"}
    with pytest.raises(openai.ConflictError):
        ca.responses.create(model="dsv4", input="Forged", max_output_tokens=5, extra_body={"request_id": first.id})
    got = ca.responses.retrieve(first.id)
    assert got.output_text == first.output_text and got.metadata == {"secret": "A's"}
    # A's follow-up still continues A's conversation
    second = ca.responses.create(model="dsv4", input="More", previous_response_id=first.id, max_output_tokens=5)
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens

    # cancel: B's cancel is a 404 and changes nothing; A's works
    bg, _ = create_on(url_a, worker_a, api_key=KEY_A, model="dsv4", input="long", background=True,
                      max_output_tokens=4000, extra_body={"ignore_eos": True})
    with pytest.raises(openai.NotFoundError):
        on_worker(url_b, worker_b, lambda c: c.responses.with_raw_response.cancel(bg.id), api_key=KEY_B)
    _same_as_unknown(url_b, KEY_B, "/v1/responses/{}/cancel", bg.id, method="POST")
    assert ca.responses.retrieve(bg.id).status in ("queued", "in_progress")
    assert ca.responses.cancel(bg.id).status == "cancelled"
    deadline = time.monotonic() + 30
    while (got := ca.responses.retrieve(bg.id)).usage is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert got.status == "cancelled" and 0 < got.usage.output_tokens < 4000
    # B's own responses are B's alone
    mine = cb.responses.create(model="dsv4", input="B's", max_output_tokens=5)
    assert cb.responses.retrieve(mine.id).id == mine.id
    with pytest.raises(openai.NotFoundError):
        client(url_a, api_key=KEY_A).responses.retrieve(mine.id)


def test_keys_are_isolated_across_workers():
    with Stack([*SIM, "--workers", "2", "demo:deepseek-v4"]) as s:
        _check_isolation(s.base_url, s.base_url, 0, 1)
        _check_isolation(s.base_url, s.base_url, 1, 0)


def test_keys_are_isolated_across_deployments_sharing_redis(redis_url):
    redis.Redis.from_url(redis_url).flushdb()
    args = [*SIM, "--workers", "1", "--response-store", redis_url, "demo:deepseek-v4"]
    with InProcessStack(args) as a, InProcessStack(args) as b:
        _check_isolation(a.base_url, b.base_url, None, None)
        # and A's own response is A's on the other deployment
        first = client(a.base_url, api_key=KEY_A).responses.create(model="dsv4", input="Hi", max_output_tokens=5)
        assert client(b.base_url, api_key=KEY_A).responses.retrieve(first.id).id == first.id
