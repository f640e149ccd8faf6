"""vLLM's KV cache events: the publisher's configuration and its wire format.

With `--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", ...}'` every
EngineCore publishes, after each step that changed its prefix cache, one `KVEventBatch` on a
ZMQ PUB socket: frames `[topic, sequence number (8 bytes big-endian), msgpack payload]`, the
number counting from 0 per publisher. With a `replay_endpoint` a ROUTER serves the last
`buffer_steps` batches again: a DEALER/REQ sends `[b"", start (8 bytes big-endian)]` and gets
`[b"", topic, seq, payload]` for every buffered batch from `start` on, then `[b"", b"",
-1 (8 bytes, signed), b""]`. A data parallel rank `r` binds its endpoints at the configured
port + r (vllm/distributed/kv_events.py `offset_endpoint_port`; port 0 and ipc paths aside).

The structs below are vLLM 0.32's (`EventBatch`, `BlockStored`, `BlockRemoved`,
`AllBlocksCleared`) field for field, so that msgspec encodes them to the same bytes: the batch
is an array `[ts, events, data_parallel_rank]`, each event a map tagged `"type": "<class>"`,
defaults omitted. The simulated engine publishes with them; the subscribers decode with them.
A block hash is an unsigned 64-bit int (vLLM's default, `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`)
or the raw digest bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Union

import msgspec

BlockHash = Union[int, bytes]

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """One event; encoded as a map with `"type"` first."""


class BlockStored(KVCacheEvent):
    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[BlockHash]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]
    data_parallel_rank: int | None = None


decode_batch = msgspec.msgpack.Decoder(KVEventBatch).decode
encode_batch = msgspec.msgpack.Encoder().encode


@dataclass(frozen=True)
class EventSource:
    """Where one engine (DP rank) publishes: the PUB endpoint to connect to, and its replay
    ROUTER (None: no replay)."""

    rank: int
    endpoint: str
    replay_endpoint: str | None
    topic: str


@dataclass(frozen=True)
class KvEventsConfig:
    """The part of vLLM's `KVEventsConfig` a subscriber needs (same names, same defaults)."""

    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    topic: str = ""
    buffer_steps: int = 10_000

    @classmethod
    def parse(cls, text: str | dict | None) -> KvEventsConfig | None:
        """vLLM's `--kv-events-config` value (JSON); None when events are off or not published
        over ZMQ (vLLM's rule: the publisher defaults to "zmq" when events are enabled)."""
        if text is None:
            return None
        d = json.loads(text) if isinstance(text, str) else dict(text)
        if not isinstance(d, dict) or not d.get("enable_kv_cache_events"):
            return None
        if (d.get("publisher") or "zmq") != "zmq":
            return None
        return cls(endpoint=str(d.get("endpoint") or "tcp://*:5557"),
                   replay_endpoint=d.get("replay_endpoint") or None,
                   topic=str(d.get("topic") or ""),
                   buffer_steps=int(d.get("buffer_steps") or 10_000))

    @classmethod
    def from_engine_args(cls, engine_args: Iterable[str]) -> KvEventsConfig | None:
        """The config in the engine's `vllm serve` flags (`--kv-events-config X` or `=X`)."""
        args = list(engine_args)
        for i, token in enumerate(args):
            if token == "--kv-events-config" and i + 1 < len(args):
                return cls.parse(args[i + 1])
            if token.startswith("--kv-events-config="):
                return cls.parse(token.split("=", 1)[1])
        return None

    def sources(self, ranks: Iterable[int], host: str = "127.0.0.1") -> list[EventSource]:
        """Each rank's endpoints as a subscriber connects to them: the rank's port offset, and a
        bind wildcard replaced by `host` (where the engines run)."""
        return [EventSource(rank, connectable(offset_endpoint(self.endpoint, rank), host),
                            connectable(offset_endpoint(self.replay_endpoint, rank), host)
                            if self.replay_endpoint else None, self.topic)
                for rank in ranks]

    def describe(self, ranks: Iterable[int], host: str = "127.0.0.1") -> list[dict[str, Any]]:
        """`GET /kv_event_sources`: one entry per rank, as vLLM serves it."""
        return [{"data_parallel_rank": s.rank, "endpoint": s.endpoint, "replay_endpoint": s.replay_endpoint,
                 "topic": s.topic} for s in self.sources(ranks, host)]


def offset_endpoint(endpoint: str | None, rank: int) -> str | None:
    """vLLM's `ZmqEventPublisher.offset_endpoint_port`: tcp port + rank (port 0 stays 0),
    inproc name + `_dp<rank>`, rank 0 unchanged."""
    if not endpoint or rank == 0:
        return endpoint
    if "inproc" in endpoint:
        return f"{endpoint}_dp{rank}"
    if "tcp" in endpoint and ":" in endpoint:
        base, _, port = endpoint.rpartition(":")
        if int(port) == 0:
            return endpoint
        return f"{base}:{int(port) + rank}"
    return endpoint


def connectable(endpoint: str | None, host: str) -> str | None:
    """A bound endpoint as a peer connects to it: `*`, `0.0.0.0` and `[::]` name `host`."""
    if endpoint is None:
        return None
    for wildcard in ("*", "0.0.0.0", "[::]"):
        endpoint = endpoint.replace(f"//{wildcard}:", f"//{host}:")
    return endpoint

