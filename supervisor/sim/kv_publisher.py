"""The simulated engine's KV event publisher: vLLM's `ZmqEventPublisher`, on the same wire.

A PUB socket sends `[topic, seq (8 bytes big-endian), msgpack KVEventBatch]` per batch, the
sequence counting from 0; a ROUTER (with a `replay_endpoint`) answers `[b"", start]` with every
buffered batch from `start` on and an end marker (seq -1). A rank binds at the configured ports
+ its rank. One thread owns both sockets, fed by a queue, so a step never waits on a subscriber.
`drop` (tests) skips sending the next N batches on the PUB socket, as a full high-water mark
would, while they still go into the replay buffer.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque

import zmq

from vllm_pyfrontend.engine.kv_events import END_SEQ, KvEventsConfig, encode_batch, offset_endpoint

log = logging.getLogger(__name__)


class KvEventPublisher:
    def __init__(self, config: KvEventsConfig, rank: int, hwm: int = 100_000):
        self.endpoint = offset_endpoint(config.endpoint, rank)
        self.replay_endpoint = offset_endpoint(config.replay_endpoint, rank)
        self.topic = config.topic.encode()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._queue: queue.Queue = queue.Queue()
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(hwm)
        self._pub.bind(self.endpoint)
        self._replay = None
        if self.replay_endpoint:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.bind(self.replay_endpoint)
        self.drop = 0
        self._seq = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="kv-events")
        self._thread.start()
        log.info("KV events on %s (replay %s)", self.endpoint, self.replay_endpoint)

    def publish(self, batch) -> None:
        self._queue.put(batch)

    def close(self) -> None:
        """Stop (what is queued is sent first) and unbind."""
        self._queue.put(None)
        self._thread.join(5)
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
        self._ctx.term()  # the ports are free once this returns

    def _run(self) -> None:
        while True:
            if self._replay is not None and self._replay.poll(0):
                self._serve_replay()
            try:
                batch = self._queue.get(timeout=0.05)
            except queue.Empty:
                continue
            if batch is None:
                return
            payload = encode_batch(batch)
            seq = self._seq
            self._seq += 1
            if self.drop > 0:
                self.drop -= 1
            else:
                self._pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload))
            self._buffer.append((seq, payload))

    def _serve_replay(self) -> None:
        frames = self._replay.recv_multipart()
        if len(frames) != 3:
            return
        client, _, start = frames
        first = int.from_bytes(start, "big")
        for seq, payload in list(self._buffer):
            if seq >= first:
                self._replay.send_multipart((client, b"", self.topic, seq.to_bytes(8, "big"), payload))
        self._replay.send_multipart((client, b"", b"", END_SEQ, b""))
