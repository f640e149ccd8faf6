"""The simulated engine's prefix cache: vLLM's automatic prefix caching, at block granularity.

What is modelled, as vLLM does it:
- full prompt blocks of `block_size` tokens are keyed by a hash chain (block i's hash covers its
  tokens and block i-1's hash), so a block is shared only by prompts equal up to its end;
- a new request's leading blocks found in the cache are not computed again (at most
  prompt length - 1 tokens: the last token is always computed); the rest of the prompt is
  prefilled, `max_num_batched_tokens` per step over all requests (scheduler.py), so prefill
  time grows with the uncached tokens;
- once a request's prefill is done its new full blocks are cached (`BlockStored`); blocks in use
  by a running request are pinned; when it ends they become evictable, tail first, and the
  least recently used evictable block goes when the cache is full (`BlockRemoved`);
- `reset_prefix_cache` empties it (`AllBlocksCleared`).
Not modelled: output tokens' blocks (a real engine also caches the blocks its answer fills),
cache salts, LoRA and multimodal extra keys.

Block hashes are unsigned 64-bit ints, as vLLM publishes them by default; being computed from
the tokens only, they are the same in every simulated engine and across restarts.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from vllm_pyfrontend.engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch

_SEED = 0x6B76  # the chain's parent of a first block
_MASK = (1 << 64) - 1


class CachedPrompt:
    """One request's view of the cache: its full blocks' hashes, how many leading blocks were
    found cached, the prompt tokens the cache does not cover, and the blocks it pins."""

    __slots__ = ("prompt", "hashes", "cached_blocks", "cached_tokens", "prefill_left", "pinned")

    def __init__(self, prompt: list[int], hashes: list[int], cached_blocks: int, block_size: int):
        self.prompt = prompt
        self.hashes = hashes
        self.cached_blocks = cached_blocks
        self.cached_tokens = cached_blocks * block_size
        self.prefill_left = len(prompt) - self.cached_tokens
        self.pinned: list[int] = hashes[:cached_blocks]


class PrefixCache:
    def __init__(self, block_size: int, num_blocks: int, publisher: Any | None = None, rank: int = 0):
        self.block_size = block_size
        self.capacity = max(1, num_blocks)
        self.publisher = publisher
        self.rank = rank
        self._refs: dict[int, int] = {}  # cached block hash -> requests using it (0: evictable)
        self._free: OrderedDict[int, None] = OrderedDict()  # evictable, least recently used first
        self._events: list[Any] = []
        self.hits = 0  # tokens served from the cache (for scheduler stats)

    def __len__(self) -> int:
        return len(self._refs)

    def admit(self, prompt: list[int]) -> CachedPrompt:
        """A request starts: its cached leading blocks are pinned."""
        bs = self.block_size
        hashes = []
        h = _SEED
        it = iter(prompt)
        for block in zip(*[it] * bs):
            h = hash((h, block)) & _MASK
            hashes.append(h)
        refs = self._refs
        limit = (len(prompt) - 1) // bs
        n = 0
        while n < limit and hashes[n] in refs:
            n += 1
        for h in hashes[:n]:
            if refs[h] == 0:
                del self._free[h]
            refs[h] += 1
        self.hits += n * bs
        return CachedPrompt(prompt, hashes, n, bs)

    def prefilled(self, cp: CachedPrompt) -> None:
        """A request's prefill is done: its new full blocks join the cache (as far as there is
        room: blocks pinned by running requests are never evicted)."""
        refs, free = self._refs, self._free
        stored: list[int] = []
        start = cp.cached_blocks
        for i in range(cp.cached_blocks, len(cp.hashes)):
            h = cp.hashes[i]
            if h in refs:  # another request stored it meanwhile
                if stored:
                    self._store(cp, start, stored)
                    stored = []
                if refs[h] == 0:
                    del free[h]
                refs[h] += 1
                cp.pinned.append(h)
                start = i + 1
                continue
            if len(refs) >= self.capacity:
                if not free:
                    break
                victim, _ = free.popitem(last=False)
                del refs[victim]
                self._events.append(BlockRemoved(block_hashes=[victim], medium="GPU", group_idx=0))
            refs[h] = 1
            cp.pinned.append(h)
            stored.append(h)
        if stored:
            self._store(cp, start, stored)

    def _store(self, cp: CachedPrompt, start: int, hashes: list[int]) -> None:
        bs = self.block_size
        self._events.append(BlockStored(
            block_hashes=hashes, parent_block_hash=cp.hashes[start - 1] if start else None,
            token_ids=cp.prompt[start * bs:(start + len(hashes)) * bs], block_size=bs,
            lora_id=None, medium="GPU", lora_name=None, group_idx=0, kv_cache_spec_kind="full_attention"))

    def release(self, cp: CachedPrompt) -> None:
        """A request ended: its blocks become evictable, the tail first (vLLM frees a request's
        blocks in reverse so that a prefix outlives its continuations)."""
        refs, free = self._refs, self._free
        for h in reversed(cp.pinned):
            n = refs.get(h)
            if n is None:
                continue  # the cache was reset meanwhile
            if n == 1:
                refs[h] = 0
                free[h] = None
            else:
                refs[h] = n - 1
        cp.pinned = []

    def reset(self) -> None:
        self._refs.clear()
        self._free.clear()
        self._events.append(AllBlocksCleared())

    def publish(self) -> None:
        """The step's events, as one batch (vLLM publishes only steps that have some)."""
        if self._events:
            events, self._events = self._events, []
            if self.publisher is not None:
                self.publisher.publish(KVEventBatch(ts=time.time(), events=events, data_parallel_rank=self.rank))


def attach_prefix_cache(engine: Any, args: Any) -> None:
    """Give a SimEngine's scheduler a prefix cache (and a KV event publisher) as its flags say:
    `--enable-prefix-caching`, or `--kv-events-config` enabling events."""
    from vllm_pyfrontend.engine.kv_events import KvEventsConfig

    events = KvEventsConfig.parse(args.kv_events_config) if args.kv_events_config else None
    enabled = args.enable_prefix_caching
    if enabled is None:
        enabled = events is not None
    if not enabled:
        return
    publisher = None
    if events is not None:
        from vllm_pyfrontend.supervisor.sim.kv_publisher import KvEventPublisher

        publisher = KvEventPublisher(events, args.engine_index)
    sched = engine.scheduler
    sched.max_num_batched_tokens = args.max_num_batched_tokens
    sched.prefix_cache = PrefixCache(args.block_size, engine.num_gpu_blocks, publisher, args.engine_index)
