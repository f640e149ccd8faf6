"""LoRA adapters against vLLM's own server, both on real CPU engines started with
`--enable-lora` and a static adapter (`--lora-modules`), with runtime updating allowed.

The adapters are seeded random-weight PEFT adapters for the tiny model (tests/e2e/tiny_lora.py).
An adapter must change the output and give vLLM's output; an adapter loaded at run time through
worker 0 must serve through worker 1 (each httpx client below holds one keep-alive connection,
and `/load` names the worker behind it); errors must be vLLM's.

This pair is also the one real-engine pair started without the flags that turn on vLLM's
scale-out, development and tokenizer-info routes (the session pair, `tiny_pair`, has them on):
those routes answer as vLLM's do by default here.
"""

from __future__ import annotations

from contextlib import closing

import httpx
import pytest

from tests.e2e.tiny_lora import build_tiny_lora
from tests.e2e.tiny_model import ENGINE_ARGS
from tests.e2e.vllm_pair import MODEL, start_pair

pytestmark = pytest.mark.real_engine


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("loras")
    return {name: build_tiny_lora(root / name, seed) for name, seed in (("static", 1), ("runtime", 2), ("other", 3))}


@pytest.fixture(scope="module")
def pair(adapters):
    args = ["--served-model-name", MODEL, *ENGINE_ARGS, "--enable-lora", "--max-loras", "2",
            "--max-lora-rank", "8", "--lora-modules", f"ad1={adapters['static']}"]
    with start_pair(args=args, env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}) as p:
        yield p


def _comp(base: str, model: str, client: httpx.Client | None = None) -> dict:
    body = {"model": model, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0,
            "return_token_ids": True}
    r = (client.post(base + "/v1/completions", json=body, timeout=120) if client is not None
         else httpx.post(base + "/v1/completions", json=body, timeout=120))
    return {"status": r.status_code, "body": r.json()}


def _answer(res: dict) -> tuple:
    assert res["status"] == 200, res
    c = res["body"]["choices"][0]
    return c["text"], c["token_ids"], c["finish_reason"], res["body"]["model"]


def _client_on_worker(base: str, worker: int) -> httpx.Client:
    """A client whose one keep-alive connection is served by `worker` (SO_REUSEPORT spreads new
    connections over the workers; `/load` says which one took this one)."""
    for _ in range(200):
        c = httpx.Client(base_url=base, limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                         timeout=120)
        if c.get("/load").json()["worker"] == worker:
            return c
        c.close()
    raise AssertionError(f"no connection reached worker {worker}")


def test_static_adapter_changes_the_output_and_matches_vllm(pair):
    base = _answer(_comp(pair.ours, MODEL))
    ours = _answer(_comp(pair.ours, "ad1"))
    theirs = _answer(_comp(pair.vllm, "ad1"))
    assert ours[1] != base[1], "the adapter did not change the output"
    assert ours == theirs
    assert ours[3] == "ad1"
    chat = {"model": "ad1", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "temperature": 0}
    a = httpx.post(pair.ours + "/v1/chat/completions", json=chat, timeout=120).json()
    b = httpx.post(pair.vllm + "/v1/chat/completions", json=chat, timeout=120).json()
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert a["model"] == b["model"] == "ad1"


def _cards(base: str) -> list[tuple]:
    data = httpx.get(base + "/v1/models", timeout=30).json()["data"]
    return [(m["id"], m["parent"], m["root"], m["max_model_len"]) for m in data]


def test_models_list_the_adapters_as_vllm(pair, adapters):
    ours = _cards(pair.ours)
    theirs = _cards(pair.vllm)
    assert [c for c in ours if c[0] != MODEL] == [c for c in theirs if c[0] != MODEL]
    assert ("ad1", MODEL, adapters["static"], None) in ours
    # The base model's card: same id and parent; root is the model path on both sides.
    assert [c[:2] for c in ours if c[0] == MODEL] == [c[:2] for c in theirs if c[0] == MODEL] == [(MODEL, None)]


def test_runtime_load_through_worker_0_serves_through_worker_1(pair, adapters):
    base = _answer(_comp(pair.ours, MODEL))
    body = {"lora_name": "ad2", "lora_path": adapters["runtime"]}
    with closing(_client_on_worker(pair.ours, 0)) as w0, closing(_client_on_worker(pair.ours, 1)) as w1:
        assert w1.post("/v1/completions", json={"model": "ad2", "prompt": "x"}).status_code == 404
        r = w0.post("/v1/load_lora_adapter", json=body)
        v = httpx.post(pair.vllm + "/v1/load_lora_adapter", json=body, timeout=300)
        assert (r.status_code, r.text) == (v.status_code, v.text) == (
            200, "Success: LoRA adapter 'ad2' added successfully.")
        ours = _answer(_comp(pair.ours, "ad2", w1))
        theirs = _answer(_comp(pair.vllm, "ad2"))
        assert ours == theirs
        assert ours[1] != base[1] and ours[1] != _answer(_comp(pair.ours, "ad1", w1))[1]
        assert ("ad2", MODEL, adapters["runtime"], None) in _cards(pair.ours)
        assert [c for c in _cards(pair.ours) if c[0] != MODEL] == [c for c in _cards(pair.vllm) if c[0] != MODEL]

        # Unloaded through worker 1: gone for worker 0 too, as for vLLM.
        r = w1.post("/v1/unload_lora_adapter", json={"lora_name": "ad2"})
        v = httpx.post(pair.vllm + "/v1/unload_lora_adapter", json={"lora_name": "ad2"}, timeout=60)
        assert (r.status_code, r.text) == (v.status_code, v.text) == (
            200, "Success: LoRA adapter 'ad2' removed successfully.")
        assert _comp(pair.ours, "ad2", w0)["status"] == _comp(pair.vllm, "ad2")["status"] == 404
        assert "ad2" not in [c[0] for c in _cards(pair.ours)]


def _error(r: httpx.Response) -> tuple:
    e = r.json()["error"]
    return r.status_code, e["type"], e["message"]


def test_errors_as_vllm(pair, adapters):
    # An unknown adapter name: vLLM's model-not-found (404, NotFoundError).
    ours = httpx.post(pair.ours + "/v1/completions", json={"model": "nope", "prompt": "x"}, timeout=60)
    theirs = httpx.post(pair.vllm + "/v1/completions", json={"model": "nope", "prompt": "x"}, timeout=60)
    assert _error(ours)[:2] == _error(theirs)[:2] == (404, "NotFoundError")
    # Loading a name that is loaded already (the static adapter).
    body = {"lora_name": "ad1", "lora_path": adapters["other"]}
    ours = httpx.post(pair.ours + "/v1/load_lora_adapter", json=body, timeout=60)
    theirs = httpx.post(pair.vllm + "/v1/load_lora_adapter", json=body, timeout=60)
    assert _error(ours) == _error(theirs)
    assert ours.status_code == 400
    # A name that is a served base model.
    body = {"lora_name": MODEL, "lora_path": adapters["other"]}
    assert _error(httpx.post(pair.ours + "/v1/load_lora_adapter", json=body, timeout=60)) == \
        _error(httpx.post(pair.vllm + "/v1/load_lora_adapter", json=body, timeout=60))
    # A path with no adapter: the engine's error, as vLLM reports it (404).
    body = {"lora_name": "ghost", "lora_path": "/nonexistent/adapter"}
    ours = httpx.post(pair.ours + "/v1/load_lora_adapter", json=body, timeout=120)
    theirs = httpx.post(pair.vllm + "/v1/load_lora_adapter", json=body, timeout=120)
    assert _error(ours) == _error(theirs)
    assert "ghost" not in [c[0] for c in _cards(pair.ours)]
    # Unloading an unknown name.
    ours = httpx.post(pair.ours + "/v1/unload_lora_adapter", json={"lora_name": "nope"}, timeout=60)
    theirs = httpx.post(pair.vllm + "/v1/unload_lora_adapter", json={"lora_name": "nope"}, timeout=60)
    assert _error(ours) == _error(theirs)
    assert ours.status_code == 404


# Routes gated off by default, in vLLM as here: scale-out routes answer 403, development,
# profiler and tokenizer-info routes do not exist (404). (On this pair: the session pair has them
# on; none of them depends on LoRA.)
GATED = [
    ("POST", "/inference/v1/generate", {"token_ids": [1, 2], "sampling_params": {"max_tokens": 2}}),
    ("POST", "/inference/v1/abort_requests", {"request_ids": ["x"]}),
    ("POST", "/v1/chat/completions/render", {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]}),
    ("POST", "/v1/completions/render", {"model": "tiny", "prompt": "Hi"}),
    ("POST", "/v1/chat/completions/derender", {"generate_response": {"choices": []}}),
    ("POST", "/v1/completions/derender", {"generate_responses": []}),
    ("GET", "/tokenizer_info", None),
    ("POST", "/sleep", None),
    ("GET", "/is_sleeping", None),
    ("POST", "/pause", None),
    ("GET", "/server_info", None),
    ("POST", "/collective_rpc", {"method": "check_health"}),
    ("POST", "/start_profile", None),
    ("POST", "/abort_requests", {}),
]


@pytest.mark.parametrize("method,path,body", GATED, ids=[p for _, p, _ in GATED])
def test_gated_routes_answer_as_vllm(pair, method, path, body):
    ours = httpx.request(method, pair.ours + path, json=body, timeout=60)
    theirs = httpx.request(method, pair.vllm + path, json=body, timeout=60)
    assert ours.status_code == theirs.status_code, (path, ours.text, theirs.text)
    if ours.status_code == 403:
        assert ours.json()["error"]["type"] == theirs.json()["error"]["type"] == "PermissionDeniedError"
