"""Pooling on the wire, checked against vLLM's own structs and MsgpackEncoder/Decoder:
`pooling_params` as the engine decodes it, pooled tensors decoded inline and from aux frames
(without a copy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vllm.pooling_params import PoolingParams
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, FinishReason
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

from vllm_pyfrontend.engine import wire
from vllm_pyfrontend.engine.types import EngineRequest, InvalidEngineRequest
from vllm_pyfrontend.engine.validate import POOLING_PARAMS_FIELDS, validate_engine_request
from vllm_pyfrontend.llm.pooling import pooling_params


def _request(params) -> EngineRequest:
    return EngineRequest(request_id="embd-w0-1", prompt_token_ids=[5, 6, 7], sampling_params=None,
                         pooling_params=params, arrival_time=1.5)


def test_pooling_params_layout_is_vllms():
    assert POOLING_PARAMS_FIELDS == tuple(PoolingParams.__struct_fields__)


@pytest.mark.parametrize("task,kw", [
    ("embed", {"dimensions": 64}),
    ("classify", {"use_activation": False, "extra_kwargs": {"compressed_token_type_ids": 3}}),
    ("token_embed", {}),
])
def test_encode_add_with_pooling_params_decodes_with_vllm(task, kw):
    req = _request(pooling_params(task, **kw))
    validate_engine_request(req, max_model_len=8, vocab_size=100, num_clients=1)
    decoded = MsgpackDecoder(EngineCoreRequest).decode([wire.encode_add(req)])
    assert decoded.sampling_params is None
    pp = decoded.pooling_params
    assert isinstance(pp, PoolingParams)
    assert pp.task == task
    assert pp.use_activation is kw.get("use_activation", True)
    assert pp.dimensions == kw.get("dimensions")
    assert pp.extra_kwargs == kw.get("extra_kwargs")
    assert pp.output_kind == RequestOutputKind.FINAL_ONLY
    assert pp.skip_reading_prefix_cache is (task == "token_embed")


def test_pooling_request_may_fill_the_context():
    req = _request(pooling_params("embed"))
    req.prompt_token_ids = list(range(8))
    validate_engine_request(req, max_model_len=8, vocab_size=100, num_clients=1)
    req.prompt_token_ids = list(range(9))
    with pytest.raises(InvalidEngineRequest, match="maximum context length is 8"):
        validate_engine_request(req, max_model_len=8, vocab_size=100, num_clients=1)


@pytest.mark.parametrize("bad", [
    lambda p: p.__setitem__(4, "generate"),
    lambda p: p.__setitem__(9, 1),
    lambda p: p.__setitem__(0, 1),
    lambda p: p.__setitem__(1, 0),
    lambda p: p.pop(),
])
def test_bad_pooling_params_refused(bad):
    params = pooling_params("embed")
    bad(params)
    with pytest.raises(InvalidEngineRequest):
        validate_engine_request(_request(params), max_model_len=8, vocab_size=100, num_clients=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("size", [4, 1024])  # inline (ext 3) and an aux frame
def test_decode_pooled_output(dtype, size):
    t = torch.randn(size).to(dtype)
    eco = EngineCoreOutputs(engine_index=0, outputs=[
        EngineCoreOutput(request_id="embd-w0-1", new_token_ids=[], pooling_output=t,
                         finish_reason=FinishReason.STOP),
    ])
    frames = MsgpackEncoder().encode(eco)
    out = wire.decode_outputs(frames).outputs[0]
    assert out.finish_reason == 0
    pooled = out.pooling_output
    assert pooled is not None and pooled.shape == (size,)
    np.testing.assert_array_equal(pooled.array(), t.float().numpy())
    if size == 1024:
        assert len(frames) == 2
        assert isinstance(pooled.data, memoryview)  # a view of the aux frame: no copy


def test_decode_pooled_2d_token_output():
    t = torch.randn(5, 16)
    eco = EngineCoreOutputs(outputs=[EngineCoreOutput("r", [], pooling_output=t, finish_reason=FinishReason.STOP)])
    pooled = wire.decode_outputs(MsgpackEncoder().encode(eco)).outputs[0].pooling_output
    np.testing.assert_array_equal(pooled.array(), t.numpy())
