"""The shared response store for several replicas: one Redis database (`redis.asyncio`).

Keys (under the prefix `vpf:`): `resp:<id>` holds the JSON record with the store's TTL;
`cancel:<id>` is a cancel flag; the sorted set `index` orders ids by first store time, so the
oldest are dropped once more than `max_entries` are kept.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

PREFIX = "vpf:"


class RedisStore:
    def __init__(self, url: str, *, ttl: float, max_entries: int):
        import redis.asyncio as aioredis

        self.url = url
        self.ttl_ms = max(1, int(ttl * 1000))
        self.max_entries = max_entries
        self._redis = aioredis.from_url(url)

    def _key(self, key: str) -> str:
        return f"{PREFIX}resp:{key}"

    async def get(self, key: str) -> dict[str, Any] | None:
        data = await self._redis.get(self._key(key))
        return None if data is None else msgspec.json.decode(data)

    async def put(self, key: str, record: dict[str, Any]) -> None:
        index = PREFIX + "index"
        async with self._redis.pipeline(transaction=True) as p:
            p.set(self._key(key), msgspec.json.encode(record), px=self.ttl_ms)
            p.zadd(index, {key: time.time()}, nx=True)  # first store time: updates keep their age
            p.zcard(index)
            *_, count = await p.execute()
        excess = count - self.max_entries
        if excess > 0:
            # The index also sheds ids whose records already expired (they are the oldest).
            old = await self._redis.zpopmin(index, excess)
            if old:
                await self._redis.delete(*(self._key(k.decode()) for k, _ in old))

    async def request_cancel(self, key: str) -> None:
        await self._redis.set(f"{PREFIX}cancel:{key}", b"1", px=self.ttl_ms)

    async def cancel_requested(self, keys: list[str]) -> set[str]:
        if not keys:
            return set()
        values = await self._redis.mget([f"{PREFIX}cancel:{k}" for k in keys])
        return {k for k, v in zip(keys, values) if v is not None}

    async def close(self) -> None:
        await self._redis.aclose()
