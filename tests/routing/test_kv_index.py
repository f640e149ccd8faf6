"""The KV index (engine/kv_index.py) fed with vLLM's own event structs, the routing policy over
it (engine/routing.py), and the simulated engine's prefix cache (supervisor/sim/prefix_cache.py)
whose events are vLLM's bytes."""

from __future__ import annotations

import msgspec
import pytest

from vllm_pyfrontend.engine.inflight import InFlight
from vllm_pyfrontend.engine.kv_events import (AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch,
                                              KvEventsConfig, decode_batch, encode_batch, offset_endpoint)
from vllm_pyfrontend.engine.kv_index import KvIndex
from vllm_pyfrontend.engine.routing import EngineStats, PrefixRouting, Router
from vllm_pyfrontend.engine.types import EngineRequest
from vllm_pyfrontend.supervisor.sim.prefix_cache import PrefixCache

BS = 4


def stored(hashes, tokens, parent=None):
    return BlockStored(block_hashes=hashes, parent_block_hash=parent, token_ids=tokens, block_size=BS,
                       lora_id=None, medium="GPU", lora_name=None, group_idx=0,
                       kv_cache_spec_kind="full_attention")


PROMPT = list(range(100, 120))  # 5 blocks


def test_wire_format_is_vllms_bytes():
    vllm_events = pytest.importorskip("vllm.distributed.kv_events")
    ours = KVEventBatch(ts=2.0, events=[stored([11, 12], PROMPT[:8]), BlockRemoved(block_hashes=[11], medium="GPU",
                                                                                      group_idx=0),
                                        AllBlocksCleared()], data_parallel_rank=1)
    theirs = vllm_events.KVEventBatch(ts=2.0, events=[
        vllm_events.BlockStored(block_hashes=[11, 12], parent_block_hash=None, token_ids=PROMPT[:8], block_size=BS,
                                lora_id=None, medium="GPU", lora_name=None, group_idx=0,
                                kv_cache_spec_kind="full_attention"),
        vllm_events.BlockRemoved(block_hashes=[11], medium="GPU", group_idx=0),
        vllm_events.AllBlocksCleared()], data_parallel_rank=1)
    assert encode_batch(ours) == msgspec.msgpack.encode(theirs)
    assert decode_batch(msgspec.msgpack.encode(theirs)) == ours


def test_config_and_rank_offsets_as_vllm():
    c = KvEventsConfig.from_engine_args(["--x", "1", "--kv-events-config",
                                         '{"enable_kv_cache_events": true, "endpoint": "tcp://*:6000", '
                                         '"replay_endpoint": "tcp://*:6100", "topic": "kv"}'])
    assert [(s.endpoint, s.replay_endpoint) for s in c.sources([0, 1])] == [
        ("tcp://127.0.0.1:6000", "tcp://127.0.0.1:6100"), ("tcp://127.0.0.1:6001", "tcp://127.0.0.1:6101")]
    assert c.describe([1])[0] == {"data_parallel_rank": 1, "endpoint": "tcp://127.0.0.1:6001",
                                  "replay_endpoint": "tcp://127.0.0.1:6101", "topic": "kv"}
    assert KvEventsConfig.parse('{"enable_kv_cache_events": false}') is None
    assert KvEventsConfig.parse('{"enable_kv_cache_events": true, "publisher": "null"}') is None
    assert offset_endpoint("tcp://*:0", 3) == "tcp://*:0" and offset_endpoint("inproc://c", 2) == "inproc://c_dp2"
    vllm_events = pytest.importorskip("vllm.distributed.kv_events")
    for ep in ("tcp://*:5557", "tcp://h:9", "inproc://x"):
        assert offset_endpoint(ep, 2) == vllm_events.ZmqEventPublisher.offset_endpoint_port(ep, 2)


def test_index_matches_chain_and_forgets():
    index = KvIndex([0, 1])
    index.apply(0, [stored([1, 2], PROMPT[:8])])
    index.apply(0, [stored([3], PROMPT[8:12], parent=2)])
    index.apply(1, [stored([7], PROMPT[:4])])
    assert index.match(PROMPT) == {0: 12, 1: 4}
    assert index.match([5] + PROMPT[1:]) == {}  # the first block differs: nothing
    index.apply(0, [BlockRemoved(block_hashes=[2], medium="GPU")])
    assert index.match(PROMPT) == {0: 4, 1: 4}  # a hole ends the run
    index.apply(1, [AllBlocksCleared()])
    assert index.match(PROMPT) == {0: 4}
    # A store whose parent this index never saw is not indexed (a miss, never a false hit).
    index.apply(1, [stored([9], PROMPT[4:8], parent=12345)])
    assert index.match(PROMPT) == {0: 4}
    # Copies: two stores of one hash need two removals.
    index.apply(1, [stored([7], PROMPT[:4]), stored([7], PROMPT[:4]), BlockRemoved(block_hashes=[7], medium="GPU")])
    assert index.match(PROMPT) == {0: 4, 1: 4}
    # Blocks hashed with more than tokens (LoRA, multimodal, salt) are not indexed.
    salted = stored([21], [1, 2, 3, 4])
    salted.extra_keys = [("salt",)]
    index.apply(0, [salted])
    assert index.match([1, 2, 3, 4, 5]) == {}


def test_index_is_bounded():
    index = KvIndex([0], max_blocks=3)
    index.apply(0, [stored([1, 2, 3, 4, 5], PROMPT)])
    assert index.blocks_held(0) == 3  # the oldest went first: the prompt's head is a miss now
    assert index.match(PROMPT) == {}


def _router(n=2, weight=1.0):
    inflight = InFlight(list(range(n)))
    router = Router(list(range(n)), inflight, {}, EngineStats())
    index = KvIndex(range(n))
    router.prefix = PrefixRouting(index, None, weight)
    return router, inflight, index


def _req(prompt, rank=None):
    return EngineRequest("r", list(prompt), {}, 0.0, data_parallel_rank=rank)


def test_routing_follows_the_cache_within_a_load_bound():
    router, inflight, index = _router()
    index.apply(1, [stored([1, 2, 3, 4, 5], PROMPT)])
    assert router.route(_req(PROMPT + [1])) == 1
    assert router.route(_req(PROMPT + [1], rank=0)) == 0  # a pinned rank still wins
    inflight.count[1] = 9
    assert router.route(_req(PROMPT + [1])) == 1  # worth 1 * (4.5 + 8) * 20/21 = 11.9 requests > 9
    inflight.count[1] = 16
    assert router.route(_req(PROMPT + [1])) == 0  # load wins past it
    # Uncached prompts go by load.
    inflight.count[1] = 0
    inflight.count[0] = 2
    assert router.route(_req([9] * 20)) == 1


def test_sim_cache_events_rebuild_the_same_index():
    published = []

    class Pub:
        def publish(self, batch):
            published.append(encode_batch(batch))

    cache = PrefixCache(BS, num_blocks=4, publisher=Pub())
    a = cache.admit(PROMPT)
    assert a.cached_tokens == 0 and a.prefill_left == 20
    cache.prefilled(a)  # 5 blocks, room for 4
    cache.publish()
    b = cache.admit(PROMPT)
    assert b.cached_tokens == 16  # 4 blocks held, and never the whole prompt
    cache.release(a)
    cache.release(b)
    c = cache.admit([1] * 9)
    cache.prefilled(c)  # 2 blocks: evicts the tail of PROMPT's first (LRU, tail first)
    cache.publish()
    index = KvIndex([0])
    for payload in published:
        index.apply(0, decode_batch(payload).events)
    assert index.match(PROMPT) == {0: 8}
    assert index.match([1] * 9) == {0: 8}
    assert cache.admit(PROMPT).cached_tokens == 8
