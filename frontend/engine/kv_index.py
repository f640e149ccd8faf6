"""Which prompt blocks each engine of a deployment holds in its prefix cache.

Fed by the engines' KV events (engine/kv_subscriber.py), read by routing for every new request.

Keys. The engines' own block hashes cannot be recomputed here in general (vLLM seeds the
chain with a per-process random value unless PYTHONHASHSEED is set, and the algorithm is a
flag), so every stored block is re-keyed by its token ids: a chain key, block i's key =
hash((key of block i-1, its tokens)), the first block's parent being `ROOT`. A `BlockStored`
event carries its blocks' tokens and its parent's engine hash, which this index maps to the
parent's chain key; a request's prompt is keyed the same way, block by block, so both sides
agree without knowing the engine's hash function. Blocks whose parent is unknown (stored
before this subscriber joined) and blocks the engine hashed with more than tokens (LoRA,
multimodal items, cache salt: `extra_keys`) are not indexed: a miss, never a false hit.

Layout. One dict `_holders` maps a chain key to a bitmask of the engines holding that block,
so matching a prompt costs one hash and one dict lookup per block for all engines together,
and stops at the first block nobody holds. Per engine, `_EngineBlocks` maps the engine's
hashes to chain keys (for removals) with a count of physical copies (vLLM can hold two copies
of one hash and removes them one by one).

Bounds. At most `max_blocks` engine hashes per engine (the oldest stored is forgotten first:
only a miss). An engine's entries are dropped on `AllBlocksCleared`, when its event stream
restarts or has a gap that replay cannot fill, and when the engine goes down: a stale entry
would route a request to an engine that has to recompute it anyway.
"""

from __future__ import annotations

from typing import Iterable

from .kv_events import AllBlocksCleared, BlockRemoved, BlockStored

ROOT = 0x5EED  # the chain key a first block's parent has
DEFAULT_MAX_BLOCKS = 1 << 20  # per engine; ~150 bytes each
MAX_BLOCK_SIZE = 1 << 16  # tokens per block: vLLM's are at most a few thousand; a larger one is malformed


class _EngineBlocks:
    __slots__ = ("bit", "keys", "copies", "refs")

    def __init__(self, bit: int):
        self.bit = bit
        self.keys: dict = {}  # engine hash -> chain key, oldest store first
        self.copies: dict = {}  # engine hash -> physical copies beyond the first
        self.refs: dict[int, int] = {}  # chain key -> engine hashes mapped to it


class KvIndex:
    """The deployment's prefix cache map, one bit per engine (`engine_indices` order)."""

    def __init__(self, engine_indices: Iterable[int], max_blocks: int = DEFAULT_MAX_BLOCKS):
        self.engine_indices = list(engine_indices)
        self.max_blocks = max_blocks
        self.block_size = 0  # learned from the first BlockStored
        self._holders: dict[int, int] = {}
        self._engines = {e: _EngineBlocks(1 << i) for i, e in enumerate(self.engine_indices)}
        self._by_bit = {1 << i: e for i, e in enumerate(self.engine_indices)}
        self.events_applied = 0
        self.clears = 0

    # ------------------------------------------------------------------ events

    def apply(self, engine: int, events: list) -> None:
        """One batch's events from `engine`, in order."""
        blocks = self._engines.get(engine)
        if blocks is None:
            return
        for ev in events:
            if type(ev) is BlockStored:
                self._stored(blocks, ev)
            elif type(ev) is BlockRemoved:
                for h in ev.block_hashes:
                    self._removed(blocks, h)
            elif type(ev) is AllBlocksCleared:
                self.clear(engine)
        self.events_applied += len(events)

    def _stored(self, blocks: _EngineBlocks, ev: BlockStored) -> None:
        bs = ev.block_size
        hashes = ev.block_hashes
        tokens = ev.token_ids
        # (a malformed event is ignored: a block size no engine uses, no blocks, tokens that do
        # not fill them)
        if (not 0 < bs <= MAX_BLOCK_SIZE or not hashes or len(tokens) != len(hashes) * bs or ev.lora_name is not None or ev.lora_id is not None):
            return
        if ev.extra_keys and any(k for k in ev.extra_keys):
            return
        if ev.group_idx not in (None, 0) or ev.kv_cache_spec_sliding_window:
            return  # another KV cache group (a hybrid model's sliding window / state layers)
        if self.block_size == 0:
            self.block_size = bs
        elif bs != self.block_size:
            return
        parent = ev.parent_block_hash
        if parent is None:
            key = ROOT
        else:
            key = blocks.keys.get(parent)
            if key is None:
                return  # the chain starts before what this index saw
        keys, copies, refs, holders, bit = blocks.keys, blocks.copies, blocks.refs, self._holders, blocks.bit
        it = iter(tokens)
        for h, block in zip(hashes, zip(*[it] * bs)):
            key = hash((key, block))
            if h in keys:
                copies[h] = copies.get(h, 0) + 1
                continue
            keys[h] = key
            refs[key] = refs.get(key, 0) + 1
            holders[key] = holders.get(key, 0) | bit
        if len(keys) > self.max_blocks:
            for h in list(keys)[: len(keys) - self.max_blocks]:
                copies.pop(h, None)
                self._removed(blocks, h)

    def _removed(self, blocks: _EngineBlocks, h) -> None:
        n = blocks.copies.get(h)
        if n:
            if n == 1:
                del blocks.copies[h]
            else:
                blocks.copies[h] = n - 1
            return
        key = blocks.keys.pop(h, None)
        if key is None:
            return
        refs = blocks.refs
        left = refs[key] - 1
        if left:
            refs[key] = left
            return
        del refs[key]
        mask = self._holders.get(key, 0) & ~blocks.bit
        if mask:
            self._holders[key] = mask
        else:
            self._holders.pop(key, None)

    def clear(self, engine: int) -> None:
        """Forget everything `engine` holds (cleared, restarted, or its stream lost events)."""
        blocks = self._engines.get(engine)
        if blocks is None:
            return
        holders, bit = self._holders, blocks.bit
        for key in blocks.refs:
            mask = holders.get(key, 0) & ~bit
            if mask:
                holders[key] = mask
            else:
                holders.pop(key, None)
        blocks.keys.clear()
        blocks.copies.clear()
        blocks.refs.clear()
        self.clears += 1

    def blocks_held(self, engine: int) -> int:
        blocks = self._engines.get(engine)
        return len(blocks.keys) if blocks is not None else 0

    # ------------------------------------------------------------------ matching

    def match(self, prompt: list[int]) -> dict[int, int]:
        """Cached prompt tokens per engine (engines with none are left out): the longest run of
        the prompt's full blocks, from its start, that the engine holds."""
        bs = self.block_size
        holders = self._holders
        if bs == 0 or not holders:
            return {}
        found: dict[int, int] = {}
        alive = -1
        key = ROOT
        i = 0
        it = iter(prompt)  # the blocks as tuples, without a slice per block
        for block in zip(*[it] * bs):
            key = hash((key, block))
            mask = holders.get(key, 0) & alive
            if mask != alive and i:
                self._note(found, alive & ~mask, i * bs)
            if not mask:
                return found
            alive = mask
            i += 1
        if i:
            self._note(found, alive, i * bs)
        return found

    def _note(self, found: dict[int, int], mask: int, tokens: int) -> None:
        by_bit = self._by_bit
        while mask > 0:
            low = mask & -mask
            e = by_bit.get(low)
            if e is not None:
                found[e] = tokens
            mask ^= low
