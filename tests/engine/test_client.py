"""EngineClient against fake engines built from plain zmq DEALER/PUSH sockets.

The fake engines speak with vLLM's own MsgpackEncoder/Decoder and msgspec classes,
so what the client sends is decoded exactly as the engine would decode it.
"""

from __future__ import annotations

import asyncio
import functools
import time

import msgspec
import numpy as np
import pytest
import uvloop
import zmq
from vllm.v1.engine import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreReadyResponse,
    EngineCoreRequest,
    FinishReason,
    UtilityOutput,
)
from vllm.v1.metrics.stats import SchedulerStats
from vllm.v1.outputs import LogprobsLists
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder, UtilityResult

from vllm_pyfrontend.engine.client import EngineClient, UtilityError
from tests.fake_engine import engine_sockets
from vllm_pyfrontend.engine.types import (
    EngineDeadError,
    FailureKind,
    EngineInfo,
    EngineRequest,
    InvalidEngineRequest,
)


def on_uvloop(fn):
    """Run the async test body on uvloop, the workers' event loop."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return uvloop.run(fn(*args, **kwargs))

    return wrapper


async def until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.002)


class FakeEngine:
    def __init__(self, ctx: zmq.Context, index: int, input_address: str, output_address: str):
        self.index = index
        self.dealer, self.push = engine_sockets(ctx, index, input_address, output_address)
        self.encoder = MsgpackEncoder()
        self.add_decoder = MsgpackDecoder(EngineCoreRequest)
        self.decoder = MsgpackDecoder()

    def send_ready(self, max_model_len: int = 128, version: str = "0.32.0") -> None:
        self.dealer.send(msgspec.msgpack.encode(EngineCoreReadyResponse(
            max_model_len=max_model_len, num_gpu_blocks=10, block_size=16, dp_stats_address=None,
            dtype="float32", vllm_version=version, world_size=1, data_parallel_size=1,
            tensor_parallel_size=1, pipeline_parallel_size=1, decode_context_parallel_size=1,
            data_parallel_rank=self.index, max_num_seqs=64, max_num_batched_tokens=2048,
            instance_id="test", supports_lora=False, max_loras=0)))

    async def recv(self, timeout: float = 5.0):
        """(type_byte, decoded request) like EngineCoreProc.process_input_sockets."""
        deadline = time.monotonic() + timeout
        while not self.dealer.poll(0):
            if time.monotonic() > deadline:
                raise AssertionError(f"engine {self.index}: nothing received")
            await asyncio.sleep(0.002)
        kind, *data = self.dealer.recv_multipart()
        if kind == b"\x00":
            return kind, self.add_decoder.decode(data)
        return kind, self.decoder.decode(data)

    async def nothing_received(self, wait: float = 0.1) -> bool:
        await asyncio.sleep(wait)
        return not self.dealer.poll(0)

    def send(self, eco: EngineCoreOutputs) -> None:
        eco.engine_index = self.index
        self.push.send_multipart(self.encoder.encode(eco))

    def close(self) -> None:
        self.dealer.close()
        self.push.close()


class Sink:
    def __init__(self, fail: bool = False):
        self.outputs = []
        self.dead: str | None = None
        self.fail = fail

    def on_output(self, o) -> None:
        self.outputs.append(o)
        if self.fail:
            self.fail = False
            raise RuntimeError("sink bug")

    def on_failure(self, failure) -> None:
        self.failure = failure
        self.dead = failure.message

    @property
    def tokens(self) -> list[int]:
        return [t for o in self.outputs for t in o.new_token_ids]


def _req(rid: str, max_tokens: int = 8, **sp) -> EngineRequest:
    return EngineRequest(request_id=rid, prompt_token_ids=[1, 2, 3],
                         sampling_params={"max_tokens": max_tokens, **sp}, arrival_time=time.time())


async def _started(addresses, zctx, engine_indices=(0,), client_index=1, engine_timeout=None, **ready):
    client = EngineClient(client_index=client_index, input_address=addresses[0],
                          output_address=addresses[1], engine_indices=list(engine_indices),
                          vocab_size=1000, engine_timeout=engine_timeout)
    start = asyncio.create_task(client.start(timeout=5))
    await asyncio.sleep(0.02)
    engines = [FakeEngine(zctx, i, *addresses) for i in engine_indices]
    for e in engines:
        e.send_ready(**ready)
    infos = await start
    return client, engines, infos


@on_uvloop
async def test_full_session(addresses, zctx):
    client, (eng,), infos = await _started(addresses, zctx, max_model_len=100, version="0.32.0+cpu")
    try:
        assert [i.engine_index for i in infos] == [0]
        assert client.healthy and client.max_model_len == 100
        assert client.vllm_version == "0.32.0+cpu"

        # ADD: validated, stamped with our client index, decoded by vLLM's decoder.
        s1, s2 = Sink(), Sink()
        client.add_request(_req("r1", logprobs=1), s1)
        client.add_request(_req("r2"), s2)
        assert client.num_in_flight == 2
        for rid in ("r1", "r2"):
            kind, req = await eng.recv()
            assert kind == b"\x00" and req.request_id == rid and req.client_index == 1
            assert req.sampling_params.max_tokens == 8

        # Outputs go to their sinks; finished ones are dropped.
        lp = LogprobsLists(np.array([[5, 9]], dtype=np.int32), np.array([[-0.1, -2.5]], np.float32),
                           np.array([1], dtype=np.int32), None)
        eng.send(EngineCoreOutputs(outputs=[
            EngineCoreOutput("r1", [5], new_logprobs=lp),
            EngineCoreOutput("r2", [6, 7], finish_reason=FinishReason.STOP, stop_reason=7),
        ], scheduler_stats=SchedulerStats(num_running_reqs=2, num_waiting_reqs=1)))
        await until(lambda: s2.outputs and s1.outputs)
        assert s1.tokens == [5] and s1.outputs[0].new_logprobs.token_ids == [[5, 9]]
        assert s1.outputs[0].new_logprobs.logprobs == [[pytest.approx(-0.1), -2.5]]
        assert s2.tokens == [6, 7] and s2.outputs[0].finished and s2.outputs[0].stop_reason == 7
        assert client.num_in_flight == 1
        assert client.scheduler_stats[0]["num_running_reqs"] == 2

        # Aborts in one loop iteration go out as one ABORT message; no more callbacks.
        s3, s4 = Sink(), Sink()
        client.add_request(_req("r3"), s3)
        client.add_request(_req("r4"), s4)
        await eng.recv(), await eng.recv()
        client.abort(("r1",))
        client.abort(["r3", "r4", "unknown"])
        assert client.num_in_flight == 0
        kind, ids = await eng.recv()
        assert kind == b"\x01" and ids == ["r1", "r3", "r4"]
        assert await eng.nothing_received(0.05)
        # Late outputs of aborted requests: dropped quietly, not aborted again.
        eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput("r1", [8])]))
        assert await eng.nothing_received()
        assert s1.tokens == [5]

        # Orphans (unknown and unfinished) are aborted; finished ones ignored.
        eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput("ghost", [1]),
                                            EngineCoreOutput("ghost2", [], finish_reason=2)]))
        assert await eng.recv() == (b"\x01", ["ghost"])
        assert await eng.nothing_received(0.05)

        # Utility calls.
        call = asyncio.create_task(client.call_utility("echo", 1, "a"))
        kind, (client_index, call_id, method, args) = await eng.recv()
        assert (kind, client_index, method, args) == (b"\x03", 1, "echo", [1, "a"])
        eng.send(EngineCoreOutputs(utility_output=UtilityOutput(call_id, None, UtilityResult([1, "a"]))))
        assert await call == [1, "a"]
        call = asyncio.create_task(client.call_utility("broken"))
        _, (_, call_id, _, _) = await eng.recv()
        eng.send(EngineCoreOutputs(utility_output=UtilityOutput(call_id, "no such method")))
        with pytest.raises(UtilityError, match="no such method"):
            await call
        with pytest.raises(asyncio.TimeoutError):
            await client.call_utility("slow", timeout=0.05)
        await eng.recv()

        # A failing sink: logged, request aborted, sink told it failed.
        bad = Sink(fail=True)
        client.add_request(_req("r5"), bad)
        await eng.recv()
        eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput("r5", [1])]))
        assert await eng.recv() == (b"\x01", ["r5"])
        assert bad.failure.kind is FailureKind.INTERNAL and "sink bug" in bad.failure.message
        assert client.num_in_flight == 0

        # A sink failing on the request's final output is told too (the layer above must
        # still end its request); nothing is aborted, the engine already finished it.
        last = Sink(fail=True)
        client.add_request(_req("r6"), last)
        await eng.recv()
        eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput("r6", [1], finish_reason=0)]))
        await until(lambda: last.dead is not None)
        assert last.failure.kind is FailureKind.INTERNAL and client.num_in_flight == 0

        # A sink's own AttributeError in `on_tokens` fails its request like any other error
        # (only a sink without `on_tokens` gets the step as an output instead).
        class TokenSink(Sink):
            def on_tokens(self, ids) -> None:
                raise AttributeError("token sink bug")

        broken = TokenSink()
        client.add_request(_req("r6b"), broken)
        await eng.recv()
        eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput("r6b", [1])]))
        assert await eng.recv() == (b"\x01", ["r6b"])
        assert broken.failure.kind is FailureKind.INTERNAL and "token sink bug" in broken.failure.message
        assert broken.outputs == [] and client.num_in_flight == 0

        # Validation happens before anything is sent.
        with pytest.raises(InvalidEngineRequest) as e:
            client.add_request(_req("r6", temperature=5.0), Sink())
        assert e.value.param == "temperature"
        with pytest.raises(InvalidEngineRequest) as e:
            client.add_request(_req("r7", max_tokens=98), Sink())  # 3 + 98 > 100
        assert e.value.param == "max_tokens"
        assert await eng.nothing_received(0.05)

        # ENGINE_CORE_DEAD fails everything in flight.
        s8 = Sink()
        client.add_request(_req("r8"), s8)
        await eng.recv()
        pending = asyncio.create_task(client.call_utility("never"))
        await eng.recv()
        eng.push.send(b"ENGINE_CORE_DEAD")
        await until(lambda: s8.dead is not None)
        assert not client.healthy and client.num_in_flight == 0
        with pytest.raises(EngineDeadError):
            await pending
        with pytest.raises(EngineDeadError):
            client.add_request(_req("r9"), Sink())
        with pytest.raises(EngineDeadError):
            await client.call_utility("x")
    finally:
        await client.close()
        eng.close()


@on_uvloop
async def test_mark_dead_and_close(addresses, zctx):
    client, (eng,), _ = await _started(addresses, zctx)
    try:
        a = Sink()
        client.add_request(_req("a"), a)
        client.mark_dead("supervisor says so")
        assert a.dead == "supervisor says so" and not client.healthy
        assert a.failure.kind is FailureKind.ENGINE_DEAD
        assert client.num_in_flight == 0
        with pytest.raises(EngineDeadError, match="supervisor says so"):
            client.add_request(_req("b"), Sink())
        # Nothing goes to a dead engine: not the request made before it died (sent with the
        # loop iteration's others, which never came), nor its abort.
        assert await eng.nothing_received(0.05)
    finally:
        await client.close()
        eng.close()


@on_uvloop
async def test_close_aborts_in_flight(addresses, zctx):
    client, (eng,), _ = await _started(addresses, zctx)
    s = Sink()
    client.add_request(_req("a"), s)
    await eng.recv()
    await client.close()
    assert s.dead is not None
    assert await eng.recv() == (b"\x01", ["a"])
    eng.close()


@on_uvloop
async def test_restarted_worker_trusts_infos_and_aborts_orphans(addresses, zctx):
    # The engine is already running: its sockets reconnect to the new worker's
    # sockets, and it never sends another ready response.
    eng = FakeEngine(zctx, 0, *addresses)
    eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput("old-worker-req", [1])]))
    info = EngineInfo(engine_index=0, max_model_len=64, vllm_version="0.33.0")
    client = EngineClient(client_index=0, input_address=addresses[0],
                          output_address=addresses[1], engine_indices=[0])
    try:
        infos = await asyncio.wait_for(client.start(engine_infos=[info], timeout=5), 5)
        assert infos == [info] and client.max_model_len == 64
        # The orphan queued before start is aborted.
        assert await eng.recv() == (b"\x01", ["old-worker-req"])
        s = Sink()
        client.add_request(_req("new"), s)
        kind, req = await eng.recv()
        assert kind == b"\x00" and req.request_id == "new" and req.client_index == 0
    finally:
        await client.close()
        eng.close()


@on_uvloop
async def test_data_parallel_least_loaded(addresses, zctx):
    client, engines, infos = await _started(addresses, zctx, engine_indices=(0, 1))
    e0, e1 = engines
    try:
        assert [i.engine_index for i in infos] == [0, 1]
        for i in range(4):
            client.add_request(_req(f"r{i}"), Sink())
        assert client.in_flight_by_engine() == {0: 2, 1: 2}
        # Engine 0 reports a long queue: new work goes to engine 1.
        e0.send(EngineCoreOutputs(scheduler_stats=SchedulerStats(num_running_reqs=8,
                                                                 num_waiting_reqs=4)))
        await until(lambda: 0 in client.scheduler_stats)
        for i in range(4, 7):
            client.add_request(_req(f"r{i}"), Sink())
        assert client.in_flight_by_engine() == {0: 2, 1: 5}
        # A pinned rank wins over load; aborts go to the owning engine.
        r = _req("pin0")
        r.data_parallel_rank = 0
        client.add_request(r, Sink())
        assert client.in_flight_by_engine() == {0: 3, 1: 5}
        added = {0: [], 1: []}
        for e in engines:
            for _ in range(3 if e.index == 0 else 5):
                kind, req = await e.recv()
                assert kind == b"\x00"
                added[e.index].append(req.request_id)
        assert "pin0" in added[0]
        victims = ["r0", "r1", "r4", "pin0"]
        client.abort(victims)
        for e in engines:
            expected = [v for v in victims if v in added[e.index]]
            if expected:
                assert await e.recv() == (b"\x01", expected)
            assert await e.nothing_received(0.02)
    finally:
        await client.close()
        for e in engines:
            e.close()


@on_uvloop
async def test_data_parallel_stale_load_report_is_forgotten(addresses, zctx, monkeypatch):
    """A load report this worker got long ago no longer counts: the engine sends each step's
    stats to one client only, so the last one another worker kept of an engine since gone idle
    would keep routing away from it."""
    import vllm_pyfrontend.engine.routing as routing

    monkeypatch.setattr(routing, "STATS_MAX_AGE_S", 0.3)
    client, engines, _ = await _started(addresses, zctx, engine_indices=(0, 1))
    e0, _ = engines
    try:
        e0.send(EngineCoreOutputs(scheduler_stats=SchedulerStats(num_running_reqs=8, num_waiting_reqs=4)))
        await until(lambda: 0 in client.scheduler_stats)
        for i in range(4):
            client.add_request(_req(f"r{i}"), Sink())
        assert client.in_flight_by_engine() == {0: 0, 1: 4}  # the fresh report counts
        await asyncio.sleep(0.4)  # and engine 0 sends no other
        for i in range(4, 12):
            client.add_request(_req(f"r{i}"), Sink())
        assert client.in_flight_by_engine() == {0: 6, 1: 6}  # by the requests in flight alone
    finally:
        await client.close()
        for e in engines:
            e.close()


async def _drain(engine: FakeEngine) -> list:
    got = []
    while engine.dealer.poll(0):
        kind, *data = engine.dealer.recv_multipart()
        got.append((kind, engine.add_decoder.decode(data) if kind == b"\x00" else engine.decoder.decode(data)))
    return got


@on_uvloop
async def test_data_parallel_one_engine_stalls(addresses, zctx):
    """Engine 0 goes silent: its requests fail (stalled), engine 1 serves on, aborts for
    engine 1 still flow, and engine 0 is taken back once it answers again."""
    client, engines, _ = await _started(addresses, zctx, engine_indices=(0, 1), engine_timeout=0.4)
    e0, e1 = engines
    alive = True

    async def heartbeat():  # engine 1 keeps talking (an empty batch counts)
        while alive:
            e1.send(EngineCoreOutputs())
            await asyncio.sleep(0.05)

    beat = asyncio.create_task(heartbeat())
    try:
        s0, s1 = Sink(), Sink()
        client.add_request(_req("a"), s0)
        client.add_request(_req("b"), s1)
        assert client.in_flight_by_engine() == {0: 1, 1: 1}
        await until(lambda: s0.dead is not None, 3)
        assert s0.failure.kind is FailureKind.ENGINE_STALLED and s1.dead is None
        assert client.healthy and client.engines_down == [0]
        for i in range(3):
            client.add_request(_req(f"n{i}"), Sink())
        assert client.in_flight_by_engine() == {0: 0, 1: 4}
        assert [req.request_id for _, req in await _drain_until(e1, 4)] == ["b", "n0", "n1", "n2"]
        client.abort(["n1"])
        await until(lambda: e1.dealer.poll(0))
        assert (b"\x01", ["n1"]) in await _drain(e1)
        e0.send(EngineCoreOutputs())  # engine 0 wakes up
        await until(lambda: client.engines_down == [])
        assert client.healthy
    finally:
        alive = False
        await beat
        await client.close()
        for e in engines:
            e.close()


@on_uvloop
async def test_data_parallel_engine_socket_gone(addresses, zctx):
    """Engine 1's socket disappears: a request routed to it is sent to engine 0 instead, and
    engine 1 leaves routing; /health stays up on the live engine."""
    client, engines, _ = await _started(addresses, zctx, engine_indices=(0, 1))
    e0, e1 = engines
    try:
        e1.dealer.close(linger=0)
        await asyncio.sleep(0.2)  # the ROUTER notices the disconnect
        sinks = [Sink() for _ in range(4)]
        for i, s in enumerate(sinks):
            client.add_request(_req(f"r{i}"), s)
        # (routed across both; the send to engine 1 fails, and its requests move to engine 0)
        got = [req.request_id for kind, req in await _drain_until(e0, 4)]
        assert got == ["r0", "r1", "r2", "r3"]
        assert client.in_flight_by_engine() == {0: 4, 1: 0}
        assert client.engines_down == [1] and client.healthy
        assert all(s.dead is None for s in sinks)
    finally:
        await client.close()
        e0.close()
        e1.push.close()


@on_uvloop
async def test_one_engine_dead_is_not_undone_by_another_recovering(addresses, zctx):
    """Engine 0 stalls, then engine 1 sends ENGINE_CORE_DEAD: when engine 0 answers again the
    client stays dead (vLLM: an engine core's death ends the client)."""
    client, engines, _ = await _started(addresses, zctx, engine_indices=(0, 1), engine_timeout=0.4)
    e0, e1 = engines
    try:
        async def quiet_e0_chatty_e1():
            while 0 not in client.engines_down:
                e1.send(EngineCoreOutputs())
                await asyncio.sleep(0.05)
        await asyncio.wait_for(quiet_e0_chatty_e1(), 5)
        assert client.healthy
        e1.push.send(b"ENGINE_CORE_DEAD")
        await until(lambda: not client.healthy)
        e0.send(EngineCoreOutputs())
        await until(lambda: client.engines_down == [])
        await asyncio.sleep(0.05)
        assert not client.healthy
        with pytest.raises(EngineDeadError):
            client.add_request(_req("late"), Sink())
    finally:
        await client.close()
        for e in engines:
            e.close()


async def _drain_until(engine: FakeEngine, n: int) -> list:
    got = []
    while len(got) < n:
        got.append(await engine.recv())
    return got


@on_uvloop
async def test_many_batches_are_all_delivered(addresses, zctx):
    """Edge-triggered FD + drain budget: nothing may be left behind in the socket."""
    client, (eng,), _ = await _started(addresses, zctx)
    try:
        sinks = {f"r{i}": Sink() for i in range(20)}
        for rid, s in sinks.items():
            client.add_request(_req(rid, max_tokens=100), s)
        for _ in range(150):
            eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput(rid, [1]) for rid in sinks]))
        eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput(rid, [2], finish_reason=1)
                                            for rid in sinks]))
        await until(lambda: all(s.outputs and s.outputs[-1].finished for s in sinks.values()))
        assert all(s.tokens == [1] * 150 + [2] for s in sinks.values())
        assert client.num_in_flight == 0
    finally:
        await client.close()
        eng.close()


@on_uvloop
async def test_a_backlog_is_delivered_once_per_stream(addresses, zctx, monkeypatch):
    """Messages queued behind the first of a drain: each stream's plain token steps go to its
    sink once, at the drain's end, in order, with the number of steps on the client's output
    clock; a stream's finish comes after the steps gathered before it; a stream aborted
    meanwhile gets nothing more."""
    import vllm_pyfrontend.engine.outputs as outputs_mod

    monkeypatch.setattr(outputs_mod, "_DRAIN_SECONDS", 60.0)  # the whole backlog in one drain
    client, (eng,), _ = await _started(addresses, zctx)
    clock = client.clock

    class Clocked(Sink):
        def __init__(self, on_gathered=None):
            super().__init__()
            self.seen: list[tuple[int, int, bool]] = []
            self.on_gathered = on_gathered

        def on_output(self, o) -> None:
            super().on_output(o)
            self.seen.append((len(o.new_token_ids), clock.steps, clock.last >= clock.now > 0))
            if clock.steps > 1 and self.on_gathered:
                self.on_gathered()

    try:
        sinks = {"r0": Clocked(lambda: client.abort(["r2"])), "r1": Clocked(), "r2": Clocked()}
        for rid, sink in sinks.items():
            client.add_request(_req(rid, max_tokens=100), sink)
        for _ in range(3):
            await eng.recv()
        for step in range(10):
            eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput(rid, [step]) for rid in sinks]))
        eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput("r0", [10]),
                                            EngineCoreOutput("r1", [10], finish_reason=1)]))
        eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput("r0", [11])]))
        time.sleep(0.3)  # every message queued in the client's socket before its loop reads one
        await until(lambda: sinks["r1"].outputs and sinks["r1"].outputs[-1].finished
                    and len(sinks["r0"].tokens) == 12)
        r0, r1, r2 = sinks.values()
        assert r0.tokens == list(range(12)) and r0.seen == [(1, 1, True), (11, 11, True)]
        # r1: the first step as read, the next nine at once, then its finish (in order)
        assert r1.tokens == list(range(11)) and r1.seen == [(1, 1, True), (9, 9, True), (1, 1, True)]
        assert r2.tokens == [0] and r2.seen == [(1, 1, True)]  # aborted by r0's delivery
        assert await eng.recv() == (b"\x01", ["r2"])
        assert clock.now == clock.last == 0.0 and clock.steps == 1
        assert client.num_in_flight == 1  # r0 runs on
    finally:
        await client.close()
        eng.close()


@on_uvloop
async def test_requests_of_one_loop_iteration_go_out_together(addresses, zctx):
    """add_request queues: the requests made in one loop iteration are sent together when it
    ends (a send that wakes ZMQ's I/O thread is the expensive one), in order. One aborted
    before then never reaches the engine, and no abort goes out for it."""
    client, (eng,), _ = await _started(addresses, zctx)
    try:
        sinks = {f"q{i}": Sink() for i in range(5)}
        for rid, sink in sinks.items():
            client.add_request(_req(rid), sink)
        assert client.num_in_flight == 5
        time.sleep(0.2)  # (the loop does not run: a send made now would reach the engine)
        assert not eng.dealer.poll(0)
        client.abort(["q2"])
        got = [req.request_id for _, req in await _drain_until(eng, 4)]
        assert got == ["q0", "q1", "q3", "q4"]
        assert await eng.nothing_received(0.1)
        assert client.num_in_flight == 4
    finally:
        await client.close()
        eng.close()


@on_uvloop
async def test_a_backlog_is_taken_off_the_socket_before_it_is_handled(addresses, zctx, monkeypatch):
    """Every message waiting on the output socket is taken off it (copied into its own bytes)
    when a drain begins, even when the drain's time slice handles only one: a backlog left on
    the socket keeps ZMQ's shared receive buffers alive. The messages are still delivered one
    per slice, in order."""
    import vllm_pyfrontend.engine.outputs as outputs_mod

    monkeypatch.setattr(outputs_mod, "_DRAIN_SECONDS", 0.0)  # every slice: one message
    client, (eng,), _ = await _started(addresses, zctx)

    class Watching(Sink):
        def __init__(self):
            super().__init__()
            self.socket_had_more: list[bool] = []

        def on_output(self, o) -> None:
            super().on_output(o)
            self.socket_had_more.append(bool(client._connection.output.getsockopt(zmq.EVENTS) & zmq.POLLIN))

    try:
        sink = Watching()
        client.add_request(_req("r0", max_tokens=100), sink)
        await eng.recv()
        for step in range(20):
            eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput("r0", [step])]))
        time.sleep(0.3)  # all queued in the client's socket before its loop reads one
        await until(lambda: len(sink.tokens) == 20)
        assert sink.tokens == list(range(20))
        assert len(sink.outputs) == 20  # one message per slice: nothing gathered
        assert sink.socket_had_more == [False] * 20  # all taken off before the first was handled
    finally:
        await client.close()
        eng.close()


@on_uvloop
async def test_abort_goes_out_while_a_drain_is_held_open(addresses, zctx, monkeypatch):
    """A drain cut by its time slice stays open across loop iterations (writes held): an abort
    made meanwhile (a client left) still goes to the engine at once, between slices, and the
    drain ends once the backlog is handled."""
    import vllm_pyfrontend.engine.outputs as outputs_mod

    monkeypatch.setattr(outputs_mod, "_DRAIN_SECONDS", 0.0)  # every slice: one message
    monkeypatch.setattr(outputs_mod, "_DRAIN_HOLD_SECONDS", 3600.0)  # held until drained
    client, (eng,), _ = await _started(addresses, zctx)
    hooks: list[str] = []
    client.drain_hooks = (lambda: hooks.append("begin"), lambda: hooks.append("end"))
    sent: list[tuple[bytes, bool]] = []
    send = client._connection.send

    def spy(engine, kind, payload, aux=None):
        sent.append((kind, client._outputs._drain_opened is not None))
        return send(engine, kind, payload, aux)

    client._connection.send = spy
    try:
        leaver = Sink()

        class AbortsTheOther(Sink):
            def on_output(self, o) -> None:
                super().on_output(o)
                if len(self.outputs) == 1:
                    client.abort(["r2"])  # the other stream's client left

        first = AbortsTheOther()
        client.add_request(_req("r1", max_tokens=100), first)
        client.add_request(_req("r2", max_tokens=100), leaver)
        await eng.recv(), await eng.recv()
        sent.clear()
        for _ in range(5):
            eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput("r1", [1]), EngineCoreOutput("r2", [1])]))
        # All five queued before the loop reads one: a drain that found only the first (the
        # others still in flight) would end after it, with nothing left to hold it open.
        time.sleep(0.3)
        assert await eng.recv() == (b"\x01", ["r2"])
        await until(lambda: len(first.outputs) == 5 and hooks and hooks[-1] == "end")
        assert sent == [(b"\x01", True)]  # sent between slices of the open drain
        assert hooks[:2] == ["begin", "end"] and hooks.count("begin") == hooks.count("end")
        assert leaver.outputs == [] and client.num_in_flight == 1  # (r2 came after r1 in its batch)
    finally:
        await client.close()
        eng.close()


@on_uvloop
async def test_start_times_out_without_engine(addresses):
    client = EngineClient(client_index=0, input_address=addresses[0],
                          output_address=addresses[1], engine_indices=[0, 1])
    with pytest.raises(TimeoutError, match=r"engine\(s\) \[0, 1\]"):
        await client.start(timeout=0.2)
    with pytest.raises(EngineDeadError):
        client.add_request(_req("x"), Sink())
