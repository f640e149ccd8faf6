"""`SubscribeKvEvents`: every engine's KV cache events as one gRPC stream, as smg expects it.

One call subscribes to each DP rank's ZMQ publisher (engine/kv_events.py has the wire) and
streams each batch as a `KvEventBatch` under that rank's own sequence number with `dp_rank`
set: the gateway keeps one cursor per rank. A gap in a rank's numbers is filled from the
rank's replay socket before anything later of that rank is sent; a gap that cannot be filled
and a publisher that starts over (its engine restarted) end the stream with DATA_LOSS, which
the gateway answers by clearing what it knows of this server and subscribing again. A non-zero
`start_sequence_number` is refused with OUT_OF_RANGE: nothing is kept between calls.

Block hashes go out as int64: vLLM's unsigned 64-bit hash as its two's complement, a raw
digest folded to its last eight bytes (the integer vLLM sends for it by default). Blocks of
another KV cache group than full attention (a hybrid model's sliding-window layers) are left
out, as smg's own relay leaves them out.
"""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator

import grpc
import zmq
import zmq.asyncio
from smg_grpc_proto.generated import common_pb2

from vllm_pyfrontend.engine.kv_events import (END_SEQ, AllBlocksCleared, BlockRemoved, BlockStored,
                                              EventSource, decode_batch)

log = logging.getLogger(__name__)

REPLAY_TIMEOUT = 2.0
_TIERS = {"GPU": common_pb2.KV_CACHE_TIER_DEVICE, "CPU": common_pb2.KV_CACHE_TIER_HOST,
          "STORAGE": common_pb2.KV_CACHE_TIER_DISK}


def to_int64(value: int | bytes) -> int:
    if isinstance(value, (bytes, bytearray)):
        value = int.from_bytes(value[-8:], "big")
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


class _Lost(Exception):
    """A rank's stream cannot be continued without a gap (the gateway must resynchronize)."""


def convert(batch, seq: int, rank: int, event_id: int) -> tuple[common_pb2.KvEventBatch, int]:
    out = common_pb2.KvEventBatch(sequence_number=seq, timestamp=batch.ts, dp_rank=rank)
    for ev in batch.events:
        event_id += 1
        if type(ev) is BlockStored:
            bs = ev.block_size
            if bs <= 0 or len(ev.token_ids) != len(ev.block_hashes) * bs or ev.kv_cache_spec_sliding_window:
                continue
            stored = common_pb2.KvBlocksStored(blocks=[
                common_pb2.KvBlock(block_hash=to_int64(h), token_ids=ev.token_ids[i * bs:(i + 1) * bs], block_size=bs)
                for i, h in enumerate(ev.block_hashes)])
            if ev.parent_block_hash is not None:
                stored.parent_block_hash = to_int64(ev.parent_block_hash)
            if ev.medium:
                stored.medium = ev.medium
                if ev.medium in _TIERS:
                    stored.tier = _TIERS[ev.medium]
            if ev.group_idx is not None:
                stored.group_idx = ev.group_idx
            out.events.append(common_pb2.KvCacheEvent(event_id=event_id, stored=stored))
        elif type(ev) is BlockRemoved:
            removed = common_pb2.KvBlocksRemoved(block_hashes=[to_int64(h) for h in ev.block_hashes])
            if ev.medium:
                removed.medium = ev.medium
                if ev.medium in _TIERS:
                    removed.tier = _TIERS[ev.medium]
            out.events.append(common_pb2.KvCacheEvent(event_id=event_id, removed=removed))
        elif type(ev) is AllBlocksCleared:
            out.events.append(common_pb2.KvCacheEvent(event_id=event_id, cleared=common_pb2.KvCacheCleared()))
    return out, event_id


async def relay(sources: list[EventSource], start_sequence_number: int, context) -> AsyncIterator:
    """The stream of one `SubscribeKvEvents` call."""
    if start_sequence_number:
        await context.abort(grpc.StatusCode.OUT_OF_RANGE,
                            f"start_sequence_number {start_sequence_number}: this server keeps no KV event "
                            "history between calls; subscribe from 0")
    ctx = zmq.asyncio.Context()
    queue: asyncio.Queue = asyncio.Queue()
    tasks = [asyncio.get_running_loop().create_task(_follow(ctx, src, queue)) for src in sources]
    await context.send_initial_metadata(())
    event_id = 0
    try:
        while True:
            item = await queue.get()
            if isinstance(item, _Lost):
                await context.abort(grpc.StatusCode.DATA_LOSS, str(item))
            seq, rank, payload = item
            try:
                batch = decode_batch(payload)
            except Exception as e:  # noqa: BLE001 - relayed empty, so the gateway sees no gap
                log.warning("KV events of engine %d: batch %d undecodable: %s", rank, seq, e)
                yield common_pb2.KvEventBatch(sequence_number=seq, dp_rank=rank)
                continue
            out, event_id = convert(batch, seq, rank, event_id)
            yield out
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        ctx.destroy(linger=0)


async def _follow(ctx: zmq.asyncio.Context, src: EventSource, queue: asyncio.Queue) -> None:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, src.topic.encode())
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.connect(src.endpoint)
    expected: int | None = None
    try:
        while True:
            frames = await sub.recv_multipart()
            if len(frames) < 3:
                continue
            seq = int.from_bytes(frames[1], "big")
            if expected is not None and seq != expected:
                if seq < expected:
                    raise _Lost(f"the KV event publisher of engine {src.rank} started over at {seq} "
                                f"(expected {expected}): the engine restarted")
                for replayed in await _replay(ctx, src, expected, seq):
                    queue.put_nowait(replayed)
            queue.put_nowait((seq, src.rank, frames[2]))
            expected = seq + 1
    except _Lost as lost:
        queue.put_nowait(lost)
    finally:
        sub.close(linger=0)


async def _replay(ctx: zmq.asyncio.Context, src: EventSource, start: int, end: int) -> list:
    """Batches [start, end) of a rank from its replay socket, or _Lost."""
    if src.replay_endpoint is None:
        raise _Lost(f"KV event batches {start}-{end - 1} of engine {src.rank} were lost (no replay endpoint)")
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(src.replay_endpoint)
    got = []
    try:
        await sock.send_multipart([b"", start.to_bytes(8, "big")])
        while True:
            async with asyncio.timeout(REPLAY_TIMEOUT):  # (a cancel is never lost, unlike `wait_for`'s on 3.11)
                frames = await sock.recv_multipart()
            if len(frames) < 4 or frames[2] == END_SEQ:
                break
            seq = int.from_bytes(frames[2], "big")
            if seq < end:
                got.append((seq, src.rank, frames[3]))
    except asyncio.TimeoutError:
        raise _Lost(f"KV event replay of engine {src.rank} from {start} timed out") from None
    finally:
        sock.close(linger=0)
    if not got or got[0][0] != start or got[-1][0] != end - 1:
        raise _Lost(f"KV event batches {start}-{end - 1} of engine {src.rank} are no longer held for replay")
    return got
