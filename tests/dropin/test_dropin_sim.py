"""`vllm serve` launches this frontend (drop-in path) in front of the simulated engine.

vLLM's own launcher binds the HTTP and ZMQ listeners, performs the handshake with a headless
engine (`--data-parallel-size-local 0`; the sim engine joins over TCP) and starts
`vllm-pyfrontend frontend --listen-fd ...`. This is the same launch as with the real engine
(tests/dropin/test_dropin_real.py) without the model load, so it runs in the default tier.
"""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import openai
import pytest

from tests.dropin.harness import DropinServer, worker_of_response_id
from tests.e2e.tiny_model import REPO_ROOT, build_tiny_model, free_port

START_TIMEOUT_S = 240
API_KEY = "dropin-test-key"  # vllm serve's own --api-key reaches the workers


@pytest.fixture(scope="module")
def dropin(tmp_path_factory):
    model = build_tiny_model()
    logs = tmp_path_factory.mktemp("dropin-sim")
    rpc_port = free_port()
    server = DropinServer(
        [model, "--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
         "--data-parallel-rpc-port", str(rpc_port), "--max-model-len", "4096",
         "--served-model-name", "tiny", "--api-key", API_KEY],
        free_port(), logs, workers=2,
    )  # fmt: skip
    with open(logs / "sim.log", "wb") as out:
        engine = subprocess.Popen(
            [sys.executable, "-m", "vllm_pyfrontend.supervisor.sim",
             "--handshake-address", f"tcp://127.0.0.1:{rpc_port}", "--engine-index", "0",
             "--model", model, "--max-model-len", "4096", "--step-time", "0.005"],
            cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        server.wait_ready(START_TIMEOUT_S, others=(engine,))
        yield server
    finally:
        server.kill()
        engine.terminate()
        try:
            engine.wait(10)
        except subprocess.TimeoutExpired:
            engine.kill()
            engine.wait(5)


@pytest.fixture(scope="module")
def client(dropin) -> openai.OpenAI:
    return openai.OpenAI(base_url=dropin.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


def test_launched_by_vllm_with_workers_behind_a_router(dropin):
    log = dropin.log()
    assert "Launching Rust frontend:" in log and "vllm-pyfrontend frontend --listen-fd" in log
    assert "(2 workers behind one engine client)" in log
    names = " ".join(" ".join(p.cmdline()) for p in dropin.remember_tree())
    assert "-m vllm_pyfrontend.router" in names and names.count("vllm_pyfrontend.server.worker") == 2


def test_chat_completions_streaming_and_not(client):
    r = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=6)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 6
    assert r.choices[0].message.content
    text, finish = "", None
    for chunk in client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, stream=True
    ):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert text and finish == "length"


def test_vllm_api_key_flag_guards_v1_routes(dropin):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    assert httpx.post(dropin.base_url + "/v1/chat/completions", json=body, timeout=30).status_code == 401
    assert httpx.get(dropin.base_url + "/v1/models", timeout=30,
                     headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = httpx.post(dropin.base_url + "/v1/chat/completions", json=body, timeout=30,
                    headers={"Authorization": f"Bearer {API_KEY}"})
    assert ok.status_code == 200
    assert API_KEY not in " ".join(" ".join(p.cmdline()) for p in dropin.remember_tree()
                                   if "vllm_pyfrontend.server.worker" in " ".join(p.cmdline()))


def test_requests_land_on_both_workers(dropin):
    served_by: set[int] = set()
    for _ in range(60):  # a fresh connection each time; the kernel picks the accepting worker
        with openai.OpenAI(base_url=dropin.base_url + "/v1", api_key=API_KEY, max_retries=0,
                           timeout=60) as fresh:
            r = fresh.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        served_by.add(worker_of_response_id(r.id))
        served_by.add(httpx.get(dropin.base_url + "/load", timeout=5).json()["worker"])
        if served_by == {0, 1}:
            break
    assert served_by == {0, 1}


def test_killed_worker_is_restarted_and_serves_again(dropin):
    [victim] = [p for p in dropin.remember_tree() if '"worker_index": 0,' in " ".join(p.cmdline())]
    victim.kill()
    deadline = time.monotonic() + 60
    while "worker 0 ready again" not in dropin.log():
        assert time.monotonic() < deadline, dropin.log()[-3000:]
        time.sleep(0.2)
    served_by: set[int] = set()
    for _ in range(60):
        with openai.OpenAI(base_url=dropin.base_url + "/v1", api_key=API_KEY, max_retries=0,
                           timeout=60) as fresh:
            r = fresh.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=3, stream=False)
        assert r.usage.completion_tokens == 3
        served_by.add(worker_of_response_id(r.id))
        if served_by == {0, 1}:
            break
    assert served_by == {0, 1}


def test_sigterm_stops_the_whole_tree(dropin):
    # Last in this module: the server is gone afterwards.
    code = dropin.terminate(timeout=90)  # vLLM itself exits slowly on a loaded box
    left = dropin.wait_tree_gone(10)
    log = dropin.log()
    assert code == 0, log[-3000:]
    assert not left, [p.cmdline()[:3] for p in left]
    assert "[pyfrontend]" in log and "INFO stopped" in log, log[-3000:]
    assert "Subprocess manager: force killing" not in log, log[-3000:]  # vLLM did not kill us
