"""`--grpc-port` on the simulated engine: vLLM's VllmEngine gRPC service beside HTTP in both
workers, on one port. Generate (stream and not, n, stop strings, logprobs, cancel, Abort),
info, health and reflection; bad input is INVALID_ARGUMENT, never reaches the engine, and the
workers keep serving. The deployment is a disaggregated one (a prefill and a decode engine,
`--prefill-engines 1`): a gateway in front of it sees one ordinary worker."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from smg_grpc_proto import vllm_engine_pb2 as pb
from smg_grpc_proto import vllm_engine_pb2_grpc as pb_grpc

from tests.stack import Stack, free_port

MODEL = "demo:deepseek-v4"
VOCAB = 129280


@pytest.fixture(scope="module")
def stack():
    port = free_port()
    s = Stack(["--engine", "sim", "--workers", "2", "--sim-step-time", "0.01", "--max-model-len", "4096",
               "--served-model-name", "dsv4", "--shutdown-timeout", "5", "--grpc-port", str(port),
               "--data-parallel-size", "2", "--prefill-engines", "1",
               "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}', MODEL],
              ready_timeout=120)
    s.grpc_target = f"127.0.0.1:{port}"
    yield s
    code = s.terminate()
    assert code == 0, s.logs()


def run(coro):
    return asyncio.run(coro)


def _req(ids=(5, 6, 7, 8), stream=False, rid="r", **sp) -> pb.GenerateRequest:
    sp.setdefault("max_tokens", 4)
    return pb.GenerateRequest(request_id=rid, tokenized=pb.TokenizedInput(input_ids=list(ids)),
                              sampling_params=pb.SamplingParams(**sp), stream=stream)


async def _generate(target: str, request, *, raw: bytes | None = None):
    async with grpc.aio.insecure_channel(target) as ch:
        if raw is not None:
            call = ch.unary_stream("/vllm.grpc.engine.VllmEngine/Generate", request_serializer=lambda b: b,
                                   response_deserializer=pb.GenerateResponse.FromString)(raw)
        else:
            call = pb_grpc.VllmEngineStub(ch).Generate(request)
        return [r async for r in call]


def _metric(base: str, name: str) -> float:
    text = httpx.get(base + "/metrics", timeout=10).text
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def test_generate_non_streaming_and_streaming(stack):
    out = run(_generate(stack.grpc_target, _req(temperature=0)))
    assert len(out) == 1 and out[0].WhichOneof("response") == "complete"
    c = out[0].complete
    assert len(c.output_ids) == 4 and c.completion_tokens == 4 and c.prompt_tokens == 4
    assert c.finish_reason == "length" and c.index == 0

    out = run(_generate(stack.grpc_target, _req(stream=True, temperature=0)))
    kinds = [r.WhichOneof("response") for r in out]
    assert kinds == ["chunk"] * 4 + ["complete"]
    ids = [t for r in out[:-1] for t in r.chunk.token_ids]
    assert all(r.chunk.prompt_tokens == 4 for r in out[:-1])
    # vLLM's servicer: the complete message repeats the last step's ids.
    assert list(out[-1].complete.output_ids) == ids[-1:] and out[-1].complete.finish_reason == "length"


def test_n_choices_and_text_prompt(stack):
    out = run(_generate(stack.grpc_target, _req(n=3, seed=7, temperature=0.8)))
    assert sorted(r.complete.index for r in out) == [0, 1, 2]
    assert all(len(r.complete.output_ids) == 4 for r in out)
    text = pb.GenerateRequest(request_id="t", text="Hello there", sampling_params=pb.SamplingParams(max_tokens=2))
    out = run(_generate(stack.grpc_target, text))
    assert out[0].complete.prompt_tokens > 0 and len(out[0].complete.output_ids) == 2


def test_stop_token_and_logprobs(stack):
    first = run(_generate(stack.grpc_target, _req(temperature=0, max_tokens=3)))[0].complete.output_ids
    out = run(_generate(stack.grpc_target, _req(temperature=0, max_tokens=8, stop_token_ids=[first[1]])))
    c = out[0].complete
    assert c.finish_reason == "stop" and c.matched_token_id == first[1]
    assert list(c.output_ids) == list(first[:2])
    out = run(_generate(stack.grpc_target, _req(temperature=0, max_tokens=3, logprobs=2)))
    lp = out[0].complete.output_logprobs
    assert list(lp.token_ids) == list(out[0].complete.output_ids) and len(lp.token_logprobs) == 3
    assert all(len(t.token_ids) == 2 for t in lp.top_logprobs)


def test_info_health_and_reflection(stack):
    async def go():
        async with grpc.aio.insecure_channel(stack.grpc_target) as ch:
            stub = pb_grpc.VllmEngineStub(ch)
            info = await stub.GetModelInfo(pb.GetModelInfoRequest())
            server = await stub.GetServerInfo(pb.GetServerInfoRequest())
            health = await stub.HealthCheck(pb.HealthCheckRequest())
            loads = await stub.GetLoads(pb.GetLoadsRequest())
            std = health_pb2_grpc.HealthStub(ch)
            overall = await std.Check(health_pb2.HealthCheckRequest())
            engine = await std.Check(health_pb2.HealthCheckRequest(service="vllm.grpc.engine.VllmEngine"))
            refl = reflection_pb2_grpc.ServerReflectionStub(ch)
            names = None
            async for r in refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])):
                names = {s.name for s in r.list_services_response.service}
            return info, server, health, loads, overall, engine, names

    info, server, health, loads, overall, engine, names = run(go())
    assert info.served_model_name == "dsv4" and info.max_context_length == 4096 and info.vocab_size == VOCAB
    assert info.is_generation and list(info.eos_token_ids) == [1]
    assert server.server_type == "vllm-grpc" and server.data_parallel_size == 2  # (a prefill and a decode engine)
    assert health.healthy
    assert loads.dp_rank_count == 2 and [x.dp_rank for x in loads.loads] == [0, 1]
    assert overall.status == engine.status == health_pb2.HealthCheckResponse.SERVING
    assert {"vllm.grpc.engine.VllmEngine", "grpc.health.v1.Health"} <= names


def test_tokenizer_bundle(stack):
    import hashlib
    import io
    import zipfile

    from smg_grpc_proto.generated import common_pb2

    async def go():
        async with grpc.aio.insecure_channel(stack.grpc_target) as ch:
            return [c async for c in pb_grpc.VllmEngineStub(ch).GetTokenizer(common_pb2.GetTokenizerRequest())]

    chunks = run(go())
    data = b"".join(c.data for c in chunks)
    assert chunks[-1].sha256 == hashlib.sha256(data).hexdigest()
    assert {"tokenizer.json", "config.json"} <= set(zipfile.ZipFile(io.BytesIO(data)).namelist())


def _bad_requests():
    ok = _req().SerializeToString()
    return {
        "unknown field": (None, ok + b"\xf8\x07\x05"),  # field 127, varint
        "unknown nested field": (None, pb.GenerateRequest(
            request_id="u", tokenized=pb.TokenizedInput(input_ids=[1, 2]),
        ).SerializeToString() + b"\x22\x03\xa0\x06\x01"),  # sampling_params with field 100
        "id out of vocabulary": (_req(ids=[5, VOCAB]), None),
        "empty prompt": (_req(ids=[]), None),
        "temperature": (_req(temperature=-0.5), None),
        "top_p": (_req(top_p=1.5), None),
        "min_p": (_req(min_p=2.0), None),
        "repetition_penalty": (_req(repetition_penalty=-1.0), None),
        "max_tokens": (_req(max_tokens=0), None),
        "logprobs": (_req(logprobs=10**6), None),
        "n with greedy": (_req(n=2, temperature=0), None),
        "stop token out of vocabulary": (_req(stop_token_ids=[VOCAB + 5]), None),
        "logit_bias id": (pb.GenerateRequest(request_id="b", tokenized=pb.TokenizedInput(input_ids=[1]),
                                             sampling_params=pb.SamplingParams(max_tokens=2,
                                                                               logit_bias={VOCAB + 1: 1.0})), None),
        "no input": (pb.GenerateRequest(request_id="x", sampling_params=pb.SamplingParams(max_tokens=2)), None),
    }


@pytest.mark.parametrize("case", list(_bad_requests()))
def test_bad_input_is_invalid_argument_and_never_reaches_the_engine(stack, case):
    request, raw = _bad_requests()[case]
    before = _metric(stack.base_url, "vllm:request_success_total")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        run(_generate(stack.grpc_target, request, raw=raw))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (case, e.value.details())
    assert e.value.details()
    # Nothing was sent: the engine's idle and no request finished; both workers still serve.
    assert _metric(stack.base_url, "vllm:request_success_total") == before
    for _ in range(2):
        assert run(_generate(stack.grpc_target, _req()))[0].complete.finish_reason == "length"


def test_cancel_aborts_in_the_engine_and_abort_rpc(stack):
    async def cancel_mid_stream():
        async with grpc.aio.insecure_channel(stack.grpc_target) as ch:
            call = pb_grpc.VllmEngineStub(ch).Generate(_req(stream=True, max_tokens=2000, rid="long"))
            got = 0
            async for _ in call:
                got += 1
                if got == 3:
                    call.cancel()
                    break
            return got

    async def abort_rpc():
        async with grpc.aio.insecure_channel(stack.grpc_target) as ch:
            stub = pb_grpc.VllmEngineStub(ch)
            call = stub.Generate(_req(stream=True, max_tokens=2000, rid="to-abort"))
            out = []
            async for r in call:
                out.append(r)
                if len(out) == 2:
                    # On the same channel (one connection: the worker that holds the call).
                    await stub.Abort(pb.AbortRequest(request_ids=["to-abort"]))
            return out

    assert run(cancel_mid_stream()) == 3
    out = run(abort_rpc())
    assert out[-1].WhichOneof("response") == "complete" and out[-1].complete.finish_reason == "abort"
    # Both long requests are gone from the engine.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        stats = stack.freshest_engine_stats()
        if stats is not None and stats.get("num_running_reqs", 0) == 0 and stats.get("num_waiting_reqs", 0) == 0:
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"engine not idle: {stack.freshest_engine_stats()}")


def test_http_still_served_beside_grpc(stack):
    r = httpx.post(stack.base_url + "/v1/completions", json={"model": "dsv4", "prompt": "hi", "max_tokens": 2},
                   timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"


def test_grpc_requests_ran_in_two_phases(stack):
    """What the gRPC calls above sent went through the prefill engine, then the decode engine."""
    run(_generate(stack.grpc_target, _req(rid="phases")))
    assert _metric(stack.base_url, 'vllm:disagg_requests_total{model_name="dsv4",path="two_phase"}') >= 1


def test_requests_the_engine_aborts_are_unavailable_not_an_empty_complete():
    """The supervisor SIGKILLed mid-run: its engine sees it go and aborts what is in flight
    (vLLM's engine does so on SIGTERM). Those calls end UNAVAILABLE, which a gateway retries on
    another deployment; never a `complete` with finish_reason abort, which smg passes on to its
    client as a 200 with no tokens."""
    port = free_port()
    s = Stack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.01", "--max-model-len", "4096",
               "--served-model-name", "dsv4", "--shutdown-timeout", "5", "--grpc-port", str(port), MODEL],
              ready_timeout=120)
    target = f"127.0.0.1:{port}"

    async def main():
        async with grpc.aio.insecure_channel(target) as ch:
            stub = pb_grpc.VllmEngineStub(ch)
            streaming = stub.Generate(_req(stream=True, max_tokens=2000, rid="s"))
            plain = [stub.Generate(_req(max_tokens=2000, rid=f"p{i}")) for i in range(6)]
            first = await streaming.read()  # every call is in the engine (the chunk came a step later)
            assert first.WhichOneof("response") == "chunk"
            os.kill(s.proc.pid, signal.SIGKILL)
            ends = []
            for call in [streaming, *plain]:
                try:
                    out = []
                    while (r := await call.read()) is not grpc.aio.EOF:
                        out.append(r)
                    ends.append(("ok", [(r.WhichOneof("response"), r.complete.finish_reason) for r in out]))
                except grpc.aio.AioRpcError as e:
                    ends.append((e.code(), e.details()))
            return ends

    try:
        ends = run(main())
    finally:
        s.stop()
    assert all(end[0] == grpc.StatusCode.UNAVAILABLE for end in ends), ends
