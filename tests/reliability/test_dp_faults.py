"""Data-parallel engine faults end to end: two simulated engines join a frontend over TCP (as
`vllm serve --headless` engines do); one is killed, or hangs, while streams run on both.

What must hold: the streams on the failed engine end with a 503 error event and `data: [DONE]`
once the request deadline (`--engine-timeout`) passes; the streams on the live engine finish
normally; new requests are all served (by the live engine); aborts for the live engine still
reach it (it goes idle when its clients leave); `/health` and `/ready` stay 200 and name the
engine that is down; nothing is left in flight.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.reliability.helpers import SERVED, chat_body, open_stream, read_until, request, sse_events
from tests.stack import REPO, Stack, free_port, newer_stats, stop_process_group
from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4

ENGINE_TIMEOUT = 5  # the sim engines' deadline (a starved box must not trip the live one)
STEP = 0.005
LONG = 3800  # tokens: 19 s of 5 ms steps at the least (the step clock only runs slower)


def _start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def sim_engine(index: int, port: int, model: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "vllm_pyfrontend.supervisor.sim", "--handshake-address", f"tcp://127.0.0.1:{port}",
            "--engine-index", str(index), "--model", model, "--max-model-len", "4096",
            "--step-time", str(STEP), *extra]


def vllm_engine(index: int, port: int, model: str) -> list[str]:
    """vLLM's own headless EngineCore as DP rank `index` of 2 (a dense model: independent
    engines, no DP coordination between them), its OpenMP threads on one core of its own so
    that two engines and the frontend share the 2-core box."""
    from tests.e2e.tiny_model import ENGINE_ARGS

    return ["env", f"VLLM_CPU_OMP_THREADS_BIND={index % (os.cpu_count() or 1)}", sys.executable, "-m", "vllm_pyfrontend.supervisor.vllm_headless", model,
            "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(port),
            "--data-parallel-size", "2", "--data-parallel-size-local", "1",
            "--data-parallel-start-rank", str(index), *ENGINE_ARGS]


class DPDeployment:
    def __init__(self, engine_cmds, model: str, ready_timeout: float = 120, engine_timeout: float = ENGINE_TIMEOUT):
        self.model = model
        self.engine_timeout = engine_timeout
        port = free_port()
        self.engines = [_start(cmd) for cmd in engine_cmds(port)]
        try:
            self.stack = Stack(["--workers", "2", "--data-parallel-size", "2", "--data-parallel-size-local", "0",
                                "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(port),
                                "--engine-timeout", str(engine_timeout), "--max-model-len", "4096",
                                "--served-model-name", SERVED, "--shutdown-timeout", "5", self.model],
                               ready_timeout=ready_timeout)
        except BaseException:
            self.close()
            raise

    def per_engine_stats(self, polls: int = 24, workers: int = 2) -> dict[str, dict]:
        """Each engine's freshest scheduler stats over the workers' /load (polled until every
        worker has answered, up to 8x `polls`: the engine's last stats before it goes idle go
        to one worker, possibly the one an unlucky run of polls never reaches)."""
        best: dict[str, dict] = {}
        seen: set[int] = set()
        for i in range(polls * 8):
            if i >= polls and len(seen) >= workers:
                break
            with urllib.request.urlopen(self.stack.base_url + "/load", timeout=30) as r:
                load = json.load(r)
            seen.add(load.get("worker"))
            for idx, stats in load.get("engines", {}).items():
                if newer_stats(stats, best.get(idx)):
                    best[idx] = stats
        return best

    def diagnosis(self) -> str:
        """What a timed-out wait reports: each worker's /load and the deployment's last log lines."""
        loads = {}
        for _ in range(16):
            with urllib.request.urlopen(self.stack.base_url + "/load", timeout=30) as r:
                load = json.load(r)
            loads[load.get("worker")] = load
        return f"loads {loads}\n" + "\n".join(self.stack.logs().splitlines()[-40:])

    def close(self) -> None:
        if hasattr(self, "stack"):
            self.stack.terminate(60)
        for e in self.engines:
            stop_process_group(e, 10)


def _finish(s: socket.socket, timeout: float) -> tuple[str, list[dict]]:
    """Read a stream to its end: ("done", events) or ("error", events)."""
    s.settimeout(timeout)
    raw = read_until(s, b"data: [DONE]")
    s.close()
    events = sse_events(raw)
    assert events and events[-1] == "[DONE]", raw[-300:]
    parsed = [json.loads(e) for e in events[:-1]]
    if any("error" in e for e in parsed):
        return "error", parsed
    return "done", parsed


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out: {what() if callable(what) else what}")


@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_one_engine_fails_under_live_streams(fault):
    model = materialize_deepseek_v4(os.path.join(REPO, ".cache", "demo-deepseek-v4"))
    faulty = ["--hang-after-steps", "150"] if fault == "hung" else []
    dp = DPDeployment(lambda port: [sim_engine(0, port, model), sim_engine(1, port, model, *faulty)], model)
    # The streams that finish run 2,000 tokens (10 s of 5 ms steps at the least: twice the
    # deadline, started before the fault); the ones whose clients leave ask LONG, far longer than
    # the 15 s the aborts get to reach engine 0.
    _one_engine_fails(dp, fault, 2000, gone_long=LONG)


def test_a_router_picks_the_engine():
    """vLLM's X-data-parallel-rank header: the request runs on that engine whatever the load; a
    rank outside the deployment is a 400 in vLLM's words; a value that is not a number is
    ignored (least-loaded routing), as in vLLM."""
    model = materialize_deepseek_v4(os.path.join(REPO, ".cache", "demo-deepseek-v4"))
    dp = DPDeployment(lambda port: [sim_engine(0, port, model), sim_engine(1, port, model)], model)
    try:
        opened = [open_stream(dp.stack, chat_body(stream=True, max_tokens=LONG, ignore_eos=True),
                              headers={"X-data-parallel-rank": "1"}) for _ in range(3)]
        stats = _wait(lambda: (st := dp.per_engine_stats()) and int(st.get("1", {}).get("num_running_reqs", 0)) >= 3
                      and st, 30, lambda: f"three streams on engine 1: {dp.per_engine_stats()}")
        assert int(stats.get("0", {}).get("num_running_reqs", 0)) == 0, stats
        for s in opened:
            s.close()
        bad = request(dp.stack, "/v1/chat/completions", chat_body(), headers={"X-data-parallel-rank": "2"})
        assert bad.status == 400, bad.body
        assert bad.json()["error"]["message"] == "data_parallel_rank 2 is out of range [0, 2).", bad.body
        ignored = request(dp.stack, "/v1/chat/completions", chat_body(), headers={"X-data-parallel-rank": "one"})
        assert ignored.status == 200, ignored.body
    finally:
        dp.close()


@pytest.mark.real_engine
def test_one_real_engine_killed_under_live_streams():
    """The same with two of vLLM's own CPU EngineCores (tiny random-weight model). Their first
    steps take seconds on a busy CPU: the deadline is longer, and each engine is warmed up."""
    from tests.e2e.tiny_model import build_tiny_model

    model = build_tiny_model()
    dp = DPDeployment(lambda port: [vllm_engine(0, port, model), vllm_engine(1, port, model)], model,
                      ready_timeout=600, engine_timeout=20)
    for i in range(4):  # both engines run their first steps
        assert request(dp.stack, "/v1/chat/completions", chat_body(max_tokens=4),
                       headers={"X-data-parallel-rank": str(i % 2)}).status == 200
    # The streams that finish run 1,600 tokens (they only need to outlive the kill); the ones
    # whose clients leave ask 3,800, far longer than the 15 s the aborts get to reach engine 0.
    # They are pinned two to each engine (a router's X-data-parallel-rank): least-loaded routing
    # reads the engines' stats, which a busy box delivers late, and the test needs both engines.
    _one_engine_fails(dp, "killed", 1600, streams=4, gone_long=3800, pin=True)


def _one_engine_fails(dp: DPDeployment, fault: str, long: int, streams: int = 8, gone_long: int | None = None,
                      pin: bool = False) -> None:
    try:
        # Streams on both engines (least-loaded routing spreads them, or `pin` sends them to
        # alternate engines), long enough to outlive the fault by far.
        opened = [open_stream(dp.stack, chat_body(stream=True, max_tokens=long, temperature=1.0, seed=i,
                                                   ignore_eos=True),
                              headers={"X-data-parallel-rank": str(i % 2)} if pin else None)
                   for i in range(streams)]
        _wait(lambda: all(int(s["num_running_reqs"]) >= 1 for s in dp.per_engine_stats().values())
              and len(dp.per_engine_stats()) == 2, 60,
              lambda: f"streams running on both engines: {dp.per_engine_stats()}\n" + dp.diagnosis())
        if fault == "killed":
            os.killpg(dp.engines[1].pid, signal.SIGKILL)  # vLLM's EngineCore is a child of its launcher
        # (hung: engine 1 stops stepping after 150 steps, ~0.75 s in)
        t0 = time.monotonic()
        outcomes = [_finish(s, timeout=dp.engine_timeout + 120) for s in opened]
        failed = [ev for kind, ev in outcomes if kind == "error"]
        finished = [ev for kind, ev in outcomes if kind == "done"]
        assert failed and finished, [k for k, _ in outcomes]
        for ev in failed:
            assert ev[-1]["error"]["code"] == 503, ev[-1]
        for ev in finished:
            reasons = [c["finish_reason"] for e in ev for c in e.get("choices", []) if c.get("finish_reason")]
            assert reasons == ["length"], reasons
        assert time.monotonic() - t0 < 300

        # Degraded, still serving: health and readiness name the engine that is down.
        for _ in range(6):
            health = request(dp.stack, "/health")
            assert health.status == 200 and health.json() == {"status": "degraded", "engines_down": [1]}
            ready = request(dp.stack, "/ready")
            assert ready.status == 200 and ready.json()["engines_down"] == [1]
        for _ in range(8):
            r = request(dp.stack, "/v1/chat/completions", chat_body(max_tokens=5))
            assert r.status == 200 and r.json()["usage"]["completion_tokens"] == 5, r.body

        # Aborts for the live engine still flow: clients that leave free engine 0.
        gone = [open_stream(dp.stack, chat_body(stream=True, max_tokens=gone_long or long, ignore_eos=True))
                for _ in range(4)]
        _wait(lambda: int(dp.per_engine_stats().get("0", {}).get("num_running_reqs", 0)) >= 4, 20,
              "the new streams running on engine 0")
        for s in gone:
            s.close()
        # Well before they could have finished by themselves: the aborts reached engine 0.
        _wait(lambda: int(dp.per_engine_stats().get("0", {}).get("num_running_reqs", -1)) == 0
              and int(dp.per_engine_stats().get("0", {}).get("num_waiting_reqs", -1)) == 0, 15,
              lambda: f"engine 0 idle after its clients left: {dp.per_engine_stats()}, "
                      f"health {request(dp.stack, '/health').body!r}\n" + "\n".join(dp.stack.logs().splitlines()[-40:]))
        loads = [request(dp.stack, "/load").json()["server_load"] for _ in range(8)]
        assert loads == [0] * 8
    finally:
        dp.close()
