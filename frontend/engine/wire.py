"""vLLM EngineCore messages <-> msgpack frames (the frontend side of the wire).

vLLM encodes its messages with msgspec `array_like` structs: every struct is a
positional msgpack array, trailing fields equal to their default are omitted
(`omit_defaults=True`), and newer versions append fields at the end. So the
decoder here reads by position, defaults what is missing and ignores what is
extra; the encoder sends every field it knows, in the order of the engine's
version (`WireLayout`).

Only plain msgpack plus ext type 3 (raw little-endian array bytes) is accepted.
Ext types 1 and 2 carry pickles: decoding them would let the peer run code in
this process, so they are refused with `ProtocolError`.
"""

from __future__ import annotations

import math
import re
import struct
import sys
import threading
from dataclasses import dataclass
from typing import Any, Sequence

import ormsgpack

from .types import _NUMPY_DTYPES, EngineInfo, EngineOutput, EngineOutputs, EngineRequest, Logprobs, PooledTensor

# Request type frames (vLLM's EngineCoreRequestType). 0x02 is coordinator-only,
# 0x04/0x05 are engine-internal sentinels: never sent from here.
REQUEST_ADD = b"\x00"
REQUEST_ABORT = b"\x01"
REQUEST_UTILITY = b"\x03"

ENGINE_CORE_DEAD = b"ENGINE_CORE_DEAD"

EXT_PICKLE = 1
EXT_CLOUDPICKLE = 2
EXT_RAW_VIEW = 3

_PACK_OPTS = ormsgpack.OPT_NON_STR_KEYS  # logit_bias has int keys
_UNPACK_OPTS = ormsgpack.OPT_NON_STR_KEYS


class ProtocolError(ValueError):
    """A message from the engine that this frontend must not (or cannot) decode."""


# --------------------------------------------------------------------------- layouts

_REQUEST_FIELDS_0_32 = (
    "request_id",
    "prompt_token_ids",
    "mm_features",
    "sampling_params",
    "pooling_params",
    "arrival_time",
    "lora_request",
    "cache_salt",
    "data_parallel_rank",
    "prompt_embeds",
    "prompt_is_token_ids",
    "client_index",
    "current_wave",
    "priority",
    "trace_headers",
    "resumable",
    "external_req_id",
    "reasoning_ended",
    "reasoning_parser_kwargs",
    "abort_immediately",
    "session_id",
    "kv_hints",
)

_OUTPUT_FIELDS_0_32 = (
    "request_id",
    "new_token_ids",
    "new_logprobs",
    "new_prompt_logprobs_tensors",
    "pooling_output",
    "finish_reason",
    "stop_reason",
    "events",
    "kv_transfer_params",
    "ec_transfer_params",
    "trace_headers",
    "prefill_stats",
    "routed_experts",
    "num_nans_in_logits",
    "mm_cache_miss_hashes",
    "new_sampling_mask",
    "spec_decode_metrics",
    "prompt_token_id_logprobs",
)

_OUTPUTS_FIELDS_0_32 = (
    "engine_index",
    "outputs",
    "scheduler_stats",
    "timestamp",
    "utility_output",
    "finished_requests",
    "wave_complete",
    "start_wave",
    "weight_version",
)

# Values for EngineCoreRequest fields that `EngineRequest` does not carry.
# (`getattr(req, name, default)` lets types.EngineRequest grow such fields later.)
_REQUEST_DEFAULTS: dict[str, Any] = {
    "mm_features": None,
    "lora_request": None,
    "prompt_embeds": None,
    "prompt_is_token_ids": None,
    "current_wave": 0,
    "resumable": False,
    "reasoning_ended": None,
    "reasoning_parser_kwargs": None,
    "abort_immediately": False,
    "session_id": None,
    "kv_hints": None,
}


# EngineCoreOutput fields whose default is not None.
_OUTPUT_DEFAULTS: dict[str, Any] = {"num_nans_in_logits": 0}


@dataclass(frozen=True)
class WireLayout:
    """Positional field tables of one vLLM version."""

    version: tuple[int, int]
    request_fields: tuple[str, ...]
    output_fields: tuple[str, ...]
    outputs_fields: tuple[str, ...]

    def __post_init__(self) -> None:
        # A running output with nothing but new token ids, as vLLM's msgspec writes it (every
        # field at its default): everything after `new_token_ids`. One list comparison tells
        # the common step from the rest (`decode_outputs`).
        tail = [_OUTPUT_DEFAULTS.get(name) for name in self.output_fields[2:]]
        object.__setattr__(self, "plain_tail", tail)
        object.__setattr__(self, "error_index", self.output_index("error"))  # read per message

    def output_index(self, name: str) -> int | None:
        try:
            return self.output_fields.index(name)
        except ValueError:
            return None


LAYOUT_0_32 = WireLayout((0, 32), _REQUEST_FIELDS_0_32, _OUTPUT_FIELDS_0_32, _OUTPUTS_FIELDS_0_32)
# 0.33 appends `error` (a request-scoped error message) to EngineCoreOutput.
LAYOUT_0_33 = WireLayout(
    (0, 33), _REQUEST_FIELDS_0_32, _OUTPUT_FIELDS_0_32 + ("error",), _OUTPUTS_FIELDS_0_32
)
LATEST_LAYOUT = LAYOUT_0_33

_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)")


def layout_for_version(version: str) -> WireLayout:
    """The field layout for the engine's reported `vllm_version` (e.g. "0.32.0+cpu").

    Versions before 0.33 (or unparsable ones) get the 0.32 table, later ones the
    newest known table: fields are only ever appended, and decoding tolerates
    extra trailing fields.
    """
    m = _VERSION_RE.match(version or "")
    if not m:
        return LAYOUT_0_32
    ver = (int(m.group(1)), int(m.group(2)))
    return LAYOUT_0_33 if ver >= (0, 33) else LAYOUT_0_32


# --------------------------------------------------------------------------- encode


def _pack_default(obj: Any) -> Any:
    # msgpack has no set; vLLM decodes arrays into its set-typed fields.
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__} for the engine")


def _packb(obj: Any) -> bytes:
    return ormsgpack.packb(obj, default=_pack_default, option=_PACK_OPTS)


def encode_add(req: EngineRequest, layout: WireLayout = LATEST_LAYOUT) -> bytes:
    """The ADD payload: `EngineCoreRequest` as a positional array with every field."""
    values = []
    for name in layout.request_fields:
        if name in _REQUEST_DEFAULTS:
            values.append(getattr(req, name, _REQUEST_DEFAULTS[name]))
        else:
            values.append(getattr(req, name))
    return _packb(values)


def encode_abort(request_ids: Sequence[str]) -> bytes:
    """The ABORT payload: an array of request ids."""
    return _packb(list(request_ids))


def encode_utility(client_index: int, call_id: int, method: str, args: Sequence[Any]) -> bytes:
    """The UTILITY payload: `[client_index, call_id, method, [args]]`."""
    return _packb([client_index, call_id, method, list(args)])


# --------------------------------------------------------------------------- decode


class _ExtState(threading.local):
    refused: ProtocolError | None = None


_ext_state = _ExtState()


def _ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_RAW_VIEW:
        return data
    if code in (EXT_PICKLE, EXT_CLOUDPICKLE):
        err = ProtocolError(
            f"engine sent a pickled value (msgpack ext type {code}); refusing to unpickle. "
            "Run the engine without VLLM_ALLOW_INSECURE_SERIALIZATION."
        )
    else:
        err = ProtocolError(f"unknown msgpack ext type {code}")
    # ormsgpack replaces an exception raised in the hook with a generic decode
    # error, so remember ours to re-raise it with its message.
    _ext_state.refused = err
    raise err


def unpack(buf: Any) -> Any:
    """msgpack -> Python with the engine's ext rules (pickles refused)."""
    try:
        return ormsgpack.unpackb(buf, ext_hook=_ext_hook, option=_UNPACK_OPTS)
    except ProtocolError:
        raise
    except ormsgpack.MsgpackDecodeError as e:
        refused, _ext_state.refused = _ext_state.refused, None
        if refused is not None:
            raise refused from None
        raise ProtocolError(f"malformed msgpack from engine: {e}") from e


def _frame_buffer(frame: Any) -> Any:
    """bytes / memoryview as is; a zmq.Frame's zero-copy buffer."""
    if isinstance(frame, (bytes, bytearray, memoryview)):
        return frame
    return frame.buffer


# numpy dtype.str (ndarrays) and torch dtype names (tensors) -> struct format.
_DTYPE_FORMATS = {
    "int8": "b", "|i1": "b", "uint8": "B", "|u1": "B", "bool": "?", "|b1": "?",
    "int16": "h", "<i2": "h", "int32": "i", "<i4": "i", "int64": "q", "<i8": "q",
    "uint16": "H", "<u2": "H", "uint32": "I", "<u4": "I", "uint64": "Q", "<u8": "Q",
    "float32": "f", "<f4": "f", "float64": "d", "<f8": "d", "float16": "e", "<f2": "e",
}
_NATIVE_LITTLE = sys.byteorder == "little"


def _nest(flat: list, shape: Sequence[int]) -> list:
    if len(shape) <= 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _array_parts(arr: Any, frames: Sequence[Any], what: str) -> tuple[Any, Any, Any]:
    """An encoded tensor `[dtype, shape, data]` (`what` names it in errors) as its three parts,
    `data` an aux frame's buffer where it is an index into `frames` (frame 0 being the payload
    itself), else as sent (the raw bytes: ext 3, already unwrapped)."""
    if not isinstance(arr, (list, tuple)) or len(arr) != 3:
        raise ProtocolError(f"bad {what} encoding: {type(arr).__name__}")
    dtype, shape, data = arr
    if isinstance(data, int) and not isinstance(data, bool):
        if not 0 < data < len(frames):
            raise ProtocolError(f"{what} refers to missing aux frame {data}")
        data = _frame_buffer(frames[data])
    elif isinstance(data, dict):
        raise ProtocolError("out-of-band tensor references are not supported")
    return dtype, shape, data


def decode_array(arr: Any, frames: Sequence[Any]) -> list:
    """`[dtype, shape, data]` -> nested Python lists.

    `data` is the raw bytes (ext 3, already unwrapped) or an index into `frames`
    (frame 0 being the payload itself).
    """
    dtype, shape, data = _array_parts(arr, frames, "array")
    shape = [int(d) for d in shape]
    count = math.prod(shape)
    if count == 0:
        return _nest([], shape) if len(shape) <= 1 else [[] for _ in range(shape[0])]
    if dtype == "bfloat16":
        raw = struct.unpack(f"<{count}H", data)
        flat = list(struct.unpack(f"<{count}f", struct.pack(f"<{count}I", *(v << 16 for v in raw))))
        return _nest(flat, shape)
    fmt = _DTYPE_FORMATS.get(dtype)
    if fmt is None:
        raise ProtocolError(f"unsupported array dtype {dtype!r}")
    if _NATIVE_LITTLE and fmt != "e":
        mv = memoryview(data).cast("B")
        if mv.nbytes != count * struct.calcsize(fmt):
            raise ProtocolError(f"array of shape {shape} {dtype} has {mv.nbytes} bytes")
        return mv.cast(fmt, shape).tolist()
    try:
        flat = list(struct.unpack(f"<{count}{fmt}", data))
    except struct.error as e:
        raise ProtocolError(f"bad array data: {e}") from e
    return _nest(flat, shape)


def _decode_logprobs(lp: Any, frames: Sequence[Any]) -> Logprobs | None:
    """LogprobsLists `[token_ids [P,K+1], logprobs [P,K+1], ranks [P], cu]`."""
    if lp is None:
        return None
    if not isinstance(lp, (list, tuple)) or len(lp) < 3:
        raise ProtocolError("bad new_logprobs encoding")
    token_ids = decode_array(lp[0], frames)
    logprobs = decode_array(lp[1], frames)
    ranks = decode_array(lp[2], frames)
    return Logprobs(token_ids=token_ids, logprobs=logprobs, sampled_ranks=ranks)


def decode_pooled(arr: Any, frames: Sequence[Any]) -> PooledTensor:
    """A pooling output tensor `[dtype, shape, data]` -> `PooledTensor` over the received
    bytes: an aux frame's buffer (no copy) or the inline ext-3 bytes."""
    dtype, shape, data = _array_parts(arr, frames, "pooling output")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError("out-of-band tensor references are not supported")
    if dtype != "bfloat16" and dtype not in _NUMPY_DTYPES:
        raise ProtocolError(f"unsupported pooling output dtype {dtype!r}")
    shape = tuple(int(d) for d in shape)
    count = math.prod(shape)
    itemsize = 2 if dtype == "bfloat16" else struct.calcsize(_DTYPE_FORMATS[dtype])
    if memoryview(data).nbytes != count * itemsize:
        raise ProtocolError(f"pooling output of shape {shape} {dtype} has {memoryview(data).nbytes} bytes")
    return PooledTensor(dtype, shape, data)


def _error_text(err: Any) -> str | None:
    if err is None or isinstance(err, str):
        return err
    if isinstance(err, dict):
        msg = err.get("message") or err.get("msg")
        if isinstance(msg, str):
            return msg
    return str(err)


_EVENTS_INDEX = 7  # `events` in every supported layout (0.32, 0.33)
_KV_TRANSFER_INDEX = 8  # `kv_transfer_params`, likewise
_MM_CACHE_MISS_INDEX = 14  # `mm_cache_miss_hashes`, likewise
_EVENT_QUEUED, _EVENT_SCHEDULED, _EVENT_PREEMPTED = 1, 2, 3  # EngineCoreEventType


def _read_events(out: EngineOutput, events: Any) -> None:
    """The request's engine events (`EngineCoreEvent`s, {type, timestamp} maps, engine clock)
    onto `out`: `queue_time` (SCHEDULED - QUEUED) and `scheduled_at` from the first of each
    (later SCHEDULED events are resumptions after a preemption, which vLLM ignores there), and
    `preemptions`, the PREEMPTED events."""
    queued = scheduled = None
    preempted = 0
    for e in events if isinstance(events, (list, tuple)) else ():
        if not isinstance(e, dict):
            continue
        kind, ts = e.get("type"), e.get("timestamp")
        if kind == _EVENT_QUEUED and queued is None:
            queued = ts
        elif kind == _EVENT_SCHEDULED and scheduled is None:
            scheduled = ts
        elif kind == _EVENT_PREEMPTED:
            preempted += 1
    if isinstance(scheduled, (int, float)):
        out.scheduled_at = scheduled
        if isinstance(queued, (int, float)):
            out.queue_time = max(0.0, scheduled - queued)
    if preempted:
        out.preemptions = preempted


def plain_running(o: list, error_index: int | None) -> bool:
    """An output written at full length (no trailing defaults omitted) that carries nothing
    but the request id and new token ids: no logprobs, pooling output, finish, events, prefill
    stats or error. `_decode_output` would build the same `EngineOutput(id, ids)`."""
    n = len(o)
    return (n > 11 and o[2] is None and o[3] is None and o[4] is None and o[5] is None
            and o[6] is None and not o[_EVENTS_INDEX] and o[11] is None
            and (error_index is None or n <= error_index or o[error_index] is None))


def _decode_output(o: Any, frames: Sequence[Any], error_index: int | None) -> EngineOutput:
    if not isinstance(o, (list, tuple)) or len(o) < 2:
        raise ProtocolError("bad EngineCoreOutput encoding")
    n = len(o)
    out = EngineOutput(o[0], o[1])
    if n > 2:
        if o[2] is not None:
            out.new_logprobs = _decode_logprobs(o[2], frames)
        if n > 3 and o[3] is not None:
            out.new_prompt_logprobs = _decode_logprobs(o[3], frames)
        if n > 4 and o[4] is not None:
            out.pooling_output = decode_pooled(o[4], frames)
        if n > 5:
            out.finish_reason = o[5]
            if n > 6:
                out.stop_reason = o[6]
                if n > _EVENTS_INDEX and o[_EVENTS_INDEX]:
                    _read_events(out, o[_EVENTS_INDEX])
                if n > _KV_TRANSFER_INDEX and isinstance(o[_KV_TRANSFER_INDEX], dict):
                    out.kv_transfer_params = o[_KV_TRANSFER_INDEX]
                if n > 11 and o[11] is not None:
                    stats = o[11]
                    if isinstance(stats, dict):
                        out.num_cached_tokens = stats.get("num_cached_tokens")
                        created = stats.get("num_cache_creation_tokens")
                        out.num_cache_creation_tokens = created if type(created) is int else None
                        computed = stats.get("num_computed_tokens")
                        out.num_computed_tokens = computed if type(computed) is int else 0
                if n > _MM_CACHE_MISS_INDEX and o[_MM_CACHE_MISS_INDEX]:
                    out.mm_cache_miss_hashes = [str(h) for h in o[_MM_CACHE_MISS_INDEX]]
                if error_index is not None and n > error_index:
                    out.error = _error_text(o[error_index])
    return out


def _decode_utility(u: Any) -> tuple[int, str | None, Any]:
    if not isinstance(u, (list, tuple)) or not u:
        raise ProtocolError("bad utility_output encoding")
    call_id = u[0]
    failure = u[1] if len(u) > 1 else None
    result = u[2] if len(u) > 2 else None
    # UtilityResult travels as `[type_info, value]`; type_info is only set with
    # insecure serialization, and its value is plain msgpack here either way.
    if isinstance(result, (list, tuple)) and len(result) == 2:
        result = result[1]
    return call_id, failure, result


def decode_message(frames: Sequence[Any], layout: WireLayout = LATEST_LAYOUT) -> tuple[EngineOutputs, Sequence[Any]]:
    """One `EngineCoreOutputs` (`[payload, *aux_frames]`) -> (`EngineOutputs` with every field
    but `outputs`, the raw outputs). A raw output that `is_plain` holds nothing but the request
    id (`o[0]`) and new token ids (`o[1]`); `decode_output` turns any raw output into an
    `EngineOutput`. The engine client walks the raw outputs itself (its per-token path);
    `decode_outputs` decodes them all."""
    if not frames:
        raise ProtocolError("empty output message")
    msg = unpack(_frame_buffer(frames[0]))
    if not isinstance(msg, (list, tuple)):
        raise ProtocolError(f"EngineCoreOutputs must be an array, got {type(msg).__name__}")
    n = len(msg)
    raw_outputs = msg[1] if n > 1 and msg[1] is not None else ()
    if not isinstance(raw_outputs, (list, tuple)):
        raise ProtocolError(f"EngineCoreOutputs.outputs must be an array, got {type(raw_outputs).__name__}")
    result = EngineOutputs(engine_index=msg[0] if n > 0 else 0, outputs=[])
    if n > 2:
        result.scheduler_stats = msg[2]
        if n > 3 and msg[3] is not None:
            result.timestamp = msg[3]
        if n > 4 and msg[4] is not None:
            result.utility_output = _decode_utility(msg[4])
        if n > 5 and msg[5] is not None:
            result.finished_requests = list(msg[5])
    return result, raw_outputs


def is_plain(o: Any, layout: WireLayout) -> bool:
    """A raw running output with nothing but request id and new token ids: `[id, ids]` with
    the rest omitted, or written at full length (as vLLM's encoder does) with every later
    field at its default. (The engine client inlines this test.)"""
    return type(o) is list and (len(o) == 2 or o[2:] == layout.plain_tail or plain_running(o, layout.error_index))


def decode_output(o: Any, frames: Sequence[Any], layout: WireLayout = LATEST_LAYOUT) -> EngineOutput:
    """One raw EngineCoreOutput -> `EngineOutput` (aux `frames` for its arrays)."""
    return _decode_output(o, frames, layout.error_index)


def decode_outputs(frames: Sequence[Any], layout: WireLayout = LATEST_LAYOUT) -> EngineOutputs:
    """One `EngineCoreOutputs` (`[payload, *aux_frames]`) -> `EngineOutputs`, every output
    decoded (a plain running one without the general decoder)."""
    result, raw_outputs = decode_message(frames, layout)
    result.outputs = [EngineOutput(o[0], o[1]) if is_plain(o, layout) else _decode_output(o, frames, layout.error_index)
                      for o in raw_outputs]
    return result


def is_engine_dead(frames: Sequence[Any]) -> bool:
    """The engine's last word: a single frame `b"ENGINE_CORE_DEAD"`."""
    if len(frames) != 1:
        return False
    buf = _frame_buffer(frames[0])
    return len(buf) == len(ENGINE_CORE_DEAD) and bytes(buf) == ENGINE_CORE_DEAD


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return v


def decode_ready(payload: Any, engine_index: int | None = None) -> EngineInfo:
    """The engine's ready response (a map) -> `EngineInfo`.

    `engine_index` (from the sender's identity) wins over the payload's
    `data_parallel_rank`, which is the same number in vLLM.
    """
    msg = unpack(_frame_buffer(payload))
    if not isinstance(msg, dict):
        raise ProtocolError(f"ready response must be a map, got {type(msg).__name__}")
    try:
        max_model_len = int(msg["max_model_len"])
        version = str(msg.get("vllm_version") or "")
    except (KeyError, TypeError, ValueError) as e:
        raise ProtocolError(f"ready response lacks max_model_len: {msg!r}") from e
    if engine_index is None:
        engine_index = int(msg.get("data_parallel_rank") or 0)
    max_num_seqs = msg.get("max_num_seqs")
    return EngineInfo(
        engine_index=engine_index,
        max_model_len=max_model_len,
        vllm_version=version,
        max_num_seqs=int(max_num_seqs) if isinstance(max_num_seqs, int) else None,
        raw=_jsonable(msg),
    )


def engine_identity(engine_index: int) -> bytes:
    """The ZMQ identity vLLM gives engine `engine_index` (2 bytes, little endian)."""
    return engine_index.to_bytes(2, "little")
