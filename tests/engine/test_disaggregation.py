"""Prefill/decode disaggregation in the engine client (frontend/engine/disaggregation.py), against
fake engines that decode what the client sends with vLLM's own msgspec classes: engine 0
prefills, engine 1 decodes."""

from __future__ import annotations

import asyncio
import contextlib
import time

from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason

from tests.engine.test_client import FakeEngine, Sink, on_uvloop, until
from vllm_pyfrontend.engine.client import EngineClient
from vllm_pyfrontend.engine.disaggregation import Roles, is_prefill_phase, prefill_request
from vllm_pyfrontend.engine.migration import continuation
from vllm_pyfrontend.engine.types import EngineRequest, FailureKind

PARAMS = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "e0",
          "remote_block_ids": [3, 4], "remote_host": "10.0.0.1", "remote_port": 5600, "tp_size": 1}


class Observer:
    def __init__(self):
        self.paths: list[str] = []
        self.prefill: list[tuple[int, float]] = []
        self.first: list[tuple[int, float]] = []

    def record_scheduler_stats(self, *a, **k): ...
    def observe_iteration(self, *a): ...
    def count_migration(self, *a): ...
    def count_migration_failure(self, *a): ...

    def observe_disaggregation(self, path):
        self.paths.append(path)

    def observe_prefill_phase(self, engine, seconds):
        self.prefill.append((engine, seconds))

    def observe_decode_first_token(self, engine, seconds):
        self.first.append((engine, seconds))


class GenSink(Sink):
    """A sink that hears where it was sent and moved, as the client's Generation does."""

    def __init__(self):
        super().__init__()
        self.engines: list[int] = []
        self.moves: list | None = None
        self.output_ids: list[int] = []
        self.prompt_logprobs = None
        self.request_id: str | None = None

    def on_sent(self, engine):
        self.engines.append(engine)

    def on_moved(self, request_id, engine, reason):
        self.request_id = request_id
        self.moves = (self.moves or []) + [(engine, reason)]

    def on_tokens(self, ids):
        self.output_ids += ids
        self.on_output(type("O", (), {"new_token_ids": ids, "finish_reason": None})())


def _req(rid: str, prompt_len: int = 40, max_tokens: int = 8, **sp) -> EngineRequest:
    return EngineRequest(request_id=rid, prompt_token_ids=list(range(1, prompt_len + 1)),
                         sampling_params={"max_tokens": max_tokens, "temperature": 0.0, "logprobs": 2,
                                          "extra_args": {"user": "x"}, **sp},
                         arrival_time=time.time())


async def _started(addresses, zctx, min_prompt_tokens=0, migration_limit=0, engine_timeout=None):
    observer = Observer()
    client = EngineClient(client_index=0, input_address=addresses[0], output_address=addresses[1],
                          engine_indices=[0, 1], vocab_size=1000, prefill_engines=1,
                          prefill_min_prompt_tokens=min_prompt_tokens, migration_limit=migration_limit,
                          engine_timeout=engine_timeout, observer=observer)
    start = asyncio.create_task(client.start(timeout=5))
    await asyncio.sleep(0.02)
    engines = [FakeEngine(zctx, i, *addresses) for i in (0, 1)]
    for e in engines:
        e.send_ready()
    await start
    return client, engines, observer


@contextlib.asynccontextmanager
async def _deployment(addresses, zctx, heartbeat: bool = False, **kw):
    """A client of a prefill engine (0) and a decode engine (1), closed on exit; `heartbeat`: the
    decode engine keeps talking while the test lets the prefill engine fall silent."""
    client, engines, observer = await _started(addresses, zctx, **kw)
    beat = asyncio.create_task(_heartbeat(engines[1])) if heartbeat else None
    try:
        yield client, engines, observer
    finally:
        if beat is not None:
            beat.cancel()
        await client.close()
        for e in engines:
            e.close()


async def _heartbeat(engine: FakeEngine) -> None:
    """The decode engine keeps talking (an empty batch counts) while the prefill engine is silent."""
    while True:
        engine.send(EngineCoreOutputs())
        await asyncio.sleep(0.05)


def _final(rid: str, tokens: list[int], reason=FinishReason.LENGTH, kv=None) -> EngineCoreOutputs:
    return EngineCoreOutputs(outputs=[EngineCoreOutput(request_id=rid, new_token_ids=tokens, finish_reason=reason,
                                                       kv_transfer_params=kv)])


def _step(rid: str, tokens: list[int]) -> EngineCoreOutputs:
    return EngineCoreOutputs(outputs=[EngineCoreOutput(request_id=rid, new_token_ids=tokens)])


def test_roles_and_phases():
    roles = Roles.first_prefill([0, 1, 2, 3], 1)
    assert (roles.prefill, roles.decode) == ([0], [1, 2, 3])
    assert roles.role(0) == "prefill" and roles.role(3) == "decode"
    for bad in (0, 4):
        try:
            Roles.first_prefill([0, 1, 2, 3], bad)
        except ValueError as e:
            assert "--prefill-engines" in str(e)
        else:
            raise AssertionError(bad)
    req = _req("a", min_tokens=3, prompt_logprobs=None, structured_outputs={"json": {}})
    pre = prefill_request(req)
    assert is_prefill_phase(pre) and not is_prefill_phase(req)
    sp = pre.sampling_params
    assert sp["max_tokens"] == 1 and sp["min_tokens"] == 0 and sp["logprobs"] is None
    assert sp["structured_outputs"] is None and sp["extra_args"]["user"] == "x"
    assert sp["extra_args"]["kv_transfer_params"]["do_remote_decode"] is True
    assert req.sampling_params["max_tokens"] == 8 and "kv_transfer_params" not in req.sampling_params["extra_args"]


def test_a_moved_decode_phase_computes_its_prompt_again():
    req = _req("a", extra_args={"kv_transfer_params": PARAMS})

    class S:
        output_ids = [7, 8]
        prompt_logprobs = None

    cont = continuation(req, S(), "a-m1")
    assert cont.prompt_token_ids[-2:] == [7, 8]
    assert "kv_transfer_params" not in (cont.sampling_params["extra_args"] or {})
    # A prefill phase keeps asking for remote decode.
    S.output_ids = []
    assert is_prefill_phase(continuation(prefill_request(_req("b")), S(), "b-m1"))


@on_uvloop
async def test_two_phases_reach_the_client_as_one_request(addresses, zctx):
    async with _deployment(addresses, zctx) as (client, (e0, e1), observer):
        sink = GenSink()
        assert client.add_request(_req("r1"), sink) == 0  # the prefill engine
        kind, pre = await e0.recv()
        assert kind == b"\x00" and pre.request_id == "r1" and pre.sampling_params.max_tokens == 1
        assert pre.sampling_params.extra_args["kv_transfer_params"]["do_remote_decode"] is True
        assert pre.sampling_params.logprobs is None
        assert await e1.nothing_received(0.05)
        # The prefill engine's token is not the client's; its parameters go to the decode engine.
        e0.send(_final("r1", [99], kv=PARAMS))
        kind, dec = await e1.recv()
        assert dec.request_id == "r1" and dec.sampling_params.max_tokens == 8 and dec.sampling_params.logprobs == 2
        assert dec.sampling_params.extra_args == {"user": "x", "kv_transfer_params": PARAMS}
        assert dec.prompt_token_ids == list(range(1, 41))
        assert sink.outputs == [] and sink.engines == [1]
        e1.send(_step("r1", [5]))
        e1.send(_step("r1", [6]))
        e1.send(_final("r1", [7]))
        await until(lambda: sink.outputs and sink.outputs[-1].finish_reason is not None)
        assert sink.tokens == [5, 6, 7] and sink.dead is None
        assert client.in_flight_by_engine() == {0: 0, 1: 0}
        assert observer.paths == ["two_phase"]
        assert [e for e, _ in observer.prefill] == [0] and [e for e, _ in observer.first] == [1]
        # An abort in either phase reaches the engine that holds the request.
        client.add_request(_req("r2"), GenSink())
        await e0.recv()
        client.abort(["r2"])
        assert await e0.recv() == (b"\x01", ["r2"])
        s3 = GenSink()
        client.add_request(_req("r3"), s3)
        await e0.recv()
        e0.send(_final("r3", [1], kv=PARAMS))
        await e1.recv()
        client.abort(["r3"])
        assert await e1.recv() == (b"\x01", ["r3"])
        assert await e0.nothing_received(0.05)


@on_uvloop
async def test_short_prompts_and_single_tokens_go_whole_to_a_decode_engine(addresses, zctx):
    async with _deployment(addresses, zctx, min_prompt_tokens=32) as (client, (e0, e1), observer):
        assert client.add_request(_req("short", prompt_len=31), GenSink()) == 1
        assert client.add_request(_req("one", max_tokens=1), GenSink()) == 1
        assert client.add_request(_req("plp", prompt_logprobs=1), GenSink()) == 1
        for rid in ("short", "one", "plp"):
            _, req = await e1.recv()
            assert req.request_id == rid and (req.sampling_params.extra_args or {}).get("kv_transfer_params") is None
        assert await e0.nothing_received(0.05)
        assert observer.paths == ["short"] * 3
        assert client.add_request(_req("long", prompt_len=32), GenSink()) == 0


@on_uvloop
async def test_a_failed_prefill_runs_whole_on_a_decode_engine(addresses, zctx):
    async with _deployment(addresses, zctx) as (client, (e0, e1), observer):
        # The prefill engine ends it with an error, or aborts it: no KV to pass on.
        for rid, reason in (("err", FinishReason.ERROR), ("ab", FinishReason.ABORT)):
            sink = GenSink()
            client.add_request(_req(rid), sink)
            await e0.recv()
            e0.send(_final(rid, [], reason=reason))
            _, dec = await e1.recv()
            assert dec.request_id == rid and dec.sampling_params.max_tokens == 8
            assert dec.sampling_params.extra_args == {"user": "x"}
            e1.send(_final(rid, [4, 5]))
            await until(lambda: sink.tokens == [4, 5])
            assert sink.dead is None
        # A connector that passes KV by prompt returns no parameters: decode goes on without.
        sink = GenSink()
        client.add_request(_req("nokv"), sink)
        await e0.recv()
        e0.send(_final("nokv", [1], kv=None))
        _, dec = await e1.recv()
        assert dec.sampling_params.extra_args == {"user": "x"}
        assert observer.paths == ["fallback", "fallback", "two_phase"]


@on_uvloop
async def test_prefill_engine_down_the_request_ends_on_a_decode_engine(addresses, zctx):
    """The prefill engine goes silent: its prefill phases run whole on the decode engine, and new
    requests skip the prefill pool while it is down."""
    async with _deployment(addresses, zctx, engine_timeout=0.4, heartbeat=True) as (client, (e0, e1), observer):
        sink = GenSink()
        client.add_request(_req("p"), sink)
        await e0.recv()
        _, dec = await e1.recv(timeout=5)
        assert dec.request_id == "p" and dec.sampling_params.max_tokens == 8
        assert "kv_transfer_params" not in (dec.sampling_params.extra_args or {})
        assert client.engines_down == [0] and sink.dead is None
        e1.send(_final("p", [3]))
        await until(lambda: sink.tokens == [3])
        assert client.add_request(_req("q"), GenSink()) == 1
        assert observer.paths == ["fallback", "fallback"]


@on_uvloop
async def test_client_closing_fails_a_request_in_its_prefill_phase(addresses, zctx):
    async with _deployment(addresses, zctx) as (client, (e0, e1), _):
        sink = GenSink()
        client.add_request(_req("c"), sink)
        await e0.recv()
        await client.close()
        assert sink.failure.kind is FailureKind.SHUTTING_DOWN


@on_uvloop
async def test_a_moved_prefill_phase_runs_whole_when_no_prefill_engine_is_up(addresses, zctx):
    async with _deployment(addresses, zctx, engine_timeout=0.4, migration_limit=2, heartbeat=True) as (
            client, (e0, e1), observer):
        sink = GenSink()
        client.add_request(_req("m"), sink)
        await e0.recv()
        _, dec = await e1.recv(timeout=5)
        assert dec.request_id == "m-m1" and dec.sampling_params.max_tokens == 8
        assert "kv_transfer_params" not in (dec.sampling_params.extra_args or {})
        assert sink.request_id == "m-m1" and sink.engines == [1]  # the client's aborts name the new id
        e1.send(_final("m-m1", [3]))
        await until(lambda: sink.tokens == [3])
        assert observer.paths == ["fallback"]


@on_uvloop
async def test_a_failed_kv_load_runs_the_request_again_whole(addresses, zctx):
    """The decode engine ends the request with an error before its first token (its
    kv_load_failure_policy "fail"): the client never sees it; the request runs again whole."""
    async with _deployment(addresses, zctx) as (client, (e0, e1), observer):
        sink = GenSink()
        client.add_request(_req("f"), sink)
        await e0.recv()
        e0.send(_final("f", [1], kv=PARAMS))
        _, dec = await e1.recv()
        assert dec.sampling_params.extra_args["kv_transfer_params"] == PARAMS
        e1.send(_final("f", [], reason=FinishReason.ERROR))
        _, again = await e1.recv()
        assert again.request_id == "f" and again.sampling_params.extra_args == {"user": "x"}
        e1.send(_final("f", [4]))
        await until(lambda: sink.tokens == [4])
        assert sink.dead is None and [o.finish_reason for o in sink.outputs] == [FinishReason.LENGTH]
        assert observer.paths == ["two_phase", "recomputed"]


@on_uvloop
async def test_abort_everything_names_the_clients_sinks(addresses, zctx):
    """An operator's "abort everything" ends the client's sink of a request in its prefill phase,
    which then does not start its decode phase."""
    async with _deployment(addresses, zctx) as (client, (e0, e1), _):
        sink = GenSink()
        client.add_request(_req("all"), sink)
        await e0.recv()
        pairs = client.in_flight_sinks()
        assert pairs == [("all", sink)]
        client.abort([rid for rid, _ in pairs])
        assert await e0.recv() == (b"\x01", ["all"])
        assert await e1.nothing_received(0.05)
