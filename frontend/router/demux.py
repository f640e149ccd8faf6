"""Split one `EngineCoreOutputs` message into one message per worker (the router's hot path).

vLLM gives the drop-in frontend a single engine client slot, so every output of every worker's
requests arrives on one PULL socket. Each engine request id carries the index of the worker
that made it (`vllm_pyfrontend.llm.request_ids`), so the owner of an output is read off its id: no
table of in-flight requests, nothing to clean up when a request ends.

The batch is never fully decoded. msgspec decodes the outer array into `Raw` spans (one per
field) and the outputs array into `Raw` spans plus just the request ids; a worker's message is
then rebuilt by concatenating spans behind a new msgpack array header. Every other byte,
including logprobs tensors and their aux frames, travels unchanged. When all outputs of a batch
belong to one worker (one busy worker, or a batch of one) the original frames are forwarded
as they are.

Field routing: `outputs` and `finished_requests` by request id; `utility_output` to the worker
that made the call (remembered when its UTILITY request passed through); `scheduler_stats` to
exactly one worker (vLLM also sends it to one client per step, and its prefix-cache counters are
per-step deltas that must not be counted twice); `engine_index`, `timestamp` and the remaining
fields to every recipient. `ENGINE_CORE_DEAD` goes to every worker.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import msgspec

from vllm_pyfrontend.llm.request_ids import worker_of

log = logging.getLogger(__name__)

ENGINE_CORE_DEAD = b"ENGINE_CORE_DEAD"
_NIL = b"\xc0"

# EngineCoreOutputs field positions (0.32/0.33; see PROTOCOL.md).
_OUTPUTS, _STATS, _UTILITY, _FINISHED = 1, 2, 4, 5
_OWNER_CACHE_SIZE = 1 << 16


class _OutputHead(msgspec.Struct, array_like=True, gc=False):
    """The first field of an EngineCoreOutput; msgspec skips the rest in C."""

    request_id: str


class _UtilityRequestHead(msgspec.Struct, array_like=True):
    """UTILITY request payload `[client_index, call_id, method, args]`: who waits for the answer."""

    client_index: int
    call_id: int


class _UtilityOutputHead(msgspec.Struct, array_like=True):
    """`utility_output` = `[call_id, failure, result]`."""

    call_id: int


_raw_array = msgspec.msgpack.Decoder(list[msgspec.Raw])
_heads = msgspec.msgpack.Decoder(list[_OutputHead])
_str_array = msgspec.msgpack.Decoder(list[str])
_utility_request = msgspec.msgpack.Decoder(_UtilityRequestHead)
_utility_output = msgspec.msgpack.Decoder(_UtilityOutputHead)
_encode = msgspec.msgpack.encode


def _buffer(frame: Any) -> Any:
    """The bytes of a frame: a zmq.Frame (copy=False) exposes `.buffer`, bytes are themselves."""
    return frame.buffer if hasattr(frame, "buffer") else frame


def _is_nil(raw: msgspec.Raw) -> bool:
    return len(raw) == 1 and bytes(raw) == _NIL


def array_header(n: int) -> bytes:
    """msgpack array header for `n` elements."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _pack(spans: Sequence[Any]) -> bytes:
    """A msgpack array whose elements are already-encoded spans."""
    return array_header(len(spans)) + b"".join(spans)


class BatchSplitter:
    """Turns an engine output message into `(worker_index, frames)` pairs to send.

    State: the owners of pending utility calls, and the rotation that spreads the engine's
    scheduler stats over the workers.
    """

    def __init__(self, num_workers: int):
        if num_workers < 1:
            raise ValueError("num_workers must be >= 1")
        self.num_workers = num_workers
        self._utility_owner: dict[int, int] = {}
        self._stats_turn = 0
        self.dropped_outputs = 0  # outputs whose id names no worker of ours
        # request id -> worker: an id recurs in every step of its request, so parse it once.
        # Cleared wholesale when full (a re-parse is cheap); no bookkeeping per request.
        self._owner_cache: dict[str, int | None] = {}

    # ---------------------------------------------------------------- requests (worker -> engine)

    def note_utility_call(self, worker: int, payload: Any) -> None:
        """Remember who made a UTILITY call, so its answer goes back there."""
        try:
            head = _utility_request.decode(_buffer(payload))
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            log.warning("worker %d sent an undecodable utility call: %s", worker, e)
            return
        self._utility_owner[head.call_id] = worker

    @property
    def pending_utility_calls(self) -> int:
        return len(self._utility_owner)

    # ---------------------------------------------------------------- outputs (engine -> workers)

    def split(self, frames: Sequence[Any]) -> list[tuple[int, list[Any]]]:
        """The messages to send for one engine message: `[(worker, frames), ...]`."""
        if self.num_workers == 1:
            return [(0, list(frames))]  # the only worker reads everything, as from the engine
        buf = _buffer(frames[0])
        if len(frames) == 1 and len(buf) == len(ENGINE_CORE_DEAD) and bytes(buf) == ENGINE_CORE_DEAD:
            return [(w, list(frames)) for w in range(self.num_workers)]
        fields = _raw_array.decode(buf)
        n = len(fields)

        # Outputs, grouped by owner.
        groups: dict[int, list[msgspec.Raw]] = {}
        spans: list[msgspec.Raw] = []
        if n > _OUTPUTS and not _is_nil(fields[_OUTPUTS]):
            spans = _raw_array.decode(fields[_OUTPUTS])
            if spans:
                heads = _heads.decode(fields[_OUTPUTS])
                owners = self._owner_cache
                for head, span in zip(heads, spans):
                    rid = head.request_id
                    w = owners.get(rid, -1)
                    if w == -1:
                        w = self._owner(rid)
                    if w is None:
                        self._drop(rid)
                        continue
                    group = groups.get(w)
                    if group is None:
                        groups[w] = [span]
                    else:
                        group.append(span)

        utility_worker: int | None = None
        if n > _UTILITY and not _is_nil(fields[_UTILITY]):
            utility_worker = self._utility_target(fields[_UTILITY])

        finished: dict[int, list[str]] | None = None
        if n > _FINISHED and not _is_nil(fields[_FINISHED]):
            finished = {}
            for rid in _str_array.decode(fields[_FINISHED]):
                w = worker_of(rid)
                if w is not None and w < self.num_workers:
                    finished.setdefault(w, []).append(rid)

        has_stats = n > _STATS and not _is_nil(fields[_STATS])
        targets = set(groups)
        if utility_worker is not None:
            targets.add(utility_worker)
        if finished:
            targets.update(finished)
        if not targets:
            if has_stats:
                targets.add(self._next_stats_worker())
            else:
                # Nothing addressed to anyone (e.g. a wave notice): everybody may read it.
                return [(w, list(frames)) for w in range(self.num_workers)]

        if len(targets) == 1 and len(groups) <= 1 and len(spans) == sum(map(len, groups.values())):
            # One recipient and nothing dropped: forward the message as it came.
            (only,) = targets
            return [(only, list(frames))]

        stats_worker = self._pick_stats_worker(targets) if has_stats else None
        aux = list(frames[1:])
        messages: list[tuple[int, list[Any]]] = []
        for w in sorted(targets):
            own = list(fields)
            if n > _OUTPUTS:
                group = groups.get(w)
                own[_OUTPUTS] = msgspec.Raw(_pack(group)) if group else msgspec.Raw(b"\x90")
            if has_stats and w != stats_worker:
                own[_STATS] = msgspec.Raw(_NIL)
            if utility_worker is not None and w != utility_worker:
                own[_UTILITY] = msgspec.Raw(_NIL)
            if finished is not None:
                mine = finished.get(w)
                own[_FINISHED] = msgspec.Raw(_encode(mine)) if mine else msgspec.Raw(_NIL)
            messages.append((w, [_pack(own), *aux]))
        return messages

    def _owner(self, request_id: str) -> int | None:
        w = worker_of(request_id)
        if w is not None and w >= self.num_workers:
            w = None
        if len(self._owner_cache) >= _OWNER_CACHE_SIZE:
            self._owner_cache.clear()
        self._owner_cache[request_id] = w
        return w

    def _utility_target(self, raw: msgspec.Raw) -> int | None:
        try:
            call_id = _utility_output.decode(raw).call_id
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            log.warning("undecodable utility output: %s", e)
            return None
        owner = self._utility_owner.pop(call_id, None)
        if owner is None:
            log.warning("utility answer %d for a call no worker made; dropped", call_id)
        return owner

    def _next_stats_worker(self) -> int:
        w = self._stats_turn % self.num_workers
        self._stats_turn += 1
        return w

    def _pick_stats_worker(self, targets: set[int]) -> int:
        """One recipient of this message gets the stats; rotate so each worker sees fresh ones."""
        w = self._next_stats_worker()
        if w in targets:
            return w
        return min(targets)

    def _drop(self, request_id: str) -> None:
        self.dropped_outputs += 1
        if self.dropped_outputs <= 10 or self.dropped_outputs % 1000 == 0:
            log.warning("output for request %r names no worker of this router; dropped "
                        "(%d so far)", request_id, self.dropped_outputs)
