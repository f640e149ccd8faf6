"""Requests move to a live engine when theirs goes down, and finish as if nothing happened.

Sixty-four greedy streams run through the official `openai` SDK on two simulated engines that
joined over TCP (as `vllm serve --headless` engines do); one engine is killed (SIGKILL) or hung
(SIGSTOP). Its streams pause until the request deadline (`--engine-timeout`) declares it down,
then continue on the other engine: every stream ends with its full `max_tokens`, finish reason
"length", text equal to an uninterrupted greedy run of its prompt (the sim's greedy output, like
a real model's, continues where the moved request was), and no error. The same with one engine
and `--on-engine-death restart`: the streams wait for the restarted engine, and the port stays
open meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time

import pytest

from tests.ops.test_tracing import _attrs, receiver  # noqa: F401 - the OTLP receiver fixture
from tests.reliability.helpers import SERVED, request, sim_args, wait_for
from tests.reliability.test_dp_faults import ENGINE_TIMEOUT, DPDeployment, _wait, sim_engine
from tests.stack import REPO, Stack
from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4

STREAMS = 64
PROMPTS = ["Tell me a story.", "Name three rivers.", "What is a bridge?", "Describe a garden."]


def _chat(i: int) -> list[dict]:
    return [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]


async def _streams(base_url: str, n: int, max_tokens: int) -> list[tuple[str, str | None, int | None]]:
    """`n` greedy streams: (text, finish_reason, completion_tokens) of each; an exception (an
    HTTP error, an error event) fails the test."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=180)

    async def one(i: int):
        stream = await client.chat.completions.create(
            model=SERVED, messages=_chat(i), max_tokens=max_tokens, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        text, finish, usage = [], None, None
        async for chunk in stream:
            for c in chunk.choices:
                if c.delta.content:
                    text.append(c.delta.content)
                if c.finish_reason:
                    finish = c.finish_reason
            if chunk.usage is not None:
                usage = chunk.usage.completion_tokens
        return "".join(text), finish, usage

    try:
        return await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        await client.close()


def _reference(base_url: str, max_tokens: int) -> list[str]:
    """Each prompt's uninterrupted greedy answer (non-streaming, through the SDK)."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=120)
    out = []
    for i in range(len(PROMPTS)):
        r = client.chat.completions.create(model=SERVED, messages=_chat(i), max_tokens=max_tokens, temperature=0,
                                           extra_body={"ignore_eos": True})
        assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == max_tokens
        out.append(r.choices[0].message.content)
    return out


class _Background:
    """The streams, run on their own event loop in a thread while the test breaks an engine."""

    def __init__(self, base_url: str, n: int, max_tokens: int):
        self.result = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(base_url, n, max_tokens), daemon=True)
        self._thread.start()

    def _run(self, base_url: str, n: int, max_tokens: int) -> None:
        try:
            self.result = asyncio.run(_streams(base_url, n, max_tokens))
        except BaseException as e:  # noqa: BLE001 - reported by join()
            self.error = e

    def join(self, timeout: float):
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the streams did not finish"
        if self.error is not None:
            raise self.error
        return self.result


def _check(results, reference: list[str], max_tokens: int) -> None:
    assert len(results) == STREAMS
    for i, (text, finish, tokens) in enumerate(results):
        assert finish == "length", (i, finish)
        assert tokens == max_tokens, (i, tokens)
        assert text == reference[i % len(PROMPTS)], (i, text[:200], reference[i % len(PROMPTS)][:200])


def _migrations(stack: Stack) -> float:
    body = request(stack, "/metrics").body.decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
               if line.startswith("vllm:request_migrations_total{"))


@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_streams_move_off_an_engine_that_fails(fault):
    model = materialize_deepseek_v4(os.path.join(REPO, ".cache", "demo-deepseek-v4"))
    dp = DPDeployment(lambda port: [sim_engine(0, port, model), sim_engine(1, port, model)], model)
    max_tokens = 600  # 3 s of 5 ms steps at the least: they outlive the fault by far
    stopped = None
    try:
        base = dp.stack.base_url
        runs = _Background(base, STREAMS, max_tokens)
        _wait(lambda: len(st := dp.per_engine_stats()) == 2
              and all(int(s["num_running_reqs"]) >= 8 for s in st.values()), 60,
              lambda: f"streams running on both engines: {dp.per_engine_stats()}\n" + dp.diagnosis())
        if fault == "killed":
            os.killpg(dp.engines[1].pid, signal.SIGKILL)
        else:
            os.killpg(dp.engines[1].pid, signal.SIGSTOP)
            stopped = dp.engines[1]
        results = runs.join(ENGINE_TIMEOUT + 180)
        _check(results, _reference(base, max_tokens), max_tokens)
        assert _migrations(dp.stack) >= 1
        loads = [request(dp.stack, "/load").json()["server_load"] for _ in range(8)]
        assert loads == [0] * 8
    finally:
        if stopped is not None:
            os.killpg(stopped.pid, signal.SIGCONT)
        dp.close()


def test_streams_wait_for_a_restarted_engine(receiver):
    """One engine, `--on-engine-death restart`: the engine is killed under 64 streams; the
    supervisor restarts it while the workers keep serving (the port stays open: a request made
    meanwhile waits and is answered), and every stream finishes where it was. Each move is a
    span event ("request.migrated") and the request log line names the engines and the moves."""
    endpoint, spans = receiver
    stack = Stack(sim_args("--on-engine-death", "restart", "--engine-timeout", str(ENGINE_TIMEOUT),
                           "--enable-log-requests", "--otlp-traces-endpoint", endpoint,
                           step=0.005, max_model_len=4096))
    max_tokens = 600
    try:
        from tests.reliability.helpers import engines_of

        base = stack.base_url
        runs = _Background(base, STREAMS, max_tokens)
        wait_for(lambda: request(stack, "/load").json().get("server_load", 0) >= 16, 60, "streams running", stack)
        time.sleep(0)  # (the streams run; the engine goes now)
        engine = engines_of(stack)[0]
        os.kill(engine, signal.SIGKILL)
        wait_for(lambda: any("restarting the engine" in line for line in list(stack.log)), 30,
                 "the engine restart", stack)
        # During the restart: the port is open and a new request waits for the engine.
        late = request(stack, "/v1/chat/completions",
                       b'{"model": "%s", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}'
                       % SERVED.encode(), timeout=120)
        assert late.status == 200, late.body
        results = runs.join(180)
        _check(results, _reference(base, max_tokens), max_tokens)
        assert _migrations(stack) >= 1
        moved = [json.loads(line[line.index("{"):]) for line in list(stack.log)
                 if '"event":"request"' in line and '"migrations"' in line]
        assert moved and all(r["engines"] == [0, 0] and r["status"] == 200 for r in moved), moved[:3]
        events = []
        while len(events) < len(moved):
            span = spans.spans.get(timeout=30)
            events += [e for e in span.events if e.name == "request.migrated"]
        # "engine_restart" when the supervisor's word (SIGUSR2) reaches the worker first;
        # "engine_dead" when the worker finds the engine gone first: the late request above,
        # sent once the supervisor has logged the restart, may reach a worker before its signal
        # and be refused by the dead engine's socket (a loaded box: seen in CI).
        reasons = {_attrs(e)["reason"] for e in events}
        assert reasons and reasons <= {"engine_restart", "engine_dead"}, reasons
    finally:
        stack.terminate(60)
