"""Wire format checked against vLLM's own msgspec classes and MsgpackEncoder/Decoder."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
import torch
from vllm.v1.engine import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreReadyResponse,
    EngineCoreRequest,
    FinishReason,
    UtilityOutput,
)
from vllm.v1.metrics.stats import PrefillStats, SchedulerStats
from vllm.v1.outputs import LogprobsLists, LogprobsTensors
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder, UtilityResult

from vllm_pyfrontend.engine import wire
from vllm_pyfrontend.engine.types import EngineRequest


def _request(**over) -> EngineRequest:
    sp = {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 40,
        "min_p": 0.05,
        "seed": 1234,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "repetition_penalty": 1.1,
        "max_tokens": 100,
        "min_tokens": 2,
        "logprobs": 3,
        "logit_bias": {5: 1.5, 17: -100.0},
        "allowed_token_ids": [1, 2, 5, 17],
        "_bad_words_token_ids": [[7, 8]],
        "_eos_token_id": 2,
        "stop_token_ids": [9],
        "_all_stop_token_ids": {2, 9},
        "structured_outputs": {
            "json": None, "regex": "[a-z]+", "choice": None, "grammar": None,
            "json_object": None, "disable_any_whitespace": False,
            "disable_additional_properties": False, "whitespace_pattern": None,
            "structural_tag": None, "_backend": "xgrammar", "_backend_was_auto": True,
        },
        "extra_args": {"k": [1, "x"]},
        "thinking_token_budget": 50,
    }
    fields = dict(
        request_id="chatcmpl-0-abc",
        prompt_token_ids=[1, 2, 3, 4],
        sampling_params=sp,
        arrival_time=1700000000.25,
        client_index=3,
        external_req_id="user-id",
        priority=-2,
        cache_salt="salt",
        data_parallel_rank=1,
        trace_headers={"traceparent": "00-abc"},
    )
    fields.update(over)
    return EngineRequest(**fields)


def test_encode_add_decodes_with_vllm_request_struct():
    req = _request()
    payload = wire.encode_add(req, wire.LAYOUT_0_32)
    decoded = MsgpackDecoder(EngineCoreRequest).decode([payload])
    assert decoded.request_id == "chatcmpl-0-abc"
    assert decoded.prompt_token_ids == [1, 2, 3, 4]
    assert decoded.mm_features is None and decoded.pooling_params is None
    assert decoded.arrival_time == 1700000000.25
    assert decoded.lora_request is None
    assert decoded.cache_salt == "salt"
    assert decoded.data_parallel_rank == 1
    assert decoded.prompt_embeds is None and decoded.prompt_is_token_ids is None
    assert decoded.client_index == 3
    assert decoded.current_wave == 0
    assert decoded.priority == -2
    assert dict(decoded.trace_headers) == {"traceparent": "00-abc"}
    assert decoded.resumable is False
    assert decoded.external_req_id == "user-id"
    assert decoded.reasoning_ended is None and decoded.reasoning_parser_kwargs is None
    assert decoded.abort_immediately is False
    assert decoded.session_id is None and decoded.kv_hints is None

    sp = decoded.sampling_params
    assert sp.temperature == 0.7 and sp.top_p == 0.9 and sp.top_k == 40 and sp.min_p == 0.05
    assert sp.seed == 1234
    assert sp.presence_penalty == 0.5 and sp.frequency_penalty == -0.5
    assert sp.repetition_penalty == 1.1
    assert sp.max_tokens == 100 and sp.min_tokens == 2 and sp.logprobs == 3
    assert sp.logit_bias == {5: 1.5, 17: -100.0}
    assert sp.allowed_token_ids == [1, 2, 5, 17]
    assert sp.bad_words_token_ids == [[7, 8]]
    assert sp.eos_token_id == 2
    assert sp.stop_token_ids == [9]
    assert sp.all_stop_token_ids == {2, 9}
    so = sp.structured_outputs
    assert so.regex == "[a-z]+" and so._backend == "xgrammar" and so._backend_was_auto is True
    assert sp.extra_args == {"k": [1, "x"]}
    assert sp.thinking_token_budget == 50


def test_encode_add_sends_every_field_in_order():
    payload = wire.encode_add(_request(), wire.LAYOUT_0_33)
    arr = wire.unpack(payload)
    assert len(arr) == len(wire.LAYOUT_0_33.request_fields) == 22
    assert [f.name if hasattr(f, "name") else f for f in EngineCoreRequest.__struct_fields__] == list(
        wire.LAYOUT_0_32.request_fields
    )


def test_layout_for_version():
    assert wire.layout_for_version("0.32.0") is wire.LAYOUT_0_32
    assert wire.layout_for_version("0.32.0+cpu") is wire.LAYOUT_0_32
    assert wire.layout_for_version("0.33.0") is wire.LAYOUT_0_33
    assert wire.layout_for_version("0.34.1rc1") is wire.LAYOUT_0_33
    assert wire.layout_for_version("1.0.0") is wire.LAYOUT_0_33
    assert wire.layout_for_version("garbage") is wire.LAYOUT_0_32
    # The installed engine's field order is the 0.32 table.
    assert tuple(EngineCoreOutput.__struct_fields__) == wire.LAYOUT_0_32.output_fields
    assert tuple(EngineCoreOutputs.__struct_fields__) == wire.LAYOUT_0_32.outputs_fields
    assert wire.LAYOUT_0_33.output_fields[-1] == "error"


def test_abort_and_utility_payloads_decode_with_vllm():
    dec = MsgpackDecoder()
    assert dec.decode([wire.encode_abort(("a", "b"))]) == ["a", "b"]
    assert dec.decode([wire.encode_utility(2, 2**64 - 1, "is_sleeping", ())]) == [
        2, 2**64 - 1, "is_sleeping", []]


def _logprobs_lists(positions: int, k: int) -> LogprobsLists:
    ids = np.arange(positions * (k + 1), dtype=np.int32).reshape(positions, k + 1)
    lps = -np.arange(positions * (k + 1), dtype=np.float32).reshape(positions, k + 1) / 4
    ranks = np.arange(1, positions + 1, dtype=np.int32)
    return LogprobsLists(ids, lps, ranks, None)


def test_decode_vllm_outputs_with_logprobs_inline_and_aux_frames():
    small = _logprobs_lists(1, 1)  # 8 bytes per array: inline ext 3
    big = _logprobs_lists(20, 5)  # 480 bytes: aux frames
    prompt_lp = LogprobsTensors(
        torch.zeros((3, 2), dtype=torch.int64), torch.zeros((3, 2)), torch.zeros(3, dtype=torch.int64)
    )
    stats = SchedulerStats(num_running_reqs=7, num_waiting_reqs=3, kv_cache_usage=0.5)
    eco = EngineCoreOutputs(
        engine_index=1,
        outputs=[
            EngineCoreOutput("r1", [11], new_logprobs=small,
                             prefill_stats=PrefillStats(num_prompt_tokens=4, num_cached_tokens=2)),
            EngineCoreOutput("r2", list(range(20)), new_logprobs=big,
                             new_prompt_logprobs_tensors=prompt_lp,
                             finish_reason=FinishReason.STOP, stop_reason=13),
            EngineCoreOutput("r3", [], finish_reason=FinishReason.ABORT, stop_reason="###"),
            EngineCoreOutput("r4", [5, 6]),
        ],
        scheduler_stats=stats,
        timestamp=123.5,
        finished_requests={"r2", "r3"},
    )
    frames = MsgpackEncoder().encode(eco)
    assert len(frames) > 1, "the big arrays must travel as aux frames"
    out = wire.decode_outputs(list(frames), wire.LAYOUT_0_32)
    assert out.engine_index == 1
    assert out.timestamp == 123.5
    assert out.scheduler_stats["num_running_reqs"] == 7
    assert out.scheduler_stats["num_waiting_reqs"] == 3
    assert sorted(out.finished_requests) == ["r2", "r3"]
    assert out.utility_output is None
    r1, r2, r3, r4 = out.outputs
    assert (r1.request_id, r1.new_token_ids, r1.finish_reason) == ("r1", [11], None)
    assert r1.num_cached_tokens == 2
    assert r1.new_logprobs.token_ids == small.logprob_token_ids.tolist()
    assert r1.new_logprobs.logprobs == small.logprobs.tolist()
    assert r1.new_logprobs.sampled_ranks == [1]
    assert r2.new_token_ids == list(range(20))
    assert r2.new_logprobs.token_ids == big.logprob_token_ids.tolist()
    assert r2.new_logprobs.logprobs == big.logprobs.tolist()
    assert r2.new_logprobs.sampled_ranks == big.sampled_token_ranks.tolist()
    assert (r2.finish_reason, r2.stop_reason, r2.finished) == (0, 13, True)
    assert (r3.finish_reason, r3.stop_reason) == (2, "###")
    assert (r4.new_token_ids, r4.finish_reason, r4.new_logprobs, r4.num_cached_tokens) == (
        [5, 6], None, None, None)


def test_decode_accepts_zmq_style_frames():
    class Frame:  # what recv_multipart(copy=False) yields: .buffer is a memoryview
        def __init__(self, b):
            self.buffer = memoryview(bytes(b))

    eco = EngineCoreOutputs(outputs=[EngineCoreOutput("a", [1], new_logprobs=_logprobs_lists(20, 5))])
    frames = [Frame(f) for f in MsgpackEncoder().encode(eco)]
    out = wire.decode_outputs(frames)
    assert out.outputs[0].new_logprobs.sampled_ranks == list(range(1, 21))


def test_decode_queue_time_from_vllm_events():
    from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType as T

    events = [EngineCoreEvent(T.QUEUED, 10.0), EngineCoreEvent(T.SCHEDULED, 10.25),
              EngineCoreEvent(T.PREEMPTED, 11.0), EngineCoreEvent(T.SCHEDULED, 12.0)]
    eco = EngineCoreOutputs(outputs=[EngineCoreOutput("a", [1], events=events), EngineCoreOutput("b", [2])])
    a, b = wire.decode_outputs(MsgpackEncoder().encode(eco)).outputs
    assert a.queue_time == pytest.approx(0.25)  # the first SCHEDULED, as vLLM
    assert b.queue_time is None


def test_decode_utility_output():
    eco = EngineCoreOutputs(utility_output=UtilityOutput(77, None, UtilityResult({"a": [1, 2]})))
    out = wire.decode_outputs(MsgpackEncoder().encode(eco))
    assert out.utility_output == (77, None, {"a": [1, 2]})
    assert out.outputs == []
    eco = EngineCoreOutputs(utility_output=UtilityOutput(78, "boom"))
    assert wire.decode_outputs(MsgpackEncoder().encode(eco)).utility_output == (78, "boom", None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.float64, torch.uint8, torch.bool])
@pytest.mark.parametrize("shape", [(3, 4), (5,), (0, 3), (2, 300)])
def test_decode_array_matches_torch_tensor_encoding(dtype, shape):
    t = (torch.arange(int(np.prod(shape))) % 7).reshape(shape).to(dtype)
    frames = MsgpackEncoder().encode({"t": t})
    decoded = wire.decode_array(wire.unpack(frames[0])["t"], frames)
    assert decoded == t.tolist()


def test_decode_array_matches_numpy_encoding():
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    frames = MsgpackEncoder().encode({"a": a})
    assert wire.decode_array(wire.unpack(frames[0])["a"], frames) == a.tolist()


def test_pickle_ext_types_refused():
    for code in (1, 2):
        payload = msgspec.msgpack.encode(
            [0, [], None, 1.0, [5, None, [None, msgspec.msgpack.Ext(code, b"\x80\x04N.")]]])
        with pytest.raises(wire.ProtocolError, match="pickle"):
            wire.decode_outputs([payload])
    with pytest.raises(wire.ProtocolError):
        wire.decode_outputs([msgspec.msgpack.encode([0, [], msgspec.msgpack.Ext(9, b"")])])
    with pytest.raises(wire.ProtocolError):
        wire.decode_outputs([b"\xc1"])


def test_tolerates_missing_and_extra_trailing_fields():
    # 0.33 appends `error`; future versions may append more.
    out_033 = ["r", [1], None, None, None, 3, None, None, None, None, None, None, None, 0, None,
               None, None, None, "KV load failed", "future-field"]
    payload = msgspec.msgpack.encode([2, [out_033, ["s"] + [[4]]], None, 1.0, None, None, None,
                                      None, "w1", "future"])
    out = wire.decode_outputs([payload], wire.LAYOUT_0_33)
    assert out.engine_index == 2
    r, s = out.outputs
    assert (r.finish_reason, r.error) == (3, "KV load failed")
    assert (s.request_id, s.new_token_ids, s.error) == ("s", [4], None)
    # With the 0.32 table the extra fields are simply ignored.
    assert wire.decode_outputs([payload], wire.LAYOUT_0_32).outputs[0].error is None
    # Shortest possible message.
    out = wire.decode_outputs([msgspec.msgpack.encode([])])
    assert (out.engine_index, out.outputs, out.scheduler_stats) == (0, [], None)


def test_engine_dead_frame():
    assert wire.is_engine_dead([b"ENGINE_CORE_DEAD"])
    assert wire.is_engine_dead([memoryview(b"ENGINE_CORE_DEAD")])
    assert not wire.is_engine_dead([b"ENGINE_CORE_DEAD", b""])
    assert not wire.is_engine_dead([msgspec.msgpack.encode([0, []])])


def test_decode_ready_response():
    resp = EngineCoreReadyResponse(
        max_model_len=4096, num_gpu_blocks=100, block_size=16, dp_stats_address=None,
        dtype="bfloat16", vllm_version="0.32.0", world_size=1, data_parallel_size=2,
        tensor_parallel_size=1, pipeline_parallel_size=1, decode_context_parallel_size=1,
        data_parallel_rank=1, max_num_seqs=256, max_num_batched_tokens=8192,
        instance_id="abc", supports_lora=False, max_loras=0,
    )
    info = wire.decode_ready(msgspec.msgpack.encode(resp))
    assert (info.engine_index, info.max_model_len, info.vllm_version, info.max_num_seqs) == (
        1, 4096, "0.32.0", 256)
    assert info.raw["block_size"] == 16
    assert type(info).from_json(info.to_json()) == info
    assert wire.decode_ready(msgspec.msgpack.encode(resp), engine_index=5).engine_index == 5
    with pytest.raises(wire.ProtocolError):
        wire.decode_ready(msgspec.msgpack.encode({"vllm_version": "x"}))


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_full_length_outputs_decode_as_the_general_decoder_does(version):
    """Outputs written at full length (as the simulated engine writes them, no trailing default
    omitted) take the decoder's fast path only when they carry nothing but id and tokens."""
    from vllm_pyfrontend.supervisor.sim import wire as sim_wire

    layout = sim_wire.Layout(version)
    items = [
        sim_wire.output_item(layout, "plain", [5, 6]),
        sim_wire.output_item(layout, "done", [7], finish_reason=1, stop_reason=2),
        sim_wire.output_item(layout, "queued", [8], events=[sim_wire.event(1, 1.0), sim_wire.event(2, 1.5)]),
        sim_wire.output_item(layout, "prefill", [9], prefill_stats={"num_cached_tokens": 3}),
        sim_wire.output_item(layout, "err", [], finish_reason=3),
    ]
    ours = wire.layout_for_version(version)
    got = wire.decode_outputs([sim_wire.pack_outputs(0, items, 1.0)], ours).outputs
    error_index = ours.output_index("error")
    want = [wire._decode_output(o, [], error_index) for o in items]
    assert got == want
    assert (got[0].request_id, got[0].new_token_ids, got[0].finish_reason) == ("plain", [5, 6], None)
    assert got[1].finish_reason == 1 and got[1].stop_reason == 2
    assert got[2].queue_time == pytest.approx(0.5)
    assert got[3].num_cached_tokens == 3


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_plain_outputs_are_told_apart_in_order(version):
    """`decode_message` + `is_plain` (the engine client's per-token path): outputs with nothing
    but id and tokens, at full length as vLLM's own encoder writes them or with the trailing
    defaults omitted, are plain in their place; the others decode as the general decoder does,
    and `decode_outputs` gives the same outputs either way."""
    from vllm_pyfrontend.supervisor.sim import wire as sim_wire

    layout = sim_wire.Layout(version)
    items = [
        sim_wire.output_item(layout, "a", [5, 6]),
        sim_wire.output_item(layout, "done", [7], finish_reason=1, stop_reason=2),
        sim_wire.output_item(layout, "b", [8]),
        sim_wire.output_item(layout, "short", [9])[:2],  # trailing defaults omitted
    ]
    ours = wire.layout_for_version(version)
    frames = [sim_wire.pack_outputs(0, items, 1.0, finished_requests=["done"])]
    head, raw = wire.decode_message(frames, ours)
    assert head.outputs == [] and head.timestamp == 1.0 and head.finished_requests == ["done"]
    assert [wire.is_plain(o, ours) for o in raw] == [True, False, True, True]
    assert [(o[0], o[1]) for o in raw if wire.is_plain(o, ours)] == [("a", [5, 6]), ("b", [8]), ("short", [9])]
    assert wire.decode_output(raw[1], frames, ours) == wire._decode_output(items[1], [], ours.output_index("error"))
    assert wire.decode_outputs(frames, ours).outputs == [
        wire.EngineOutput("a", [5, 6]), wire.decode_output(raw[1], frames, ours),
        wire.EngineOutput("b", [8]), wire.EngineOutput("short", [9])]
    assert len(ours.plain_tail) == len(ours.output_fields) - 2


def test_vllms_own_running_output_is_plain():
    """What vLLM's msgspec encoder writes for a running request's output matches the layout's
    default tail exactly (so the per-token path is taken on the real engine's outputs)."""
    from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs
    from vllm.v1.serial_utils import MsgpackEncoder

    frames = MsgpackEncoder().encode(
        EngineCoreOutputs(engine_index=0, outputs=[EngineCoreOutput(request_id="r", new_token_ids=[1, 2])]))
    _, raw = wire.decode_message(frames, wire.layout_for_version("0.32.0"))
    assert [wire.is_plain(o, wire.layout_for_version("0.32.0")) for o in raw] == [True]


def test_decode_request_timing_from_vllm_events_and_prefill_stats():
    """The first SCHEDULED event's engine time, the PREEMPTED events and the prompt tokens the
    engine computed (prefill_stats), as vLLM's output processor reads them."""
    from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType as T
    from vllm.v1.metrics.stats import PrefillStats

    events = [EngineCoreEvent(T.QUEUED, 10.0), EngineCoreEvent(T.SCHEDULED, 10.25),
              EngineCoreEvent(T.PREEMPTED, 11.0), EngineCoreEvent(T.SCHEDULED, 12.0),
              EngineCoreEvent(T.PREEMPTED, 13.0)]
    stats = PrefillStats()
    stats.set(num_prompt_tokens=20, num_local_cached_tokens=16, num_external_cached_tokens=0)
    eco = EngineCoreOutputs(outputs=[EngineCoreOutput("a", [1], events=events, prefill_stats=stats),
                                     EngineCoreOutput("b", [2], events=[EngineCoreEvent(T.PREEMPTED, 1.0)])])
    a, b = wire.decode_outputs(MsgpackEncoder().encode(eco)).outputs
    assert (a.scheduled_at, a.preemptions, a.num_computed_tokens, a.num_cached_tokens) == (10.25, 2, 4, 16)
    assert (b.scheduled_at, b.queue_time, b.preemptions, b.num_computed_tokens) == (None, None, 1, None)


def test_decode_prefill_stats_cache_creation_tokens():
    """The prompt tokens the engine wrote to its prefix cache (`PrefillStats.finalize`), which
    vLLM's chat usage reports as `created_cache_tokens` (and Anthropic's as
    `cache_creation_input_tokens`)."""
    stats = PrefillStats()
    stats.set(num_prompt_tokens=40, num_local_cached_tokens=16, num_external_cached_tokens=0)
    stats.finalize(32)  # two full blocks cached after the prefill, one of them before it
    eco = EngineCoreOutputs(outputs=[EngineCoreOutput("a", [1], prefill_stats=stats), EngineCoreOutput("b", [2])])
    a, b = wire.decode_outputs(MsgpackEncoder().encode(eco)).outputs
    assert (a.num_cached_tokens, a.num_cache_creation_tokens) == (16, 16)
    assert (b.num_cached_tokens, b.num_cache_creation_tokens) == (None, None)
