"""A worker's KV event subscription (engine/kv_subscriber.py) against the simulated engine's
publisher (supervisor/sim/kv_publisher.py, vLLM's wire): batches lost on the PUB socket are
fetched from the replay socket, a gap replay cannot fill and a publisher that starts over
(an engine restart) drop the engine's entries, so routing never sees a stale hit."""

from __future__ import annotations

import asyncio
import time

from tests.stack import free_port
from vllm_pyfrontend.engine.kv_events import BlockRemoved, BlockStored, KVEventBatch, KvEventsConfig
from vllm_pyfrontend.engine.kv_index import KvIndex
from vllm_pyfrontend.engine.kv_subscriber import KvEventSubscriber
from vllm_pyfrontend.supervisor.sim.kv_publisher import KvEventPublisher

BS = 4
A = list(range(10, 18))  # two blocks
B = list(range(50, 58))


def stored(hashes, tokens, parent=None):
    return BlockStored(block_hashes=hashes, parent_block_hash=parent, token_ids=tokens, block_size=BS,
                       lora_id=None, medium="GPU", lora_name=None, group_idx=0)


def batch(*events):
    return KVEventBatch(ts=time.time(), events=list(events), data_parallel_rank=0)


async def until(pred, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.005)


def config(replay: bool) -> KvEventsConfig:
    return KvEventsConfig(endpoint=f"tcp://*:{free_port()}",
                          replay_endpoint=f"tcp://*:{free_port()}" if replay else None)


def test_lost_batches_come_from_replay():
    async def main():
        cfg = config(replay=True)
        pub = KvEventPublisher(cfg, 0)
        index = KvIndex([0])
        sub = KvEventSubscriber(index, cfg.sources([0]))
        sub.start()
        try:
            pub.publish(batch(stored([1, 2], A)))
            await until(lambda: index.match(A) == {0: 8}, "first store")
            pub.drop = 2  # lost on the PUB socket, kept for replay
            pub.publish(batch(BlockRemoved(block_hashes=[2], medium="GPU")))
            pub.publish(batch(stored([3, 4], B)))
            pub.publish(batch(stored([5], [1, 2, 3, 4])))
            await until(lambda: sub.expected[0] == 4, "the gap filled")
            assert sub.gaps == 1 and index.clears == 0
            assert index.match(A) == {0: 4}  # the lost removal was applied
            assert index.match(B) == {0: 8}
        finally:
            await sub.close()
            pub.close()

    asyncio.run(main())


def test_gap_without_replay_and_restart_drop_the_engine():
    async def main():
        cfg = config(replay=False)
        pub = KvEventPublisher(cfg, 0)
        index = KvIndex([0])
        sub = KvEventSubscriber(index, cfg.sources([0]))
        sub.start()
        try:
            # Until the SUB socket has joined, the first batches may be lost (no replay here):
            # publish until one arrives.
            while sub.batches == 0:
                pub.publish(batch(stored([1, 2], A)))
                await asyncio.sleep(0.02)
            await until(lambda: index.match(A) == {0: 8}, "first store")
            pub.drop = 1
            pub.publish(batch(BlockRemoved(block_hashes=[1, 2], medium="GPU")))  # lost
            pub.publish(batch(stored([3, 4], B)))
            await until(lambda: index.match(B) == {0: 8}, "after the gap")
            assert index.match(A) == {}  # no stale hit: the engine's entries were dropped
            assert sub.gaps == 1 and index.clears == 1

            # The engine restarts: a new publisher on the same port counts from 0 again.
            pub.close()
            await until(lambda: sub.disconnects == 1, "the publisher's connection dropped")
            pub = KvEventPublisher(cfg, 0)
            before = sub.batches
            while sub.batches == before:
                pub.publish(batch(stored([1, 2], A)))
                await asyncio.sleep(0.02)
            await until(lambda: index.match(A) == {0: 8}, "store after restart")
            assert index.match(B) == {}  # what the old process held is gone
            assert sub.disconnects == 1
        finally:
            await sub.close()
            pub.close()

    asyncio.run(main())


def test_close_ends_a_follower_whose_replay_finishes_as_it_is_cancelled():
    """`close` cancels each engine's follower and waits for it. A cancel that lands in the loop
    iteration where the follower's replay finishes must still end it (a cancel lost there
    would send the follower back to its socket, and `close`, the worker's shutdown, would wait
    for ever)."""
    async def main():
        cfg = config(replay=True)
        sub = KvEventSubscriber(KvIndex([0]), cfg.sources([0]))
        loop = asyncio.get_running_loop()
        entered = asyncio.Event()
        release = loop.create_future()

        async def replay_frames(sock, rank, start, initial):
            entered.set()
            await release
            return True

        sub._replay_frames = replay_frames  # the start's replay, held until the cancel
        sub.start()
        await asyncio.wait_for(entered.wait(), 5)
        release.set_result(None)  # the replay finishes in the iteration close()'s cancel lands in
        closing = asyncio.ensure_future(sub.close())
        done, _ = await asyncio.wait({closing}, timeout=5)
        if not done:  # (cancel the follower again so that the test itself ends)
            for t in sub._tasks:
                t.cancel()
            await asyncio.wait({closing}, timeout=5)
        assert done, "close() did not end the follower its cancel reached as the replay finished"
        assert not sub._tasks

    asyncio.run(main())


def test_a_malformed_event_is_ignored_and_the_subscription_goes_on():
    """An engine's event with a block size no engine uses (2^62), or blocks without tokens, is
    ignored: the subscription follows the next batches and the index keeps its block size."""
    async def main():
        cfg = config(replay=True)
        pub = KvEventPublisher(cfg, 0)
        index = KvIndex([0])
        sub = KvEventSubscriber(index, cfg.sources([0]))
        sub.start()
        try:
            huge = BlockStored(block_hashes=[], parent_block_hash=None, token_ids=[], block_size=1 << 62,
                               lora_id=None, medium="GPU", lora_name=None, group_idx=0)
            pub.publish(batch(huge))
            pub.publish(batch(BlockStored(block_hashes=[9], parent_block_hash=None, token_ids=[1],
                                          block_size=1 << 62, lora_id=None, medium="GPU", lora_name=None,
                                          group_idx=0)))
            pub.publish(batch(stored([1, 2], A)))
            await until(lambda: index.match(A) == {0: 8}, "the store after the malformed ones")
            assert index.block_size == BS and sub.resubscribes == 0
        finally:
            await sub.close()
            pub.close()

    asyncio.run(main())


def test_a_failed_subscription_starts_again(monkeypatch):
    """Whatever fails while a batch is handled, the engine's subscription starts again (from the
    replay buffer) instead of ending for good."""
    from vllm_pyfrontend.engine import kv_subscriber

    monkeypatch.setattr(kv_subscriber, "RESUBSCRIBE_AFTER", 0.05)

    async def main():
        cfg = config(replay=True)
        pub = KvEventPublisher(cfg, 0)
        index = KvIndex([0])
        sub = KvEventSubscriber(index, cfg.sources([0]))
        real = sub._on_batch
        failures = [RuntimeError("a handler bug")]

        async def flaky(src, seq, payload):
            if failures:
                raise failures.pop()
            await real(src, seq, payload)

        sub._on_batch = flaky
        sub.start()
        try:
            # (until the SUB socket has joined, batches may be lost: publish until one fails)
            deadline = time.monotonic() + 10
            while sub.resubscribes == 0:
                assert time.monotonic() < deadline, "the failed subscription noticed"
                pub.publish(batch(stored([1, 2], A)))
                await asyncio.sleep(0.02)
            await until(lambda: index.match(A) == {0: 8}, "the store, from the replay buffer")
            pub.publish(batch(stored([3, 4], B)))
            await until(lambda: index.match(B) == {0: 8}, "the live stream after the new subscription")
        finally:
            await sub.close()
            pub.close()

    asyncio.run(main())
