"""This frontend behind the Shepherd Model Gateway (`smg` from PyPI, started here), on loopback.

Two `frontend-supervisor` deployments, each with its own engine (the simulated engine, to keep
the suite's time low: routing, probes and failover do not depend on the engine's weights), as
smg's workers with the `cache_aware` policy:

- HTTP: smg forwards OpenAI requests. The turns of one conversation land on one deployment,
  distinct conversations spread over both, and smg's probes (it polls /health, /v1/models,
  /version and /metrics of each worker) find both healthy.
- gRPC: smg renders the chat template and tokenizes (it is given the model directory) and
  drives each deployment's `--grpc-port` (vLLM's VllmEngine service). One deployment is killed
  (SIGKILL of all its processes at once, as when its host dies) in the middle of a run: only
  requests in flight there may fail; every request started after the kill is served, by the
  other deployment. (A SIGKILLed supervisor alone is tests/gateway/test_grpc_sim.py's case.)
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.stack import Stack, free_port, kill_tree, stop_process_group
from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4

MODEL_NAME = "dsv4"
SMG = os.path.join(os.path.dirname(sys.executable), "smg")


def _deployments(model: str) -> tuple[Stack, Stack]:
    """Two deployments serving HTTP and gRPC, one after the other: each picks its free ports
    (HTTP and gRPC here, ZMQ in its supervisor) only once the other holds its own, so the two
    never pick the same one."""
    first = _deployment(model)
    try:
        return first, _deployment(model)
    except BaseException:
        first.stop()
        raise


def _deployment(model: str) -> Stack:
    grpc_port = free_port()
    stack = Stack(["--engine", "sim", "--workers", "2", "--sim-step-time", "0.01", "--max-model-len", "4096",
                   "--served-model-name", MODEL_NAME, "--shutdown-timeout", "2", "--grpc-port", str(grpc_port),
                   model], ready_timeout=120)
    stack.grpc_port = grpc_port
    return stack


class Gateway:
    """`smg launch` in front of `worker_urls`, on loopback (its metrics listener too)."""

    def __init__(self, worker_urls: list[str], extra: list[str], policy: str = "cache_aware"):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log: deque[str] = deque(maxlen=300)
        cmd = [SMG, "launch", "--host", "127.0.0.1", "--port", str(self.port),
               "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
               "--worker-urls", *worker_urls, "--policy", policy,
               "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
               "--log-level", "warn", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, env={**os.environ, "NO_COLOR": "1"})
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_workers(len(worker_urls), 90)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line.rstrip("\n"))

    def workers(self) -> list[dict]:
        return httpx.get(self.base_url + "/workers", timeout=5).json()["workers"]

    def wait_workers(self, count: int, timeout: float) -> list[dict]:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("smg exited:\n" + "\n".join(self.log))
            try:
                last = self.workers()
                if len([w for w in last if w.get("is_healthy")]) == count:
                    return last
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.3)
        raise TimeoutError(f"smg workers not ready: {last}\n" + "\n".join(self.log))

    def wait_tokenizer(self, timeout: float) -> None:
        """In gRPC mode smg loads the tokenizer from --model-path after its workers are up and
        answers 503 `tokenizer_not_ready` until then."""
        deadline = time.monotonic() + timeout
        while True:
            r = _chat(self.base_url, [{"role": "user", "content": "ready?"}], max_tokens=1)
            if r.status_code == 200 or "tokenizer_not_ready" not in r.text:
                assert r.status_code == 200, r.text
                return
            assert time.monotonic() < deadline, r.text
            time.sleep(0.3)

    def stop(self) -> None:
        stop_process_group(self.proc, 0.5)  # a test gateway: no need for its 5 s settle window


def _served(stack: Stack) -> float:
    """Requests this deployment finished (all workers, from its /metrics)."""
    text = httpx.get(stack.base_url + "/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.M))


def _chat(base: str, messages: list[dict], max_tokens: int = 4, stream: bool = False) -> httpx.Response:
    return httpx.post(base + "/v1/chat/completions", timeout=60,
                      json={"model": MODEL_NAME, "messages": messages, "max_tokens": max_tokens, "stream": stream})


def _conversation(topic: str) -> list[list[dict]]:
    """Three turns, each the previous turns plus one exchange (what a chat client resends)."""
    opening = f"Let us talk at length about {topic}. " * 6
    turns, messages = [], []
    for i in range(3):
        messages = messages + [{"role": "user", "content": opening if i == 0 else f"Tell me more, part {i}."}]
        turns.append(list(messages))
        messages = messages + [{"role": "assistant", "content": f"Here is part {i} about {topic}."}]
    return turns


TOPICS = ["astronomy", "bread baking", "cello technique", "desert ecology", "electric motors",
          "fjords of Norway", "glass blowing", "honey bees"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Two deployments serving HTTP and gRPC, shared by both gateways (the kill comes last)."""
    # One model directory for the deployments and for smg in gRPC mode (it renders and tokenizes).
    model_dir = materialize_deepseek_v4(str(tmp_path_factory.mktemp("dsv4")))
    a, b = _deployments(model_dir)
    try:
        yield a, b, (a.grpc_port, b.grpc_port), model_dir
    finally:
        a.terminate()
        b.stop()


# ------------------------------------------------------------------ HTTP mode
@pytest.fixture(scope="module")
def http_fleet(fleet):
    a, b, _, _ = fleet
    gw = Gateway([a.base_url, b.base_url], [])
    try:
        yield gw, a, b
    finally:
        gw.stop()


def test_http_smg_probes_find_both_deployments_healthy(http_fleet):
    gw, a, b = http_fleet
    workers = {w["url"]: w for w in gw.workers()}
    assert set(workers) == {a.base_url, b.base_url}
    for w in workers.values():
        assert w["is_healthy"] and w["connection_mode"] == "http", w
        assert MODEL_NAME in [m["id"] for m in w["models"]], w
    models = httpx.get(gw.base_url + "/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [MODEL_NAME]


def test_http_conversation_sticks_and_load_spreads(http_fleet):
    """The conversations open at once (smg places a prompt it has no prefix for on the
    least-loaded worker, so concurrent openings spread; one at a time, every opening would tie
    at load 0), then each conversation's later turns follow its opening."""
    gw, a, b = http_fleet
    before = (_served(a), _served(b))
    with ThreadPoolExecutor(len(TOPICS)) as pool:  # long enough answers to overlap in flight
        openings = list(pool.map(lambda t: _chat(gw.base_url, _conversation(t)[0], max_tokens=40), TOPICS))
    assert all(r.status_code == 200 for r in openings), [r.text for r in openings]
    after = (_served(a), _served(b))
    assert after[0] > before[0] and after[1] > before[1], (before, after)  # openings spread over both
    placed: dict[str, set[str]] = {}
    for topic in TOPICS:
        for turn in _conversation(topic)[1:]:
            before = (_served(a), _served(b))
            r = _chat(gw.base_url, turn, stream=(len(turn) == 3))
            assert r.status_code == 200, r.text
            after = (_served(a), _served(b))
            went = [name for name, x, y in (("a", before[0], after[0]), ("b", before[1], after[1])) if y > x]
            assert len(went) == 1, (before, after)
            placed.setdefault(topic, set()).add(went[0])
    assert all(len(where) == 1 for where in placed.values()), placed  # every later turn on one deployment
    used = {next(iter(where)) for where in placed.values()}
    assert used == {"a", "b"}, placed  # and the conversations stay spread over both


# ------------------------------------------------------------------ gRPC mode
@pytest.fixture(scope="module")
def grpc_fleet(fleet):
    a, b, ports, model_dir = fleet
    # round_robin: the run below must have requests in flight on both when one is killed
    # (cache_aware keeps these similar prompts on one; it is covered in HTTP mode).
    gw = Gateway([f"grpc://127.0.0.1:{p}" for p in ports], ["--model-path", model_dir], policy="round_robin")
    try:
        gw.wait_tokenizer(60)
        yield gw, a, b, ports
    finally:
        gw.stop()


def test_grpc_smg_templating_and_tokenization_over_our_grpc(grpc_fleet):
    gw, a, b, ports = grpc_fleet
    workers = gw.workers()
    assert {w["url"] for w in workers} == {f"grpc://127.0.0.1:{p}" for p in ports}
    assert all(w["connection_mode"] == "grpc" and w["runtime_type"] == "vllm" for w in workers), workers
    # smg read our GetModelInfo / GetServerInfo into the worker's labels, and polls GetLoads.
    for w in workers:
        assert w["labels"]["served_model_name"] == MODEL_NAME and w["labels"]["max_num_seqs"], w
    deadline = time.monotonic() + 30
    while not all((w.get("engine_load") or {}).get("dp_rank_count") == 1 for w in workers):
        assert time.monotonic() < deadline, workers
        time.sleep(0.5)
        workers = gw.workers()
    before = _served(a) + _served(b)
    r = _chat(gw.base_url, [{"role": "user", "content": "Hello!"}], max_tokens=5)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 5
    assert body["usage"]["prompt_tokens"] > 3  # the template rendered by smg, tokenized by smg
    with httpx.stream("POST", gw.base_url + "/v1/chat/completions", timeout=60,
                      json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}],
                            "max_tokens": 4, "stream": True}) as s:
        lines = [x for x in s.iter_lines() if x.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and len(lines) >= 3
    assert _served(a) + _served(b) == before + 2  # our engines served them (over gRPC)


def test_grpc_kill_one_deployment_mid_run(grpc_fleet):
    """Eight clients in a loop through smg; deployment b is SIGKILLed once more than twelve
    requests have finished, and the clients go on until twelve requests begun after the kill
    have finished and 2 s have passed. (Paced by the run's own progress, not the clock: on a
    loaded 2-core machine the first requests alone once took 8 s.)"""
    gw, a, b, ports = grpc_fleet
    results: list[tuple[float, float, bool, str]] = []  # start, end, ok, detail
    kill_at: list[float] = []
    deadline = time.monotonic() + 90

    def running() -> bool:
        now = time.monotonic()
        if now >= deadline or not kill_at:
            return now < deadline
        return now < kill_at[0] + 2.0 or sum(r[0] >= kill_at[0] for r in results) < 12

    async def client(i: int, http: httpx.AsyncClient) -> None:
        k = 0
        while running():
            k += 1
            start = time.monotonic()
            try:
                r = await http.post(gw.base_url + "/v1/chat/completions", json={
                    "model": MODEL_NAME, "max_tokens": 12, "stream": False,
                    "messages": [{"role": "user", "content": f"client {i} request {k}: {TOPICS[i % 8]}"}]})
                ok = r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
                detail = "" if ok else f"{r.status_code} {r.text[:1500]}"
            except httpx.HTTPError as e:
                ok, detail = False, repr(e)
            results.append((start, time.monotonic(), ok, detail))

    async def killer() -> None:
        while len(results) <= 12 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        served_b.append(await asyncio.to_thread(_served, b) - served_b_before)
        kill_at.append(time.monotonic())
        kill_tree(b.proc.pid)

    async def main() -> None:
        clients = [httpx.AsyncClient(timeout=30) for _ in range(8)]
        try:
            await asyncio.gather(*(client(i, http) for i, http in enumerate(clients)), killer())
        finally:
            for http in clients:
                await http.aclose()

    served_b_before = _served(b)
    served_b: list[float] = []
    asyncio.run(main())
    assert kill_at, "the kill did not happen"
    killed = kill_at[0]
    before = [r for r in results if r[1] < killed]
    after = [r for r in results if r[0] >= killed]
    in_flight = [r for r in results if r[0] < killed <= r[1]]
    assert served_b[0] > 0  # the killed deployment had its share of the run
    assert len(before) > 8 and len(after) > 8, (len(before), len(after))
    assert all(r[2] for r in before), [r for r in before if not r[2]]
    assert all(r[2] for r in after), [r[3] for r in after if not r[2]]  # new requests: no failure
    assert len([r for r in in_flight if not r[2]]) <= len(in_flight) <= 8
    # smg saw the deployment go: one healthy worker left, the other deployment's.
    workers = gw.wait_workers(1, 30)
    healthy = [w["url"] for w in workers if w.get("is_healthy")]
    assert healthy == [f"grpc://127.0.0.1:{ports[0]}"], workers
