"""A hostile tenant and an outside client against every route, with a keys file, with and
without `--root-path` (the in-process tier: one worker, the simulated engine, every optional
route family turned on: scale-out, tokens-only's abort path, dev mode, the tokenizer info).

- Without a key, every route the app has answers 401, except the public ones
  (`PUBLIC_ROUTES`: probes, version, /metrics), whatever it serves.
- /metrics names no tenant to a client without an admin key.
- Only an admin key loads or unloads LoRA adapters (a path on the server, served to all).
- An abort reaches only its owner's requests: another tenant's id, or its wildcard, ends
  nothing of the first tenant's; the tenant's own abort and an admin's wildcard do.
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from tests.inprocess import InProcessStack
from tests.reliability.helpers import SERVED, request, sim_args
from vllm_pyfrontend.server.middleware import PUBLIC_ROUTES

KEYS = """
- {name: alice, key: key-alice}
- {name: mallory, key: key-mallory}
- {name: ops, key: key-ops, admin: true}
- {name: small, key: key-small, max_storage_bytes: 1000}
"""


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module", params=["", "/llm"], ids=["no-root-path", "root-path"])
def stack(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.yaml"
    path.write_text(KEYS)
    root = request.param
    args = sim_args("--api-keys-file", str(path), "--enable-scale-out", "--enable-tokenizer-info-endpoint",
                    *(["--root-path", root] if root else []), workers=1, step=0.02)
    with InProcessStack(args, env={"VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}) as s:
        s.root = root
        yield s


def _concrete(path: str) -> str:
    """A route pattern with each `{name}` placeholder filled in."""
    return re.sub(r"\{[^}]+\}", "x", path)


def test_every_route_but_the_public_ones_asks_for_a_key(stack):
    routes = sorted({(r.method, r.resource.canonical) for r in stack.parts.app.router.routes()
                     if r.resource is not None and r.method not in ("HEAD", "OPTIONS", "*")})
    assert len(routes) > 40, routes  # the whole table, route families included
    for must in ("/invocations", "/tokenize", "/detokenize", "/pooling", "/classify", "/score", "/rerank",
                 "/abort_requests", "/inference/v1/abort_requests", "/tokenizer_info", "/v1/chat/completions",
                 "/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        assert any(p == must for _, p in routes), must
    asked = []
    for method, path in routes:
        for headers in ({}, _auth("key-wrong")):
            body = None if method in ("GET", "DELETE") else b"{}"
            r = request(stack, stack.root + _concrete(path), body, headers=headers, method=method)
            if path in PUBLIC_ROUTES:
                assert r.status != 401, (method, path, r.status)
            else:
                assert r.status == 401, (method, path, headers, r.status, r.body[:200])
                asked.append(path)
    assert "/metrics" not in asked and "/health" not in asked
    # With a key the same routes answer (whatever their answer to an empty body is, never 401).
    for path in ("/tokenize", "/invocations", "/v1/models"):
        body = None if path == "/v1/models" else b"{}"
        assert request(stack, stack.root + path, body, headers=_auth("key-mallory")).status != 401


def test_metrics_name_tenants_only_to_an_admin_key(stack):
    body = json.dumps({"model": SERVED, "prompt": "hi", "max_tokens": 2}).encode()
    assert request(stack, stack.root + "/v1/completions", body, headers=_auth("key-alice")).status == 200

    def scrape(headers):
        return request(stack, stack.root + "/metrics", headers=headers, method="GET").body.decode()

    deadline = time.monotonic() + 10
    while 'tenant="alice"' not in scrape(_auth("key-ops")):
        assert time.monotonic() < deadline, "no per-tenant series for the admin key"
        time.sleep(0.2)
    for headers in ({}, _auth("key-mallory"), _auth("key-wrong")):
        text = scrape(headers)
        assert "vllm_frontend_tenant_" not in text and "alice" not in text, headers
        assert "vllm:num_requests_running" in text  # the rest of the families stay


def test_only_an_admin_key_loads_or_unloads_adapters(stack):
    body = json.dumps({"lora_name": "mine", "lora_path": "/etc"}).encode()
    for path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        r = request(stack, stack.root + path, body, headers=_auth("key-mallory"))
        assert r.status == 403 and "admin" in r.json()["error"]["message"], (path, r.status, r.body)
        r = request(stack, stack.root + path, body, headers=_auth("key-ops"))
        assert r.status in (400, 404, 500) and b"admin" not in r.body, (path, r.status, r.body)  # the engine's answer


def test_a_tenants_storage_bound_holds_its_uploads_only(stack):
    import io

    from tests.batches.helpers import client

    small, other = client(stack.base_url + stack.root, "key-small"), client(stack.base_url + stack.root, "key-alice")
    first = small.files.create(file=("a.jsonl", io.BytesIO(b"x" * 800)), purpose="batch")
    with pytest.raises(Exception) as e:
        small.files.create(file=("b.jsonl", io.BytesIO(b"x" * 800)), purpose="batch")
    assert getattr(e.value, "status_code", None) == 413 and "max_storage_bytes" in str(e.value)
    other.files.create(file=("c.jsonl", io.BytesIO(b"x" * 800)), purpose="batch")  # another tenant: not held
    small.files.delete(first.id)
    small.files.create(file=("b.jsonl", io.BytesIO(b"x" * 800)), purpose="batch")


def _generate(stack, key: str, max_tokens: int) -> tuple[threading.Thread, dict]:
    """A streaming /inference/v1/generate of `key`'s in a thread: its answered id and finish reason."""
    out: dict = {}
    body = json.dumps({"model": SERVED, "token_ids": [1, 2, 3], "stream": True,
                       "sampling_params": {"max_tokens": max_tokens, "ignore_eos": True}}).encode()

    def run():
        r = request(stack, stack.root + "/inference/v1/generate", body, headers=_auth(key), timeout=60)
        for line in r.body.decode().splitlines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                out["id"] = event.get("request_id") or event.get("id")
                for choice in event.get("choices") or []:
                    if choice.get("finish_reason"):
                        out["finish"] = choice["finish_reason"]

    t = threading.Thread(target=run)
    t.start()
    return t, out


def _abort(stack, key: str, ids: list[str], path: str = "/inference/v1/abort_requests") -> int:
    return request(stack, stack.root + path, json.dumps({"request_ids": ids}).encode(), headers=_auth(key)).status


def _in_flight_ids(stack) -> list[str]:
    """The answered ids of the generate requests in flight on the worker."""
    from vllm_pyfrontend.serving.peer_abort import PEER_ABORT

    return list(stack.parts.app[PEER_ABORT]._runs)


def _wait_running(stack, n: int) -> list[str]:
    deadline = time.monotonic() + 10
    while len(ids := _in_flight_ids(stack)) < n:
        assert time.monotonic() < deadline, "the generate requests did not start"
        time.sleep(0.02)
    return ids


def test_an_abort_reaches_only_its_owners_requests(stack):
    # 200 tokens at 20 ms a step: about 4 s, long enough for the aborts below.
    t, alice = _generate(stack, "key-alice", 200)
    (rid,) = _wait_running(stack, 1)
    assert _abort(stack, "key-mallory", [rid]) == 200
    assert _abort(stack, "key-mallory", ["*"]) == 200
    assert _abort(stack, "key-mallory", [], path="/abort_requests") in (200, 400)  # dev mode: "all"
    time.sleep(0.3)
    assert _in_flight_ids(stack) == [rid]  # still running: another tenant's abort ended nothing
    assert _abort(stack, "key-alice", [rid]) == 200
    t.join(30)
    assert alice.get("finish") == "abort", alice

    # An admin's wildcard ends every tenant's.
    t1, a = _generate(stack, "key-alice", 200)
    t2, m = _generate(stack, "key-mallory", 200)
    _wait_running(stack, 2)
    assert _abort(stack, "key-ops", ["*"]) == 200
    t1.join(30)
    t2.join(30)
    assert a.get("finish") == "abort" and m.get("finish") == "abort", (a, m)


def test_a_tenants_own_wildcard_ends_only_its_own(stack):
    t1, a = _generate(stack, "key-alice", 200)
    t2, m = _generate(stack, "key-mallory", 40)
    _wait_running(stack, 2)
    assert _abort(stack, "key-alice", ["*"]) == 200
    t1.join(30)
    t2.join(30)
    assert a.get("finish") == "abort" and m.get("finish") == "length", (a, m)
