"""Pooling through a worker (in the test process, tests/inprocess.py) on the simulated engine
(`--runner pooling`: an embedding model whose engine answers each request with a vector after one
step): the worker learns the tasks from the engine, the inputs of one request go out together and
come back in order, and a client that leaves aborts the ones still queued in the engine."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.inprocess import InProcessStack
from vllm_pyfrontend.supervisor.vllm_flags import pooler_config_from

MODEL = "demo:deepseek-v4"
STEP = 2.0  # seconds per engine step: a request's inputs run one per step (max-num-seqs 1)


@pytest.fixture(scope="module")
def stack():
    s = InProcessStack(
        ["--engine", "sim", "--workers", "1", "--sim-step-time", str(STEP), "--max-num-seqs", "1",
         "--max-model-len", "4096", "--served-model-name", "emb", "--shutdown-timeout", "5",
         "--runner", "pooling", MODEL],
        ready_timeout=120,
    )
    yield s
    code = s.terminate()
    assert code == 0, s.logs()


def test_embeddings_in_order_and_generation_refused(stack):
    r = httpx.post(stack.base_url + "/v1/embeddings", json={"model": "emb", "input": ["a", "b b"]}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert len(body["data"][0]["embedding"]) == 1024
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    r = httpx.post(stack.base_url + "/v1/chat/completions",
                   json={"model": "emb", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert r.status_code == 400 and "`embed`" in r.json()["error"]["message"]


def test_client_leaving_aborts_every_queued_input(stack):
    def send() -> None:
        try:
            httpx.post(stack.base_url + "/v1/embeddings", json={"model": "emb", "input": ["x"] * 4}, timeout=1.0)
        except httpx.TimeoutException:
            pass  # the client gives up (and closes the connection) while inputs wait in the engine

    t = threading.Thread(target=send)
    t.start()
    t.join()
    # One input ran in the step after the request came; without the abort, the next stats
    # would still show two waiting. A stats sample from a step after the client left shows none.
    # The engine steps (and samples) only while it has work: if no sample comes within several
    # steps, nothing was left queued to run, which is the abort's effect too.
    left = time.time()
    stats = None
    while time.time() < left + 6 * STEP:
        sample = stack.freshest_engine_stats()
        if sample is not None and sample["timestamp"] > left + 0.1:
            stats = sample
            break
        time.sleep(0.2)
    if stats is not None:
        assert stats["num_waiting_reqs"] == 0 and stats["num_running_reqs"] == 0


def test_pooler_config_from_engine_flags():
    assert pooler_config_from(["--pooler-config", '{"task": "classify"}', "--enforce-eager"]) == {"task": "classify"}
    assert pooler_config_from(["--pooler-config.use-activation", "false", "--pooler_config.task=embed"]) == {
        "use_activation": False, "task": "embed"}
    assert pooler_config_from(["--max-model-len", "8"]) is None
