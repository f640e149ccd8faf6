"""Fault injection at every layer boundary of the request pipeline.

One worker runs in a thread of the test process (its own event loop, the real EngineClient,
ServerState and aiohttp app, exactly as `frontend/server/worker.py` builds them) in front of the
simulated engine (another thread, joined through vLLM's handshake). A fault makes one layer's
method raise, on its Nth call or on the request's final output. For each fault, on the streaming
and the non-streaming path and with n = 1 and n = 2, the invariants are:

- the request ends: a 5xx error body, or an error event followed by `data: [DONE]`;
- the engine stops generating for it (an abort when it was still running);
- nothing of it is left in any table: the engine client's sinks, owners and in-flight counts,
  the worker's in-flight count, the SSE writer's pending drain buffers;
- the worker keeps serving: the next request gets its whole answer.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import httpx
import pytest
import uvloop
from aiohttp import web

from tests.stack import free_port
from tests.supervisor.sim_harness import EngineThread
from vllm_pyfrontend.chat.template import load_chat_template
from vllm_pyfrontend.config import WorkerConfig, WorkerPolicy
from vllm_pyfrontend.engine.client import EngineClient
from vllm_pyfrontend.engine.handshake import HandshakeServer
from vllm_pyfrontend.llm.generation import Generation
from vllm_pyfrontend.llm.sampling import GenerationDefaults
from vllm_pyfrontend.parsers.pipeline import AssistantPipeline
from vllm_pyfrontend.api.anthropic.formatter import AnthropicFormatter
from vllm_pyfrontend.server.app import build_app
from vllm_pyfrontend.serving.formatters import ChatFormatter, CompletionFormatter
from vllm_pyfrontend.serving.request_pipeline import ChoiceStep, RequestRun
from vllm_pyfrontend.serving.sse import SSEWriter
from vllm_pyfrontend.serving.state import ServerState
from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4
from vllm_pyfrontend.supervisor.sim.engine import SimEngineConfig
from vllm_pyfrontend.text.detokenizer import IncrementalDetokenizer
from vllm_pyfrontend.text.stop import StopStringMatcher
from vllm_pyfrontend.text.text_stream import TextStream
from vllm_pyfrontend.text.tokenizer import Tokenizer

MODEL = "dsv4"
LONG = 400  # tokens: ~2 s of 5 ms steps, so a request failed early is still running in the engine


class InjectedFault(RuntimeError):
    pass


class Worker:
    """The worker process's objects, on an event loop in a thread."""

    def __init__(self, tmp_path):
        model = materialize_deepseek_v4(str(tmp_path / "model"))
        handshake = HandshakeServer("tcp://127.0.0.1:*")
        self.engine_thread = EngineThread(SimEngineConfig(
            handshake_address=handshake.address, model=model, step_time=0.005, max_model_len=4096,
            log_stats=False)).start()
        inp, out = f"ipc://{tmp_path}/in", f"ipc://{tmp_path}/out"
        handshake.run(engine_indices=[0], inputs=[inp], outputs=[out], timeout=60)
        handshake.close()
        self.port = free_port()
        self.config = WorkerConfig(
            worker_index=0, num_workers=1, host="127.0.0.1", port=self.port, model=model,
            served_model_names=[MODEL], input_address=inp, output_address=out, runtime_dir=str(tmp_path),
            policy=WorkerPolicy(reasoning_parser="deepseek_v4", tool_call_parser="deepseek_v4",
                                enable_auto_tool_choice=True),
        )
        self.loop = uvloop.new_event_loop()
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self.ready.wait(60) or self.failed is not None:
            raise RuntimeError(f"worker did not start: {self.failed!r}")
        self.base = f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._start())
        except BaseException as e:  # reported to the constructor
            self.failed = e
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        cfg = self.config
        tokenizer = Tokenizer.load(cfg.model)
        self.client = EngineClient(client_index=0, input_address=cfg.input_address,
                                   output_address=cfg.output_address, engine_indices=[0],
                                   vocab_size=tokenizer.vocab_size, engine_timeout=30)
        await self.client.start(timeout=30)
        self.state = ServerState(cfg, tokenizer, load_chat_template(cfg.model), self.client,
                                 GenerationDefaults.load(cfg.model))
        self.client.drain_hooks = self.state.drain.hooks
        self.runner = web.AppRunner(build_app(self.state), handler_cancellation=True)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run fn on the worker's loop (its tables are only consistent there)."""
        async def run():
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def tables(self) -> dict[str, Any]:
        c, s = self.client, self.state
        return self.call(lambda: {
            "sinks": len(c._inflight.sinks), "owners": len(c._inflight.owner),
            "in_flight": sum(c.in_flight_by_engine().values()),
            "requests": s.in_flight, "drain_pending": len(s.drain.dirty), "healthy": c.healthy,
        })

    def engine_running(self) -> int:
        sched = self.engine_thread.engine.scheduler
        return len(sched.running) + sched.num_waiting

    def close(self) -> None:
        async def stop():
            await self.runner.cleanup()
            await self.client.close()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.engine_thread.stop()


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = Worker(tmp_path_factory.mktemp("faults"))
    yield w
    w.close()


@dataclass
class Fault:
    """Where to raise: `cls.method`, on its Nth call (counted from arming) or when `final`
    says the call carries the request's final output."""

    name: str
    cls: type
    method: str
    nth: int | tuple[int, ...] | None = None
    final: Callable[[tuple, dict], bool] | None = None
    stream_only: bool = False
    json_only: bool = False
    body: dict | None = None  # extra request fields this fault needs to be reached
    api: str = "openai"  # or "anthropic": POST /v1/messages (one choice; Anthropic's error shapes)
    # The same layer's other entry points, counted with `cls.method`: the text stream's common
    # step (`TextStream.feed_one`, which does the detokenizer's and the stop matcher's part of
    # that step inline) stands for the calls it saves.
    also: tuple[tuple[type, str], ...] = ()


def _final_output(args: tuple, kwargs: dict) -> bool:
    return args[0].finish_reason is not None  # Generation.on_output(output)


def _final_delta(args: tuple, kwargs: dict) -> bool:
    return args[3] is not None  # ChoiceStep.on_delta(gen, token_ids, logprobs, finish_reason, ...)


_FEED_ONE = ((TextStream, "feed_one"),)

FAULTS = [
    Fault("engine_output_nth", Generation, "on_tokens", nth=3),  # a running output (the per-token path)
    Fault("engine_output_final", Generation, "on_output", final=_final_output, body={"max_tokens": 6}),
    Fault("pipeline_final", ChoiceStep, "on_delta", final=_final_delta, body={"max_tokens": 6}),
    Fault("text_stream_nth", TextStream, "feed", nth=3, also=_FEED_ONE),
    Fault("detokenizer_nth", IncrementalDetokenizer, "feed", nth=3, also=_FEED_ONE),
    Fault("stop_matcher_nth", StopStringMatcher, "feed", nth=3, body={"stop": ["zzzz-never"]}, also=_FEED_ONE),
    Fault("parser_nth", AssistantPipeline, "feed", nth=3),
    Fault("parser_finish", AssistantPipeline, "finish", nth=1, body={"max_tokens": 6}),
    Fault("logprobs_nth", ChatFormatter, "format_logprobs", nth=3, body={"logprobs": True, "top_logprobs": 2}),
    Fault("formatter_delta_nth", ChatFormatter, "stream_delta", nth=3, stream_only=True,
          body={"logprobs": True}),
    Fault("formatter_body", ChatFormatter, "body", nth=1, json_only=True, body={"max_tokens": 6}),
    Fault("usage_final", RequestRun, "usage", nth=1, body={"max_tokens": 6}),
    Fault("sse_write_nth", SSEWriter, "write", nth=3, stream_only=True, body={"logprobs": True}),
    # The first write (the role chunk, from the handler once the headers are out), and a write
    # failing again when the error event itself goes out.
    Fault("sse_write_first", SSEWriter, "write", nth=1, stream_only=True),
    Fault("sse_write_and_error_event", SSEWriter, "write", nth=(3, 4), stream_only=True, body={"logprobs": True}),
    Fault("completion_formatter_nth", CompletionFormatter, "stream_delta", nth=3, stream_only=True,
          body={"logprobs": 1}),
    # The Anthropic Messages route: its formatter, and the shared layers under its framing.
    Fault("messages_formatter_nth", AnthropicFormatter, "stream_delta", nth=3, stream_only=True, api="anthropic"),
    Fault("messages_formatter_body", AnthropicFormatter, "body", nth=1, json_only=True, body={"max_tokens": 6},
          api="anthropic"),
    Fault("messages_pipeline_final", ChoiceStep, "on_delta", final=_final_delta, body={"max_tokens": 6},
          api="anthropic"),
    Fault("messages_parser_nth", AssistantPipeline, "feed", nth=3, api="anthropic"),
    Fault("messages_sse_write_nth", SSEWriter, "write", nth=3, stream_only=True, api="anthropic"),
]


def _arm(monkeypatch, fault: Fault) -> dict:
    seen = {"calls": 0, "raised": 0}
    nths = (fault.nth,) if isinstance(fault.nth, int) else (fault.nth or ())
    seen["expected"] = max(1, len(nths))

    def patch(cls: type, method: str) -> None:
        original = getattr(cls, method)

        def wrapper(self, *args, **kwargs):
            seen["calls"] += 1
            hit = seen["calls"] in nths or (
                fault.final is not None and seen["raised"] == 0 and fault.final(args, kwargs))
            if hit:
                seen["raised"] += 1
                raise InjectedFault(f"injected fault in {cls.__name__}.{method}")
            return original(self, *args, **kwargs)

        monkeypatch.setattr(cls, method, wrapper)

    for cls, method in ((fault.cls, fault.method), *fault.also):
        patch(cls, method)
    return seen


def _request(fault: Fault, stream: bool, n: int) -> tuple[str, dict]:
    if fault.api == "anthropic":
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": LONG,
                "stream": stream, "temperature": 1.0, **(fault.body or {})}
        return "/v1/messages", body
    if fault.cls is CompletionFormatter:
        path, body = "/v1/completions", {"model": MODEL, "prompt": "Once upon a time"}
    else:
        path, body = "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
    body.update(max_tokens=LONG, stream=stream, n=n, temperature=1.0, seed=1)
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(fault.body or {})
    return path, body


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {what}")
        time.sleep(0.02)


CASES = [
    pytest.param(fault, stream, n, id=f"{fault.name}-{'sse' if stream else 'json'}-{n}")
    for fault in FAULTS for stream in (False, True) for n in (1, 2)
    if not (fault.stream_only and not stream) and not (fault.json_only and stream)  # where the layer runs
    and not (fault.api == "anthropic" and n > 1)
]


@pytest.mark.parametrize("fault,stream,n", CASES)
def test_every_request_ends_under_a_fault(worker, monkeypatch, fault, stream, n):
    path, body = _request(fault, stream, n)
    seen = _arm(monkeypatch, fault)
    try:
        r = httpx.post(worker.base + path, json=body, timeout=15)
    finally:
        monkeypatch.undo()
    assert seen["raised"] == seen["expected"], f"the fault was not reached ({seen})"

    # The request ended, with an error (not with the answer the engine would have finished).
    if fault.api == "anthropic":  # Anthropic's shapes: a 500 body, or an error event ending the stream
        if not stream:
            assert r.status_code == 500 and r.json()["error"]["type"] == "api_error", r.text
        else:
            assert r.status_code == 200
            frames = [f for f in r.text.split("\n\n") if f]
            assert frames[-1].startswith("event: error\ndata: "), r.text[-500:]
            assert json.loads(frames[-1].split("data: ", 1)[1])["error"]["type"] == "api_error"
            assert "[DONE]" not in r.text
    elif not stream:
        assert r.status_code == 500, r.text
        assert r.json()["error"]["code"] == 500
    else:
        assert r.status_code == 200
        lines = [ln for ln in r.text.split("\n\n") if ln.startswith("data: ")]
        assert lines[-1] == "data: [DONE]", r.text[-500:]
        errors = [ev for ev in (json.loads(ln[6:]) for ln in lines[:-1]) if "error" in ev]
        assert errors and errors[-1]["error"]["code"] == 500, r.text[-500:]

    # The engine stops generating for it; nothing is left behind in the worker.
    _wait(lambda: worker.engine_running() == 0, 5, "the engine to drop the failed request")
    _wait(lambda: worker.tables() == {"sinks": 0, "owners": 0, "in_flight": 0, "requests": 0,
                                      "drain_pending": 0, "healthy": True}, 5,
          f"empty tables, got {worker.tables()}")

    # And the worker keeps serving.
    ok = httpx.post(worker.base + "/v1/chat/completions", timeout=20, json={
        "model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 5, ok.text


# -- the Responses API (api/responses): the same faults through its formatter and routes ------
from vllm_pyfrontend.api.responses.formatter import ResponsesFormatter  # noqa: E402

RESPONSES_FAULTS = [
    Fault("engine_output_nth", Generation, "on_tokens", nth=3),  # a running output (the per-token path)
    Fault("pipeline_final", ChoiceStep, "on_delta", final=_final_delta, body={"max_output_tokens": 6}),
    Fault("parser_nth", AssistantPipeline, "feed", nth=3),
    Fault("responses_formatter_nth", ResponsesFormatter, "stream_delta", nth=3),
    Fault("usage_final", RequestRun, "usage", nth=1, body={"max_output_tokens": 6}),
    Fault("sse_write_first", SSEWriter, "write", nth=1, stream_only=True),
    Fault("sse_write_attach", SSEWriter, "write", nth=3, stream_only=True),  # replaying the held events
    Fault("sse_write_nth", SSEWriter, "write", nth=5, stream_only=True),
]


@pytest.mark.parametrize("fault,stream", [
    pytest.param(f, s, id=f"{f.name}-{'sse' if s else 'json'}")
    for f in RESPONSES_FAULTS for s in (False, True) if not (f.stream_only and not s)])
def test_every_responses_request_ends_under_a_fault(worker, monkeypatch, fault, stream):
    body = {"model": MODEL, "input": "Hi", "max_output_tokens": LONG, "stream": stream, "temperature": 1.0,
            "seed": 1, **(fault.body or {})}
    seen = _arm(monkeypatch, fault)
    try:
        r = httpx.post(worker.base + "/v1/responses", json=body, timeout=15)
    finally:
        monkeypatch.undo()
    if fault.cls is RequestRun and fault.method == "usage":
        # Responses never asks the run for chat usage: nothing to inject, the request succeeds.
        assert seen["raised"] == 0 and r.status_code == 200
        return
    assert seen["raised"] == seen["expected"], f"the fault was not reached ({seen})"
    if not stream or fault.name == "sse_write_first":
        # (the first write is `response.created`, held until the headers go out: they never do,
        # and the answer is the 500 itself)
        assert r.status_code == 500 and r.json()["error"]["code"] == 500, r.text
    else:
        assert r.status_code == 200
        events = [json.loads(block.split("\ndata: ", 1)[1]) for block in r.text.split("\n\n") if block]
        assert "[DONE]" not in r.text
        if fault.cls is SSEWriter:
            # A write to the client failed: the stream is cut (the client sees no terminal event).
            assert not events or events[-1]["type"] != "response.completed", r.text[-500:]
        else:
            assert events[-1]["type"] == "response.failed", r.text[-500:]
            assert events[-1]["response"]["status"] == "failed"
            stored = httpx.get(f"{worker.base}/v1/responses/{events[-1]['response']['id']}", timeout=10)
            assert stored.json()["status"] == "failed"
    _wait(lambda: worker.engine_running() == 0, 5, "the engine to drop the failed request")
    _wait(lambda: worker.tables() == {"sinks": 0, "owners": 0, "in_flight": 0, "requests": 0,
                                      "drain_pending": 0, "healthy": True}, 5,
          f"empty tables, got {worker.tables()}")
    ok = httpx.post(worker.base + "/v1/responses", timeout=20,
                    json={"model": MODEL, "input": "Hi", "max_output_tokens": 5})
    assert ok.status_code == 200 and ok.json()["usage"]["output_tokens"] == 5, ok.text


# -- a fault while a request moves to another engine (engine/migration.py) --------------------
import vllm_pyfrontend.engine.client as engine_client_module  # noqa: E402
import vllm_pyfrontend.engine.migration as migration_module  # noqa: E402

MIGRATION_FAULTS = ["none", "continuation", "on_moved", "resend", "first_output_after_move"]


def _arm_migration_fault(monkeypatch, where: str) -> dict:
    seen = {"raised": 0}

    def fail(*args, **kwargs):
        seen["raised"] += 1
        raise InjectedFault(f"injected fault in {where}")

    if where == "continuation":
        monkeypatch.setattr(migration_module, "continuation", fail)
    elif where == "on_moved":
        monkeypatch.setattr(Generation, "on_moved", fail)
    elif where == "resend":
        monkeypatch.setattr(engine_client_module, "encode_add", fail)
    elif where == "first_output_after_move":
        original = Generation.on_tokens

        def on_tokens(self, token_ids):
            if self.moves:
                fail()
            return original(self, token_ids)

        monkeypatch.setattr(Generation, "on_tokens", on_tokens)
    return seen


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("where", MIGRATION_FAULTS)
def test_a_fault_during_a_migration_ends_the_request(worker, monkeypatch, where, stream):
    """The engine restarts under a running greedy request (the supervisor's word, as its
    SIGUSR2 gives it), so the request moves, and one step of the move raises: the request still
    ends (a 500, or an error event and [DONE]), nothing is left waiting or in flight, and the
    worker keeps serving. Without a fault the moved request finishes whole."""
    client = worker.client
    worker.call(lambda: setattr(client._migrations, "limit", 3))
    result: dict = {}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": LONG,
            "stream": stream, "temperature": 0, "ignore_eos": True}
    if stream:
        body["stream_options"] = {"include_usage": True}

    def post():
        result["r"] = httpx.post(worker.base + "/v1/chat/completions", json=body, timeout=30)

    sched = worker.engine_thread.engine.scheduler
    thread = threading.Thread(target=post)
    try:
        thread.start()
        _wait(lambda: any(r.n_out >= 5 for r in list(sched.running.values())), 10, "the request generating")
        seen = _arm_migration_fault(monkeypatch, where)
        worker.call(client.engine_restarting)
        thread.join(30)
    finally:
        monkeypatch.undo()
        _wait(lambda: not worker.call(lambda: client.engines_down), 10, "the engine taken back")
        worker.call(lambda: setattr(client._migrations, "limit", 0))
    r = result["r"]
    if where == "none":
        assert r.status_code == 200, r.text
        if stream:
            usage = [json.loads(ln[6:]) for ln in r.text.split("\n\n") if ln.startswith("data: {")][-1]["usage"]
        else:
            usage = r.json()["usage"]
        assert usage["completion_tokens"] == LONG and '"error"' not in r.text, r.text[-500:]
    else:
        assert seen["raised"] >= 1, f"the fault was not reached ({seen})"
        if not stream:
            assert r.status_code == 500 and r.json()["error"]["code"] == 500, r.text
        else:
            lines = [ln for ln in r.text.split("\n\n") if ln.startswith("data: ")]
            assert lines[-1] == "data: [DONE]", r.text[-500:]
            errors = [ev for ev in (json.loads(ln[6:]) for ln in lines[:-1]) if "error" in ev]
            assert errors and errors[-1]["error"]["code"] == 500, r.text[-500:]
    _wait(lambda: worker.engine_running() == 0, 5, "the engine to drop the request")
    _wait(lambda: worker.tables() == {"sinks": 0, "owners": 0, "in_flight": 0, "requests": 0,
                                      "drain_pending": 0, "healthy": True}, 5,
          f"empty tables, got {worker.tables()}")
    assert worker.call(lambda: len(client._migrations.parked)) == 0
    ok = httpx.post(worker.base + "/v1/chat/completions", timeout=20, json={
        "model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 5, ok.text
