"""A worker's subscription to every engine's KV events, kept in a `KvIndex`.

Each worker subscribes itself (one SUB socket per engine, on its own event loop) rather than
one process subscribing and sharing the index through shared memory: a batch costs a worker
tens of microseconds to decode and apply (bench/prefix_routing.py measures it), a few
milliseconds of CPU per second per worker at hundreds of batches per second, and the index is
then a plain dict the router reads without locks, copies or a second process to supervise.

Sequence numbers. Each publisher numbers its batches from 0. A batch numbered past the next
one expected means batches were lost (the PUB socket drops at its high-water mark, or this
worker was slow): they are fetched from the publisher's replay socket; if replay is not
configured, does not answer in time, or no longer holds the first missing batch, the engine's
entries are dropped (a BlockRemoved among the lost would otherwise leave a stale hit) and the
index relearns it from the live stream. A publisher whose connection drops (its engine died or
restarted; the SUB socket's monitor says so) and a number below the expected one (a publisher
that started over) drop the engine's entries too. On start, the history the
replay socket still holds is read first (a restarted worker does not start blind); a partial
history is safe, as a block whose store was not seen is only a miss.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Iterable

import zmq
import zmq.asyncio

from .kv_events import END_SEQ, EventSource, decode_batch
from .kv_index import KvIndex

log = logging.getLogger(__name__)

REPLAY_TIMEOUT = 2.0  # seconds for a replay to finish
# Batches a SUB socket holds before it drops new ones (ZMQ's receive high-water mark): a worker
# that falls this far behind loses batches, which is a gap (replayed, or the engine's entries
# dropped), never memory without bound.
RECEIVE_QUEUE = 10_000
RESUBSCRIBE_AFTER = 1.0  # seconds before a subscription that failed starts again


class KvEventSubscriber:
    def __init__(self, index: KvIndex, sources: Iterable[EventSource], replay_timeout: float = REPLAY_TIMEOUT):
        self.index = index
        self.sources = list(sources)
        self.replay_timeout = replay_timeout
        self._ctx = zmq.asyncio.Context()
        self._tasks: list[asyncio.Task] = []
        self._down: set[int] = set()
        # Per engine: the next sequence number expected, and below which a lower number is a
        # replay's duplicate rather than a restart.
        self.expected: dict[int, int | None] = {s.rank: None for s in self.sources}
        self._dup_floor: dict[int, int] = {s.rank: 0 for s in self.sources}
        self.batches = 0
        self.gaps = 0
        self.restarts = 0
        self.disconnects = 0
        self.resubscribes = 0

    def start(self) -> None:
        for src in self.sources:
            self._tasks.append(asyncio.get_running_loop().create_task(self._follow(src)))

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        self._ctx.destroy(linger=0)

    def engines_down(self, down: Iterable[int]) -> None:
        """Engines the client found down: what they held is gone (called by routing while any
        engine is down; an engine is cleared once per outage)."""
        down = set(down)
        for e in down - self._down:
            self.index.clear(e)
        self._down = down

    # ------------------------------------------------------------------ one engine

    async def _follow(self, src: EventSource) -> None:
        """Follow one engine's events for as long as the worker runs: a subscription that fails
        (a bug, a batch this code cannot handle) drops what the index held of the engine and
        starts again from the replay buffer."""
        while True:
            try:
                await self._subscribe(src)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - never blind for good: the engine is relearned
                log.exception("KV events of engine %d: subscription failed; subscribing again", src.rank)
                self.index.clear(src.rank)
                self.expected[src.rank] = None
                self.resubscribes += 1
                await asyncio.sleep(RESUBSCRIBE_AFTER)

    async def _subscribe(self, src: EventSource) -> None:
        sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, src.topic.encode())
        sub.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
        sub.setsockopt(zmq.LINGER, 0)
        monitor = sub.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        watch = asyncio.get_running_loop().create_task(self._watch(src, monitor))
        sub.connect(src.endpoint)
        try:
            if src.replay_endpoint is not None:
                await self._replay(src, 0, initial=True)
            while True:
                frames = await sub.recv_multipart()
                if len(frames) < 3:
                    continue
                seq = int.from_bytes(frames[1], "big")
                await self._on_batch(src, seq, frames[2])
        finally:
            watch.cancel()
            sub.disable_monitor()
            monitor.close(linger=0)
            sub.close(linger=0)

    async def _watch(self, src: EventSource, monitor: zmq.asyncio.Socket) -> None:
        """The publisher's connection dropped: what its engine held is unknown from here on."""
        from zmq.utils.monitor import parse_monitor_message

        while True:
            event = parse_monitor_message(await monitor.recv_multipart())
            if event["event"] == zmq.EVENT_DISCONNECTED:
                log.info("KV events of engine %d: publisher gone; its index is rebuilt", src.rank)
                self.disconnects += 1
                self.index.clear(src.rank)
                self.expected[src.rank] = None

    async def _on_batch(self, src: EventSource, seq: int, payload: bytes) -> None:
        rank = src.rank
        expected = self.expected[rank]
        if expected is not None and seq != expected:
            if seq < expected:
                if seq >= self._dup_floor[rank]:
                    return  # already applied from a replay
                log.info("KV events of engine %d start over at %d (expected %d): engine restarted",
                         rank, seq, expected)
                self.restarts += 1
                self.index.clear(rank)
            else:
                self.gaps += 1
                if src.replay_endpoint is not None and await self._replay(src, expected):
                    if seq < self.expected[rank]:
                        return  # the replay covered this one
                if self.expected[rank] != seq:
                    log.warning("KV events of engine %d: batches from %d to %d lost; its index is rebuilt",
                                rank, self.expected[rank], seq - 1)
                    self.index.clear(rank)
        else:
            self._dup_floor[rank] = seq
        self._apply(rank, seq, payload)

    def _apply(self, rank: int, seq: int, payload: bytes) -> None:
        try:
            self.index.apply(rank, decode_batch(payload).events)
        except Exception as e:  # noqa: BLE001 - one bad batch costs what it held
            log.warning("KV events of engine %d: batch %d not applied (%s: %s); its index is rebuilt",
                        rank, seq, type(e).__name__, e)
            self.index.clear(rank)
        self.expected[rank] = seq + 1
        self.batches += 1

    async def _replay(self, src: EventSource, start: int, initial: bool = False) -> bool:
        """Apply the publisher's buffered batches from `start` on. False when `start` itself
        could not be had or the replay did not finish in time (the caller then drops the
        engine's entries); on start (`initial`) whatever the buffer holds is taken."""
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(src.replay_endpoint)
        try:
            # (In this task, not `asyncio.wait_for`'s own: on Python 3.11 a cancel that lands as
            # the replay finishes is lost there, and `close` then waits for ever on a follower
            # gone back to its socket.)
            async with asyncio.timeout(self.replay_timeout):
                return await self._replay_frames(sock, src.rank, start, initial)
        except TimeoutError:
            if not initial:
                log.warning("KV events of engine %d: replay from %d timed out", src.rank, start)
            return False
        finally:
            sock.close(linger=0)

    async def _replay_frames(self, sock: zmq.asyncio.Socket, rank: int, start: int, initial: bool) -> bool:
        await sock.send_multipart([b"", start.to_bytes(8, "big")])
        first = True
        while True:
            frames = await sock.recv_multipart()
            if len(frames) < 4 or frames[2] == END_SEQ:
                return initial or not first
            seq = int.from_bytes(frames[2], "big")
            if first:
                first = False
                if seq != start and not initial:
                    return False
                self._dup_floor[rank] = seq
            self._apply(rank, seq, frames[3])


def start_prefix_routing(router, engine_indices: list[int], engine_args: list[str], policy: str | None,
                         weight: float, host: str = "127.0.0.1") -> KvEventSubscriber | None:
    """Turn on the prefix-aware policy for `router` (engine/routing.py) when it applies: policy
    "prefix-aware", or no policy given and the engines publish KV events (`--kv-events-config`
    among their flags). Returns the running subscriber (the caller closes it), None when routing
    stays by load alone. Must be called on the worker's event loop."""
    from .kv_events import KvEventsConfig
    from .routing import PrefixRouting

    if policy == "least-load":
        return None
    config = KvEventsConfig.from_engine_args(engine_args)
    if config is None:
        if policy == "prefix-aware":
            log.warning("--routing-policy prefix-aware needs the engines' KV events "
                        "(--kv-events-config with enable_kv_cache_events): routing by load")
        return None
    index = KvIndex(engine_indices)
    subscriber = KvEventSubscriber(index, config.sources(engine_indices, host))
    subscriber.start()
    router.prefix = PrefixRouting(index, subscriber, weight)
    return subscriber
