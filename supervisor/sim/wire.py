"""Message layouts of vLLM's EngineCore protocol, as the engine reads and writes them.

Inputs are decoded with typed msgspec structs that mirror vLLM's own
(`EngineCoreRequest` is an `array_like` struct, `SamplingParams` a map), so a request with
the wrong shape or a wrong type fails here the same way it fails in vLLM's input thread.

Outputs are written as plain lists and packed with ormsgpack: msgspec encodes vLLM's
`array_like` structs as full positional arrays (every field, defaults included), and the
layouts below reproduce those arrays element for element for the supported versions.
"""

from __future__ import annotations

import enum
import math
import struct
from typing import Any

import msgspec
import ormsgpack

# Request type bytes (vllm.v1.engine.EngineCoreRequestType).
ADD = b"\x00"
ABORT = b"\x01"
START_DP_WAVE = b"\x02"
UTILITY = b"\x03"

ENGINE_CORE_DEAD = b"ENGINE_CORE_DEAD"

# FinishReason.
FINISH_STOP = 0
FINISH_LENGTH = 1
FINISH_ABORT = 2
FINISH_ERROR = 3

# EngineCoreEventType.
EVENT_QUEUED = 1
EVENT_SCHEDULED = 2

_MAX_TEMP = 2.0


class OutputKind(enum.Enum):
    """vllm.sampling_params.RequestOutputKind (a value-based Enum on the wire)."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


class SamplingParamsError(ValueError):
    """Raised by `SimSamplingParams.__post_init__`, as vLLM's `_verify_args` does."""


class SimSamplingParams(msgspec.Struct, omit_defaults=True):
    """Mirror of vllm.sampling_params.SamplingParams (0.32) for decoding: same field names,
    types and defaults, and the value checks of its `__post_init__` that matter here."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    watermarking: bool | None = None
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    prompt_logprob_token_ids: Any = None
    prompt_logprob_start: int | None = None
    logprob_token_ids: list[int] | None = None
    flat_logprobs: bool = False
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: OutputKind = OutputKind.CUMULATIVE
    stream_interval: int | None = None
    skip_clone: bool = False
    output_text_buffer_length: int = 0
    _eos_token_id: int | None = None
    _all_stop_token_ids: set[int] = msgspec.field(default_factory=set)
    _watermarking_skipped: bool = False
    structured_outputs: dict[str, Any] | None = None
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    extra_args: dict[str, Any] | None = None
    bad_words: list[str] | None = None
    _bad_words_token_ids: list[list[int]] | None = None
    skip_reading_prefix_cache: bool | None = None
    thinking_token_budget: int | None = None
    repetition_detection: dict[str, Any] | None = None
    routed_experts_prompt_start: int = 0
    trace_decode_token_ids: list[int] | None = None

    def __post_init__(self) -> None:
        bad = _sampling_params_problem(self)
        if bad is not None:
            raise SamplingParamsError(bad)

    @property
    def eos_token_id(self) -> int | None:
        return self._eos_token_id


def _sampling_params_problem(p: SimSamplingParams) -> str | None:
    """The first check of vLLM's `SamplingParams._verify_args` that `p` fails, if any."""
    if p.n < 1:
        return f"n must be at least 1, got {p.n}."
    if not -2.0 <= p.presence_penalty <= 2.0:
        return f"presence_penalty must be in [-2, 2], got {p.presence_penalty}."
    if not -2.0 <= p.frequency_penalty <= 2.0:
        return f"frequency_penalty must be in [-2, 2], got {p.frequency_penalty}."
    if not math.isfinite(p.repetition_penalty) or p.repetition_penalty <= 0.0:
        return f"repetition_penalty must be greater than zero, got {p.repetition_penalty}."
    if not math.isfinite(p.temperature) or p.temperature < 0.0:
        return f"temperature must be non-negative, got {p.temperature}."
    if p.temperature > _MAX_TEMP:
        return f"temperature must be at most {_MAX_TEMP}, got {p.temperature}."
    if not 0.0 < p.top_p <= 1.0:
        return f"top_p must be in (0, 1], got {p.top_p}."
    if p.top_k < -1:
        return f"top_k must be -1 (disable), or at least 1, got {p.top_k}."
    if not 0.0 <= p.min_p <= 1.0:
        return f"min_p must be in [0, 1], got {p.min_p}."
    if p.max_tokens is not None and p.max_tokens < 1:
        return f"max_tokens must be at least 1, got {p.max_tokens}."
    if p.min_tokens < 0:
        return f"min_tokens must be greater than or equal to 0, got {p.min_tokens}."
    if p.max_tokens is not None and p.min_tokens > p.max_tokens:
        return "min_tokens must be less than or equal to max_tokens"
    if p.logprobs is not None and p.logprobs != -1 and p.logprobs < 0:
        return f"logprobs must be non-negative or -1, got {p.logprobs}."
    if p.temperature < 1e-5 and p.n > 1:
        return f"n must be 1 when using greedy sampling, got {p.n}."
    return None


class SimEngineRequest(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """Mirror of vllm.v1.engine.EngineCoreRequest (0.32/0.33): a positional array."""

    request_id: str
    prompt_token_ids: list[int] | None
    mm_features: list[Any] | None
    sampling_params: SimSamplingParams | None
    pooling_params: list[Any] | None  # PoolingParams: an array_like struct
    arrival_time: float
    lora_request: Any
    cache_salt: str | None
    data_parallel_rank: int | None
    prompt_embeds: Any = None
    prompt_is_token_ids: list[bool] | None = None
    client_index: int = 0
    current_wave: int = 0
    priority: int = 0
    trace_headers: dict[str, str] | None = None
    resumable: bool = False
    external_req_id: str | None = None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: dict[str, Any] | None = None
    abort_immediately: bool = False
    session_id: str | None = None
    kv_hints: Any = None


_request_decoder = msgspec.msgpack.Decoder(SimEngineRequest)
_generic_decoder = msgspec.msgpack.Decoder()


def decode_add(payload: bytes) -> SimEngineRequest:
    """Decode an ADD payload; raises (msgspec.ValidationError, SamplingParamsError, ...)
    where vLLM's input thread would raise."""
    return _request_decoder.decode(payload)


def decode_generic(payload: bytes) -> Any:
    """Decode an ABORT or UTILITY payload (untyped, as vLLM's generic decoder does)."""
    return _generic_decoder.decode(payload)


# ---------------------------------------------------------------------------- outputs


class Layout:
    """Per-version output layout: how many trailing elements follow the ones we fill.

    EngineCoreOutput has 18 fields in 0.32 and 19 (`error`) from 0.33; EngineCoreOutputs
    has 9 in both.
    """

    def __init__(self, vllm_version: str):
        self.vllm_version = vllm_version
        self.output_extra: list[Any] = [None] if _version_at_least(vllm_version, (0, 33)) else []


def _version_at_least(version: str, floor: tuple[int, int]) -> bool:
    parts: list[int] = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    while len(parts) < 2:
        parts.append(0)
    return tuple(parts) >= floor


def _array(dtype: str, fmt: str, shape: list[int], values: list) -> list[Any]:
    """A small numpy array as vLLM's MsgpackEncoder writes it: `[dtype.str, shape, raw]`, the
    raw little-endian bytes inline as msgpack ext type 3."""
    return [dtype, shape, ormsgpack.Ext(3, struct.pack(f"<{len(values)}{fmt}", *values))]


def pooled_tensor(raw: bytes, dim: int) -> list[Any]:
    """A pooling output as vLLM's MsgpackEncoder writes a small float32 tensor:
    `["float32", shape, raw]`, the bytes inline as msgpack ext type 3."""
    return ["float32", [dim], ormsgpack.Ext(3, raw)]


def logprobs_lists(token: int, alternatives: list[int]) -> list[Any]:
    """`new_logprobs` for one sampled token: vLLM's LogprobsLists (token ids [1, K+1], logprobs
    [1, K+1], sampled ranks [1], cu_num_generated_tokens None), column 0 the sampled token."""
    ids = [token, *alternatives]
    values = [-0.25] + [-1.0 - 0.5 * j for j in range(len(alternatives))]
    return [_array("<i4", "i", [1, len(ids)], ids), _array("<f4", "f", [1, len(ids)], values),
            _array("<i4", "i", [1], [1]), None]


def output_item(
    layout: Layout,
    request_id: str,
    new_token_ids: list[int],
    finish_reason: int | None = None,
    stop_reason: int | str | None = None,
    events: list[dict[str, Any]] | None = None,
    prefill_stats: dict[str, int] | None = None,
) -> list[Any]:
    """One EngineCoreOutput, positionally (see the class in vllm/v1/engine/__init__.py)."""
    item = [
        request_id,  # 0 request_id
        new_token_ids,  # 1 new_token_ids
        None,  # 2 new_logprobs
        None,  # 3 new_prompt_logprobs_tensors
        None,  # 4 pooling_output
        finish_reason,  # 5 finish_reason
        stop_reason,  # 6 stop_reason
        events,  # 7 events
        None,  # 8 kv_transfer_params
        None,  # 9 ec_transfer_params
        None,  # 10 trace_headers
        prefill_stats,  # 11 prefill_stats
        None,  # 12 routed_experts
        0,  # 13 num_nans_in_logits
        None,  # 14 mm_cache_miss_hashes
        None,  # 15 new_sampling_mask
        None,  # 16 spec_decode_metrics
        None,  # 17 prompt_token_id_logprobs
    ]
    if layout.output_extra:
        item += layout.output_extra
    return item


def pack_outputs(
    engine_index: int,
    outputs: list[list[Any]],
    timestamp: float,
    scheduler_stats: dict[str, Any] | None = None,
    utility_output: list[Any] | None = None,
    finished_requests: list[str] | None = None,
    weight_version: str | None = None,
) -> bytes:
    """One EngineCoreOutputs message (a 9-element array), packed. Step outputs carry the
    engine's weight version ("default" unless set); utility replies carry None."""
    return ormsgpack.packb(
        [
            engine_index,  # 0 engine_index
            outputs,  # 1 outputs
            scheduler_stats,  # 2 scheduler_stats
            timestamp,  # 3 timestamp (engine monotonic clock)
            utility_output,  # 4 utility_output
            finished_requests,  # 5 finished_requests (a set in vLLM: an array on the wire)
            None,  # 6 wave_complete
            None,  # 7 start_wave
            weight_version,  # 8 weight_version
        ]
    )


def utility_output(call_id: int, failure: str | None, result: Any = None) -> list[Any]:
    """UtilityOutput: `[call_id, failure_message, result]`. A success wraps the value in
    vLLM's `UtilityResult` encoding, `[type_info, value]` with type_info None (what vLLM
    sends unless VLLM_ALLOW_INSECURE_SERIALIZATION is set); a failure carries None."""
    if failure is not None:
        return [call_id, failure, None]
    return [call_id, None, [None, result]]


def event(event_type: int, timestamp: float) -> dict[str, Any]:
    """EngineCoreEvent: a plain msgspec struct, so a map."""
    return {"type": event_type, "timestamp": timestamp}


def prefill_stats(num_prompt_tokens: int, block_size: int) -> dict[str, int]:
    """PrefillStats (a dataclass, so a map with every field). Nothing is ever cached in the
    simulation; the full blocks computed become prefix cache, as `finalize` counts them."""
    return {
        "num_prompt_tokens": num_prompt_tokens,
        "num_computed_tokens": num_prompt_tokens,
        "num_cached_tokens": 0,
        "num_local_cached_tokens": 0,
        "num_external_cached_tokens": 0,
        "num_cache_creation_tokens": (num_prompt_tokens // block_size) * block_size,
    }


_KV_FETCH_STAGES = {"waiting_to_start": 0, "in_progress": 0, "completed_waiting": 0}


def scheduler_stats(
    num_running: int,
    num_waiting: int,
    kv_cache_usage: float,
    prefix_requests: int,
    prefix_queries: int,
    prefix_hits: int = 0,
    reset: bool = False,
) -> dict[str, Any]:
    """SchedulerStats as msgspec encodes the dataclass: a map with every field (0.32).
    `step_counter` and `current_wave` stay 0 outside DP waves, as in a real engine."""
    return {
        "num_running_reqs": num_running,
        "num_waiting_reqs": num_waiting,
        "num_skipped_waiting_reqs": 0,
        "num_kv_fetch_reqs_by_stage": dict(_KV_FETCH_STAGES),
        "step_counter": 0,
        "current_wave": 0,
        "kv_cache_usage": kv_cache_usage,
        "iteration_details": None,
        "prefix_cache_stats": {
            "reset": reset,
            "requests": prefix_requests,
            "queries": prefix_queries,
            "hits": prefix_hits,
            "preempted_requests": 0,
            "preempted_queries": 0,
            "preempted_hits": 0,
            "hits_by_source": {},
        },
        "connector_prefix_cache_stats": None,
        "kv_cache_eviction_events": [],
        "spec_decoding_stats": None,
        "kv_connector_stats": None,
        "ec_connector_stats": None,
        "waiting_lora_adapters": {},
        "running_lora_adapters": {},
        "cudagraph_stats": None,
        "perf_stats": None,
    }


def ready_response(
    *,
    max_model_len: int,
    num_gpu_blocks: int,
    block_size: int,
    dtype: str,
    vllm_version: str,
    engine_index: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    instance_id: str,
) -> bytes:
    """EngineCoreReadyResponse (a dataclass: a map with every field), sent on each input
    socket once it is connected."""
    return ormsgpack.packb(
        {
            "max_model_len": max_model_len,
            "num_gpu_blocks": num_gpu_blocks,
            "block_size": block_size,
            "dp_stats_address": None,
            "dtype": dtype,
            "vllm_version": vllm_version,
            "world_size": 1,
            "data_parallel_size": 1,
            "tensor_parallel_size": 1,
            "pipeline_parallel_size": 1,
            "decode_context_parallel_size": 1,
            "data_parallel_rank": engine_index,
            "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
            "instance_id": instance_id,
            "supports_lora": False,
            "max_loras": 0,
            "mamba_block_size": None,
            "kv_cache_size_tokens": num_gpu_blocks * block_size,
            "kv_cache_max_concurrency": (num_gpu_blocks * block_size) / max_model_len,
            "kv_events_config": None,
            "weight_transfer_backend": None,
            "enable_sleep_mode": False,
            "supports_draft_weight_updates": False,
            "effective_attention_block_size": block_size,
        }
    )


def hello(headless: bool = True) -> bytes:
    return ormsgpack.packb({"status": "HELLO", "local": not headless, "headless": headless})


def ready(headless: bool = True) -> bytes:
    return ormsgpack.packb({"status": "READY", "local": not headless, "headless": headless})
