"""Our `--grpc-port` against vLLM's own `vllm serve --grpc` (smg-grpc-servicer), each with its
own real EngineCore on the tiny model: the same Generate requests give the same token ids,
finish reasons, matched stops and counts; bad input is INVALID_ARGUMENT on both (with the one
pinned difference: a field this proto does not define is refused here, ignored by vLLM)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from smg_grpc_proto import vllm_engine_pb2 as pb
from smg_grpc_proto import vllm_engine_pb2_grpc as pb_grpc

from tests.e2e.tiny_model import ENGINE_ARGS, VOCAB_SIZE, build_tiny_model
from tests.e2e.vllm_pair import MODEL, VLLMServer

pytestmark = pytest.mark.real_engine

PROMPTS = [[0, 100, 200, 300, 400], [0, 5000, 17, 42], list(range(10, 60))]


@pytest.fixture(scope="module")
def targets(tiny_pair):
    """Ours: the session pair's frontend, which serves gRPC on `--grpc-port` beside HTTP. vLLM's:
    `vllm serve --grpc` (gRPC instead of HTTP, so not the session pair's vLLM server) with the
    session pair's engine flags, started for this module."""
    vllm = VLLMServer(build_tiny_model(), ["--served-model-name", MODEL, *ENGINE_ARGS, "--grpc"])
    try:
        vllm.wait(600)
        yield tiny_pair.grpc_target, vllm.grpc_target
    finally:
        vllm.stop()


def _req(ids, stream=False, **sp) -> pb.GenerateRequest:
    sp.setdefault("max_tokens", 8)
    sp.setdefault("temperature", 0.0)
    return pb.GenerateRequest(request_id="d", tokenized=pb.TokenizedInput(input_ids=list(ids)),
                              sampling_params=pb.SamplingParams(**sp), stream=stream)


async def _call(target: str, request=None, raw: bytes | None = None) -> list[pb.GenerateResponse]:
    async with grpc.aio.insecure_channel(target) as ch:
        if raw is not None:
            call = ch.unary_stream("/vllm.grpc.engine.VllmEngine/Generate", request_serializer=lambda b: b,
                                   response_deserializer=pb.GenerateResponse.FromString)(raw)
        else:
            call = pb_grpc.VllmEngineStub(ch).Generate(request)
        return [r async for r in call]


def both(targets, request=None, raw=None):
    async def go():
        return await asyncio.gather(*(_call(t, request, raw) for t in targets))
    return asyncio.run(go())


def _completes(responses) -> dict[int, pb.GenerateComplete]:
    return {r.complete.index: r.complete for r in responses if r.WhichOneof("response") == "complete"}


def _summary(c: pb.GenerateComplete) -> tuple:
    return (list(c.output_ids), c.finish_reason, c.prompt_tokens, c.completion_tokens, c.index,
            c.WhichOneof("matched_stop"), c.matched_token_id, c.matched_stop_str)


@pytest.mark.parametrize("prompt", range(len(PROMPTS)))
def test_greedy_same_token_ids(targets, prompt):
    ours, vllm = both(targets, _req(PROMPTS[prompt]))
    assert [_summary(c) for c in _completes(ours).values()] == [_summary(c) for c in _completes(vllm).values()]
    assert len(_completes(ours)[0].output_ids) == 8


def test_greedy_streaming_same_messages(targets):
    ours, vllm = both(targets, _req(PROMPTS[0], stream=True, max_tokens=6))

    def shape(rs):
        return [(r.WhichOneof("response"), list(r.chunk.token_ids) if r.HasField("chunk") else _summary(r.complete))
                for r in rs]

    # Steps may merge differently under load: compare the ids, then the final message.
    ids = [[t for r in rs if r.HasField("chunk") for t in r.chunk.token_ids] for rs in (ours, vllm)]
    assert ids[0] == ids[1] and len(ids[0]) == 6
    assert shape(ours)[-1][0] == shape(vllm)[-1][0] == "complete"
    assert _summary(ours[-1].complete)[1:] [:1] == _summary(vllm[-1].complete)[1:][:1]
    # The complete message repeats the last chunk's ids on both.
    for rs in (ours, vllm):
        assert list(rs[-1].complete.output_ids) == list(rs[-2].chunk.token_ids)


def test_stop_token_and_stop_string(targets):
    ours, _ = both(targets, _req(PROMPTS[1], max_tokens=8))
    ids = list(_completes(ours)[0].output_ids)
    ours, vllm = both(targets, _req(PROMPTS[1], max_tokens=8, stop_token_ids=[ids[3]]))
    assert _summary(_completes(ours)[0]) == _summary(_completes(vllm)[0])
    assert _completes(ours)[0].finish_reason == "stop"


def test_seeded_sampling_n2_and_text_prompt(targets):
    ours, vllm = both(targets, _req(PROMPTS[2], temperature=0.9, seed=1234, n=2, max_tokens=6))
    assert {i: _summary(c) for i, c in _completes(ours).items()} == \
        {i: _summary(c) for i, c in _completes(vllm).items()}
    text = pb.GenerateRequest(request_id="t", text="Hello, tiny model.",
                              sampling_params=pb.SamplingParams(temperature=0.0, max_tokens=5))
    ours, vllm = both(targets, text)
    assert _summary(_completes(ours)[0]) == _summary(_completes(vllm)[0])


def test_logprobs(targets):
    ours, vllm = both(targets, _req(PROMPTS[0], max_tokens=4, logprobs=3))
    a, b = _completes(ours)[0].output_logprobs, _completes(vllm)[0].output_logprobs
    assert list(a.token_ids) == list(b.token_ids)
    assert a.token_logprobs == pytest.approx(list(b.token_logprobs), abs=1e-3)
    assert [len(t.token_ids) for t in a.top_logprobs] == [len(t.token_ids) for t in b.top_logprobs]


BAD = {
    "id out of vocabulary": _req([0, VOCAB_SIZE + 10]),
    "temperature": _req([0, 1], temperature=-1.0),
    "top_p": _req([0, 1], top_p=1.5),
    "min_p": _req([0, 1], min_p=1.5),
    "max_tokens": _req([0, 1], max_tokens=0),
    "n with greedy": _req([0, 1], n=3),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_invalid_argument_on_both(targets, case):
    codes = []
    for t in targets:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            asyncio.run(_call(t, BAD[case]))
        codes.append(e.value.code())
        assert e.value.details()
    assert codes == [grpc.StatusCode.INVALID_ARGUMENT] * 2, case
    # Both engines still serve.
    ours, vllm = both(targets, _req(PROMPTS[0], max_tokens=2))
    assert _summary(_completes(ours)[0]) == _summary(_completes(vllm)[0])


def test_unknown_field_refused_here_ignored_by_vllm(targets):
    raw = _req(PROMPTS[0], max_tokens=2).SerializeToString() + b"\xf8\x07\x05"  # field 127
    with pytest.raises(grpc.aio.AioRpcError) as e:
        asyncio.run(_call(targets[0], raw=raw))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "127" in e.value.details()
    vllm = asyncio.run(_call(targets[1], raw=raw))
    assert _completes(vllm)[0].finish_reason == "length"
