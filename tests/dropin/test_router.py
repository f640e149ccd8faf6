"""The drop-in router: batch splitting by request id, and the router between real sockets.

Batches are made by vLLM's own MsgpackEncoder from vLLM's EngineCoreOutputs, and every message
the splitter produces is decoded again by vLLM's MsgpackDecoder, so a worker receives exactly
what an engine would have sent it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import msgspec
import numpy as np
import zmq
from vllm.utils.network_utils import make_zmq_listener
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

from vllm_pyfrontend.engine.client import EngineClient
from tests.fake_engine import engine_sockets
from vllm_pyfrontend.engine.types import EngineRequest
from vllm_pyfrontend.engine.wire import encode_utility
from vllm_pyfrontend.llm.request_ids import make_request_id
from vllm_pyfrontend.router.demux import ENGINE_CORE_DEAD, BatchSplitter, array_header
from vllm_pyfrontend.router.router import Router, adopt_listener

ENCODER = MsgpackEncoder()
DECODER = MsgpackDecoder(EngineCoreOutputs)


def rid(worker: int) -> str:
    return make_request_id("chatcmpl", worker)


def decode(frames) -> EngineCoreOutputs:
    return DECODER.decode([bytes(f.buffer) if hasattr(f, "buffer") else f for f in frames])


def by_worker(messages) -> dict[int, EngineCoreOutputs]:
    out = {w: decode(frames) for w, frames in messages}
    assert len(out) == len(messages), "one message per worker"
    return out


def big_logprobs(token: int) -> LogprobsLists:
    # Large enough (> VLLM_MSGPACK_ZERO_COPY_THRESHOLD) to travel as aux frames.
    k = 64
    return LogprobsLists(np.full((2, k), token, dtype=np.int32), np.full((2, k), -1.5, np.float32),
                         np.array([1, 2], dtype=np.int32), None)


def test_array_header_matches_msgpack():
    for n in (0, 1, 15, 16, 65535, 65536):
        assert array_header(n) == msgspec.msgpack.encode([None] * n)[: len(array_header(n))]


def test_outputs_split_by_owner_with_stats_once_and_aux_frames_kept():
    a0, a1, b0 = rid(0), rid(0), rid(1)
    frames = ENCODER.encode(EngineCoreOutputs(
        engine_index=3,
        outputs=[
            EngineCoreOutput(a0, [5], new_logprobs=big_logprobs(5)),
            EngineCoreOutput(b0, [6, 7], finish_reason=FinishReason.STOP, stop_reason=7),
            EngineCoreOutput(a1, [8], new_logprobs=big_logprobs(8)),
        ],
        scheduler_stats=SchedulerStats(num_running_reqs=2, num_waiting_reqs=1),
        timestamp=12.5,
        finished_requests={b0},
    ))  # fmt: skip
    assert len(frames) > 1, "the logprobs should travel as aux frames"
    split = by_worker(BatchSplitter(2).split(frames))
    assert set(split) == {0, 1}
    w0, w1 = split[0], split[1]
    assert [o.request_id for o in w0.outputs] == [a0, a1]
    assert [o.request_id for o in w1.outputs] == [b0]
    assert w1.outputs[0].new_token_ids == [6, 7] and w1.outputs[0].finish_reason == FinishReason.STOP
    assert w1.outputs[0].stop_reason == 7
    lp = w0.outputs[1].new_logprobs
    assert np.asarray(lp.logprob_token_ids).tolist() == big_logprobs(8).logprob_token_ids.tolist()
    assert np.allclose(np.asarray(lp.logprobs), big_logprobs(8).logprobs)
    for part in (w0, w1):
        assert part.engine_index == 3 and part.timestamp == 12.5
    stats = [p.scheduler_stats for p in (w0, w1) if p.scheduler_stats is not None]
    assert len(stats) == 1 and stats[0].num_running_reqs == 2
    assert w1.finished_requests == {b0} and not w0.finished_requests


def test_one_owner_forwards_the_frames_untouched():
    frames = ENCODER.encode(EngineCoreOutputs(
        outputs=[EngineCoreOutput(rid(1), [1]), EngineCoreOutput(rid(1), [2])],
        scheduler_stats=SchedulerStats(num_running_reqs=2),
    ))  # fmt: skip
    [(worker, out)] = BatchSplitter(4).split(frames)
    assert worker == 1 and all(x is y for x, y in zip(out, frames)) and len(out) == len(frames)


def test_utility_answer_goes_to_the_caller_only():
    splitter = BatchSplitter(3)
    splitter.note_utility_call(2, encode_utility(0, 77, "is_sleeping", ()))
    frames = ENCODER.encode(EngineCoreOutputs(
        outputs=[EngineCoreOutput(rid(0), [4])],
        utility_output=UtilityOutput(77, None, UtilityResult(False)),
    ))  # fmt: skip
    split = by_worker(splitter.split(frames))
    assert set(split) == {0, 2}
    assert split[2].utility_output.call_id == 77 and split[2].outputs == []
    assert split[0].utility_output is None and split[0].outputs[0].new_token_ids == [4]
    assert splitter.pending_utility_calls == 0


def test_engine_dead_reaches_every_worker():
    messages = BatchSplitter(3).split([ENGINE_CORE_DEAD])
    assert [(w, f) for w, f in messages] == [(0, [ENGINE_CORE_DEAD]), (1, [ENGINE_CORE_DEAD]),
                                             (2, [ENGINE_CORE_DEAD])]


def test_stats_only_batches_rotate_over_workers():
    splitter = BatchSplitter(2)
    frames = ENCODER.encode(EngineCoreOutputs(scheduler_stats=SchedulerStats(num_running_reqs=0)))
    seen = [splitter.split(frames)[0][0] for _ in range(4)]
    assert seen == [0, 1, 0, 1]


def test_outputs_of_unknown_requests_are_dropped():
    splitter = BatchSplitter(2)
    frames = ENCODER.encode(EngineCoreOutputs(
        outputs=[EngineCoreOutput("not-ours", [1]), EngineCoreOutput(rid(5), [1]),
                 EngineCoreOutput(rid(1), [2])]))  # fmt: skip
    split = by_worker(splitter.split(frames))
    assert list(split) == [1] and [o.new_token_ids for o in split[1].outputs] == [[2]]
    assert splitter.dropped_outputs == 2


# ------------------------------------------------------------------ the router between sockets


def ready_payload(index: int) -> bytes:
    return msgspec.msgpack.encode(EngineCoreReadyResponse(
        max_model_len=256, num_gpu_blocks=10, block_size=16, dp_stats_address=None,
        dtype="float32", vllm_version="0.32.0", world_size=1, data_parallel_size=1,
        tensor_parallel_size=1, pipeline_parallel_size=1, decode_context_parallel_size=1,
        data_parallel_rank=index, max_num_seqs=64, max_num_batched_tokens=2048,
        instance_id="test", supports_lora=False, max_loras=0))  # fmt: skip


class Sink:
    def __init__(self):
        self.outputs = []
        self.dead: str | None = None

    def on_output(self, out) -> None:
        self.outputs.append(out)

    def on_failure(self, failure) -> None:
        self.failure = failure
        self.dead = failure.message


async def until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def request(worker: int) -> EngineRequest:
    return EngineRequest(request_id=rid(worker), prompt_token_ids=[1, 2, 3],
                         sampling_params={"max_tokens": 4}, arrival_time=time.time())


class FakeEngine:
    """An engine's two sockets, connected to the listeners vLLM bound (DEALER in, PUSH out)."""

    def __init__(self, ctx: zmq.Context, index: int, input_address: str, output_address: str):
        self.dealer, self.push = engine_sockets(ctx, index, input_address, output_address)
        self.dealer.send(ready_payload(index))  # the engine's ready response, as on connect

    async def recv(self, timeout: float = 10.0) -> list[bytes]:
        deadline = time.monotonic() + timeout
        while not self.dealer.poll(0):
            assert time.monotonic() < deadline, "the engine received nothing"
            await asyncio.sleep(0.005)
        return self.dealer.recv_multipart()

    def send(self, eco: EngineCoreOutputs) -> None:
        self.push.send_multipart(ENCODER.encode(eco))


@contextlib.asynccontextmanager
async def routed(tmp_path, scheme: str, engines: list[int], num_workers: int):
    """vLLM-bound listeners, fake engines, a Router (in a thread) and one EngineClient per worker."""
    # vLLM binds the engine listeners itself and hands over the fds (as `vllm serve` does).
    if scheme == "ipc":
        in_listener = make_zmq_listener(f"ipc://{tmp_path}/in.sock", zmq.ROUTER)
        out_listener = make_zmq_listener(f"ipc://{tmp_path}/out.sock", zmq.PULL)
    else:
        in_listener = make_zmq_listener("tcp://127.0.0.1:0", zmq.ROUTER)
        out_listener = make_zmq_listener("tcp://127.0.0.1:0", zmq.PULL)
    ctx = zmq.Context()
    fakes = [FakeEngine(ctx, e, in_listener.address, out_listener.address) for e in engines]
    workers = [(f"ipc://{tmp_path}/w{i}-in.sock", f"ipc://{tmp_path}/w{i}-out.sock")
               for i in range(num_workers)]
    fds = (in_listener.socket.detach(), out_listener.socket.detach())
    holder: dict[str, Router] = {}
    errors: list[BaseException] = []

    def router_thread() -> None:
        rctx = zmq.Context()
        try:
            router = Router(rctx, adopt_listener(rctx, fds[0], zmq.ROUTER),
                            adopt_listener(rctx, fds[1], zmq.PULL), engines,
                            [w[0] for w in workers], [w[1] for w in workers])
            holder["router"] = router
            router.wait_engines_ready(10)
            router.connect_workers()
            router.run()
            router.close()
        except BaseException as e:  # reported by the test body
            errors.append(e)
        finally:
            rctx.destroy(linger=0)

    thread = threading.Thread(target=router_thread, daemon=True)
    thread.start()
    clients = [EngineClient(client_index=0, input_address=a, output_address=b, engine_indices=engines)
               for a, b in workers]
    try:
        # Each worker's EngineClient gets the engines' ready responses, replayed by the router.
        infos = await asyncio.gather(*(c.start(timeout=10) for c in clients))
        assert [[i.engine_index for i in per] for per in infos] == [engines] * num_workers
        yield fakes, clients
        assert not errors, errors
    finally:
        if "router" in holder:
            holder["router"].stop()
        thread.join(5)
        for c in clients:
            await c.close()
        ctx.destroy(linger=0)
        for listener in (in_listener, out_listener):
            listener.cleanup()
    assert not thread.is_alive()
    assert not errors, errors


async def test_router_serves_two_workers_from_one_client_slot(tmp_path):
    async with routed(tmp_path, "ipc", [0], 2) as ([engine], clients):
        sinks = [Sink(), Sink()]
        reqs = [request(0), request(1)]
        for c, r, s in zip(clients, reqs, sinks):
            c.add_request(r, s)
        decoder = MsgpackDecoder(EngineCoreRequest)
        got = []
        for _ in reqs:
            kind, *data = await engine.recv()
            assert kind == b"\x00"
            got.append(decoder.decode(data))
        assert sorted(r.request_id for r in got) == sorted(r.request_id for r in reqs)
        assert all(r.client_index == 0 for r in got)

        # One batch with both workers' outputs: each gets its own.
        engine.send(EngineCoreOutputs(outputs=[
            EngineCoreOutput(reqs[0].request_id, [9], finish_reason=FinishReason.LENGTH),
            EngineCoreOutput(reqs[1].request_id, [10, 11], finish_reason=FinishReason.STOP),
        ]))  # fmt: skip
        await until(lambda: sinks[0].outputs and sinks[1].outputs)
        assert [o.new_token_ids for o in sinks[0].outputs] == [[9]]
        assert [o.new_token_ids for o in sinks[1].outputs] == [[10, 11]]

        # A utility call from worker 1 is answered to worker 1.
        async def answer() -> None:
            kind, payload = await engine.recv()
            assert kind == b"\x03"
            client_index, call_id, method, _args = msgspec.msgpack.decode(payload)
            assert client_index == 0 and method == "is_sleeping"
            engine.send(EngineCoreOutputs(
                utility_output=UtilityOutput(call_id, None, UtilityResult(True))))

        result, _ = await asyncio.gather(clients[1].call_utility("is_sleeping", timeout=10), answer())
        assert result is True

        # The engine's death reaches both workers.
        engine.push.send(ENGINE_CORE_DEAD)
        await until(lambda: not clients[0].healthy and not clients[1].healthy)


async def test_router_over_tcp_listeners_with_two_engines(tmp_path):
    async with routed(tmp_path, "tcp", [0, 1], 2) as (engines, clients):
        sink = Sink()
        req = request(1)
        req.data_parallel_rank = 1
        clients[1].add_request(req, sink)
        kind, *data = await engines[1].recv()
        assert kind == b"\x00"
        assert MsgpackDecoder(EngineCoreRequest).decode(data).request_id == req.request_id
        clients[1].abort([req.request_id])
        kind, payload = await engines[1].recv()
        assert kind == b"\x01" and msgspec.msgpack.decode(payload) == [req.request_id]
        # Engine 0's stats reach one worker, which keeps them per engine.
        engines[0].send(EngineCoreOutputs(engine_index=0,
                                          scheduler_stats=SchedulerStats(num_running_reqs=3)))
        await until(lambda: any(0 in c.scheduler_stats for c in clients))
        assert sum(0 in c.scheduler_stats for c in clients) == 1


def test_engine_infos_recorded_where_restarted_workers_look(tmp_path):
    from vllm_pyfrontend.engine.types import EngineInfo
    from vllm_pyfrontend.engine.wire import decode_ready
    from vllm_pyfrontend.router.router import write_engine_infos
    from vllm_pyfrontend.supervisor.runtime import RuntimeDir

    runtime = RuntimeDir(base=str(tmp_path))
    write_engine_infos(runtime.engine_info_path, [decode_ready(ready_payload(1), engine_index=1)])
    [info] = [EngineInfo.from_json(d) for d in runtime.read_engine_infos()]
    assert (info.engine_index, info.max_model_len, info.vllm_version) == (1, 256, "0.32.0")
    runtime.cleanup()
