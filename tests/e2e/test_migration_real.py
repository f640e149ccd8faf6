"""A request moved off a killed vLLM engine continues on the other one, token for token.

Two of vLLM's own CPU EngineCores (the tiny random-weight model, greedy: top_k 1) join one frontend
worker over TCP. Long-running streams pinned to engine 0 make engine 1 the least loaded, so the
requests under test all run on engine 1; it is killed (SIGKILL) while they generate. After the
request deadline they continue on engine 0 as prompt + tokens so far: every answer (streaming and
not, n = 2, with logprobs) must equal the same request run uninterrupted on engine 0 afterwards:
the same text and tokens, finish reason "length", the same usage, and logprobs for every token.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.reliability.helpers import SERVED, chat_body, open_stream, request
from tests.reliability.test_dp_faults import _wait
from tests.stack import REPO, Stack, free_port, newer_stats, stop_process_group

pytestmark = [pytest.mark.real_engine, pytest.mark.on_demand]  # several engine starts: see tests/conftest.py

ENGINE_TIMEOUT = 10  # the request deadline that declares the killed engine down
MAX_TOKENS = 600
# (stream, n): every request asks for logprobs with 2 alternatives.
VARIANTS = [(True, 1), (True, 2), (False, 1), (False, 2)]
PROMPT = [{"role": "user", "content": "Write a long story about a river."}]


def _engine(index: int, port: int, model: str) -> list[str]:
    from tests.e2e.tiny_model import ENGINE_ARGS

    return ["env", f"VLLM_CPU_OMP_THREADS_BIND={index % (os.cpu_count() or 1)}", sys.executable, "-m",
            "vllm_pyfrontend.supervisor.vllm_headless", model,
            "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(port),
            "--data-parallel-size", "2", "--data-parallel-size-local", "1",
            "--data-parallel-start-rank", str(index), *ENGINE_ARGS]


class TwoEngines:
    """Two headless engines and a one-worker frontend (its router's in-flight counts are then
    the whole deployment's: routing is predictable)."""

    def __init__(self, model: str):
        port = free_port()
        self.engines = [subprocess.Popen(_engine(i, port, model), cwd=REPO, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True) for i in (0, 1)]
        try:
            self.stack = Stack(["--workers", "1", "--data-parallel-size", "2", "--data-parallel-size-local", "0",
                                "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(port),
                                "--engine-timeout", str(ENGINE_TIMEOUT), "--max-model-len", "4096",
                                "--served-model-name", SERVED, "--shutdown-timeout", "5", model],
                               ready_timeout=600)
        except BaseException:
            self.close()
            raise

    def stats(self) -> dict[str, dict]:
        best: dict[str, dict] = {}
        for _ in range(4):
            for idx, st in request(self.stack, "/load").json().get("engines", {}).items():
                if newer_stats(st, best.get(idx)):
                    best[idx] = st
        return best

    def close(self) -> None:
        if hasattr(self, "stack"):
            self.stack.terminate(60)
        for e in self.engines:
            stop_process_group(e, 10)


@pytest.fixture(scope="module")
def two_engines():
    from tests.e2e.tiny_model import build_tiny_model

    dep = TwoEngines(build_tiny_model())
    try:
        for i in range(4):  # both engines run their first steps
            r = request(dep.stack, "/v1/chat/completions", chat_body(max_tokens=4),
                        headers={"X-data-parallel-rank": str(i % 2)}, timeout=300)
            assert r.status == 200, r.body
        yield dep
    finally:
        dep.close()


async def _run(base_url: str, progress: dict) -> list[dict]:
    """The variants, concurrently, through the SDK: per variant, each choice's text, token
    ids (from the logprobs), logprobs, finish reason, and the usage."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=600)

    async def one(stream: bool, n: int) -> dict:
        # top_k 1: every draw is the most likely token (greedy), with n > 1 allowed (vLLM refuses
        # n > 1 at temperature 0); no seed, so the request may continue elsewhere.
        kw = dict(model=SERVED, messages=PROMPT, max_tokens=MAX_TOKENS, temperature=1.0, n=n, logprobs=True,
                  top_logprobs=2, extra_body={"ignore_eos": True, "top_k": 1})
        choices = {i: {"text": [], "tokens": [], "logprobs": [], "finish": None} for i in range(n)}
        if not stream:
            r = await client.chat.completions.create(**kw)
            for c in r.choices:
                ch = choices[c.index]
                ch["text"].append(c.message.content)
                ch["tokens"] += [t.token for t in c.logprobs.content]
                ch["logprobs"] += [t.logprob for t in c.logprobs.content]
                ch["finish"] = c.finish_reason
            usage = r.usage
        else:
            usage = None
            s = await client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw)
            async for chunk in s:
                for c in chunk.choices:
                    ch = choices[c.index]
                    if c.delta.content:
                        ch["text"].append(c.delta.content)
                    if c.logprobs is not None and c.logprobs.content:
                        ch["tokens"] += [t.token for t in c.logprobs.content]
                        ch["logprobs"] += [t.logprob for t in c.logprobs.content]
                        progress[(stream, n)] = len(ch["tokens"])
                    if c.finish_reason:
                        ch["finish"] = c.finish_reason
                if chunk.usage is not None:
                    usage = chunk.usage
        return {"choices": {i: {**c, "text": "".join(c["text"])} for i, c in choices.items()},
                "usage": (usage.prompt_tokens, usage.completion_tokens)}

    try:
        return await asyncio.gather(*(one(s, n) for s, n in VARIANTS))
    finally:
        await client.close()


def test_the_moved_answer_equals_the_uninterrupted_one(two_engines):
    dep = two_engines
    base = dep.stack.base_url
    # Engine 0 is kept busy (pinned), so the requests under test go to engine 1.
    blockers = [open_stream(dep.stack, chat_body(stream=True, max_tokens=3500, ignore_eos=True),
                            headers={"X-data-parallel-rank": "0"}) for _ in range(8)]
    _wait(lambda: int(dep.stats().get("0", {}).get("num_running_reqs", 0)) >= 8, 120, "blockers on engine 0")
    progress: dict = {}
    out: dict = {}

    def run() -> None:
        try:
            out["moved"] = asyncio.run(_run(base, progress))
        except BaseException as e:  # noqa: BLE001 - reported below
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        _wait(lambda: "error" in out or int(dep.stats().get("1", {}).get("num_running_reqs", 0)) >= 6, 120,
              lambda: f"the requests on engine 1: {dep.stats()}")
        _wait(lambda: "error" in out or min(progress.get(v, 0) for v in VARIANTS if v[0]) >= 16, 120,
              lambda: f"tokens streamed before the kill: {progress}")
        if "error" in out:
            raise out["error"]
        os.killpg(dep.engines[1].pid, signal.SIGKILL)
        thread.join(600)
        assert not thread.is_alive()
    finally:
        for s in blockers:
            s.close()
    if "error" in out:
        raise out["error"]
    moved = out["moved"]
    # The same requests again, uninterrupted (engine 1 is gone: all on engine 0).
    reference = asyncio.run(_run(base, {}))
    for (stream, n), got, want in zip(VARIANTS, moved, reference):
        assert got["usage"] == want["usage"], (stream, n)
        assert got["usage"][1] == MAX_TOKENS * n
        for i in range(n):
            g, w = got["choices"][i], want["choices"][i]
            assert g["finish"] == w["finish"] == "length", (stream, n, i)
            assert len(g["tokens"]) == MAX_TOKENS, (stream, n, i, len(g["tokens"]))
            assert g["tokens"] == w["tokens"], (stream, n, i)
            assert g["text"] == w["text"], (stream, n, i)
            assert all(abs(a - b) < 0.05 for a, b in zip(g["logprobs"], w["logprobs"])), (stream, n, i)
    metrics = request(dep.stack, "/metrics").body.decode()
    moves = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                if line.startswith("vllm:request_migrations_total{"))
    assert moves >= 6, moves
