"""Typed values that cross the engine layer's boundary.

Everything above `frontend/engine` speaks these dataclasses; everything below speaks
msgpack frames (see `wire.py`). Field meanings follow vLLM's `vllm/v1/engine/__init__.py`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol

# vLLM's FinishReason (IntEnum on the wire).
FINISH_STOP = 0
FINISH_LENGTH = 1
FINISH_ABORT = 2
FINISH_ERROR = 3
FINISH_REPETITION = 4
FINISH_REASON_NAMES = {0: "stop", 1: "length", 2: "abort", 3: "error", 4: "repetition"}


class InvalidEngineRequest(ValueError):
    """A request that must not reach the engine. `param` names the offending field."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


class FailureKind(enum.Enum):
    """Why a request ended without a result. The layers above decide what each means to
    their client (e.g. the HTTP server: 503 for the first three, 500 for the others)."""

    ENGINE_DEAD = "engine_dead"  # ENGINE_CORE_DEAD, the supervisor's word, garbage on the wire
    ENGINE_STALLED = "engine_stalled"  # no output or probe reply within the request deadline
    SHUTTING_DOWN = "shutting_down"  # this client is closing
    REQUEST_FAILED = "request_failed"  # the engine finished this request with an error
    INTERNAL = "internal"  # our own pipeline raised on one of this request's outputs

    @property
    def engine_unavailable(self) -> bool:
        """The request failed because no engine can serve it now (not because of itself)."""
        return self in (FailureKind.ENGINE_DEAD, FailureKind.ENGINE_STALLED, FailureKind.SHUTTING_DOWN)


@dataclass(frozen=True, slots=True)
class Failure:
    kind: FailureKind
    message: str


class EngineDeadError(RuntimeError):
    """No engine can take a request now (dead, stalled, closed or not connected)."""

    def __init__(self, message: str, kind: FailureKind = FailureKind.ENGINE_DEAD):
        super().__init__(message)
        self.failure = Failure(kind, message)


@dataclass(slots=True)
class EngineRequest:
    """One ADD request, already lowered to the engine's vocabulary.

    `sampling_params` is the engine's map keyed by SamplingParams field name
    (`temperature`, `max_tokens`, `_eos_token_id`, `_all_stop_token_ids`, ...).
    """

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: dict[str, Any] | None
    arrival_time: float
    client_index: int = 0
    external_req_id: str | None = None
    priority: int = 0
    cache_salt: str | None = None
    data_parallel_rank: int | None = None
    trace_headers: dict[str, str] | None = None
    # vLLM's LoRARequest as its positional array (frontend/llm/lora.py builds it), or None.
    lora_request: list[Any] | None = None
    # A pooling request (embed, classify, ...) carries vLLM's `PoolingParams` instead of
    # sampling params: a positional array (`array_like` struct), see llm/pooling.py.
    pooling_params: list[Any] | None = None
    # Multimodal items (frontend/multimodal): `mm_features` as vLLM encodes its
    # MultiModalFeatureSpec list, and the out-of-band tensor buffers it refers to by frame
    # index (sent after the payload, frame 1 onwards).
    mm_features: list[Any] | None = None
    aux_frames: list[Any] | None = None


@dataclass(slots=True)
class PooledTensor:
    """A pooling output as the engine sent it: dtype name, shape and the raw little-endian
    bytes, a view into the received frame where the engine sent it out of band (no copy)."""

    dtype: str
    shape: tuple[int, ...]
    data: Any  # bytes or memoryview

    def array(self):
        """The tensor as a numpy array over the same bytes (bfloat16 is widened to float32)."""
        import numpy as np

        if self.dtype == "bfloat16":
            raw = np.frombuffer(self.data, dtype="<u2").astype(np.uint32) << 16
            return raw.view(np.float32).reshape(self.shape)
        return np.frombuffer(self.data, dtype=_NUMPY_DTYPES[self.dtype]).reshape(self.shape)


# torch dtype names (as vLLM encodes tensors) and numpy dtype strings -> numpy dtypes.
_NUMPY_DTYPES = {
    "float32": "<f4", "float16": "<f2", "float64": "<f8", "int64": "<i8", "int32": "<i4",
    "int16": "<i2", "int8": "i1", "uint8": "u1", "bool": "?",
    "<f4": "<f4", "<f2": "<f2", "<f8": "<f8", "<i8": "<i8", "<i4": "<i4",
}


@dataclass(slots=True)
class Logprobs:
    """Logprobs for the new tokens of one output: row i = position i.

    `token_ids[i][0]` / `logprobs[i][0]` are the sampled token; the rest are the top-k.
    """

    token_ids: list[list[int]]
    logprobs: list[list[float]]
    sampled_ranks: list[int]

    def head(self, n: int) -> "Logprobs":
        """The rows of the first n positions."""
        return Logprobs(self.token_ids[:n], self.logprobs[:n], self.sampled_ranks[:n])

    def then(self, after: "Logprobs | None") -> "Logprobs":
        """These rows followed by `after`'s (a new object; None: a copy of these)."""
        if after is None:
            return Logprobs(list(self.token_ids), list(self.logprobs), list(self.sampled_ranks))
        return Logprobs(self.token_ids + after.token_ids, self.logprobs + after.logprobs,
                        self.sampled_ranks + after.sampled_ranks)


@dataclass(slots=True)
class EngineOutput:
    request_id: str
    new_token_ids: list[int]
    finish_reason: int | None = None
    stop_reason: int | str | None = None
    new_logprobs: Logprobs | None = None
    # Rows for prompt positions 1.. (column 0: the prompt token), in one or more chunks.
    new_prompt_logprobs: Logprobs | None = None
    num_cached_tokens: int | None = None
    # Prompt tokens computed and written to the prefix cache (`prefill_stats`'
    # num_cache_creation_tokens, with the first output); None when the output has none.
    num_cache_creation_tokens: int | None = None
    error: str | None = None
    # Seconds between the engine's QUEUED and SCHEDULED events (vLLM's queue time), when it
    # sends events (stats logging on).
    queue_time: float | None = None
    # The engine's clock (time.monotonic() in the engine process) at its first SCHEDULED event,
    # and the number of PREEMPTED events this output carries (events: stats logging on).
    scheduled_at: float | None = None
    preemptions: int = 0
    # The prompt tokens the engine computed for this request (its `prefill_stats`, sent with
    # the first output: the prompt less the cached tokens); None when the output has none.
    num_computed_tokens: int | None = None
    # The engine's clock when it sent the step that carried this output (`EngineCoreOutputs.
    # timestamp`); set on delivery, for every output but the plain token steps.
    engine_time: float | None = None
    pooling_output: PooledTensor | None = None  # the final output of a pooling request
    # vLLM's mm_cache_miss_hashes: items sent by hash only that the engine's processor cache
    # no longer held (the request failed; frontend/multimodal sends them in full next time).
    mm_cache_miss_hashes: list[str] | None = None
    # What the engine's KV connector says about this request's KV cache, with its final output
    # (vLLM's kv_transfer_params: a prefill engine's answer to a request for remote decode
    # names where a decode engine reads the prompt's KV; engine/disaggregation.py).
    kv_transfer_params: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class EngineOutputs:
    """One decoded `EngineCoreOutputs` batch (one engine step)."""

    engine_index: int
    outputs: list[EngineOutput]
    scheduler_stats: dict[str, Any] | None = None
    timestamp: float = 0.0
    utility_output: tuple[int, str | None, Any] | None = None
    finished_requests: list[str] | None = None


@dataclass(slots=True)
class EngineInfo:
    """The engine's ready response (sent on each input socket after the handshake)."""

    engine_index: int
    max_model_len: int
    vllm_version: str
    max_num_seqs: int | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "engine_index": self.engine_index,
            "max_model_len": self.max_model_len,
            "vllm_version": self.vllm_version,
            "max_num_seqs": self.max_num_seqs,
            "raw": self.raw,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "EngineInfo":
        return cls(
            engine_index=d["engine_index"],
            max_model_len=d["max_model_len"],
            vllm_version=d["vllm_version"],
            max_num_seqs=d.get("max_num_seqs"),
            raw=d.get("raw") or {},
        )


class OutputSink(Protocol):
    """Receives the outputs of one request, pushed synchronously from the output loop."""

    def on_output(self, output: EngineOutput) -> None: ...

    # Optional: `on_tokens(new_token_ids)` for a running output that carries nothing but new
    # token ids (the common step), the same as `on_output(EngineOutput(request_id, ids))`
    # without building the output. The engine client calls it when the sink has it.

    def on_failure(self, failure: Failure) -> None:
        """The request ends without a result (its outputs stop here, nothing more comes).

        Called even after a final output when the pipeline raised on that output
        (`FailureKind.INTERNAL`): the layer above must still end its request."""
        ...
