"""The shared response store for several replicas: one Redis database (`redis.asyncio`).

Keys (under the prefix `vpf:`): `rec:<id>` is a hash (`owner`, `data`: the JSON record, `worker`
while in progress) with the store's TTL; `rindex` orders ids by first store time and `rsizes`
holds their sizes, `rbytes` their total, so the oldest go once `max_entries` or `max_bytes` is
exceeded, from the owner holding the most (`rowner`: bytes per owner, `rindex:<owner>` its ids by
store time, `rowner_of`: each id's owner); `running` maps in-progress ids to their worker, whose heartbeat `beat:<worker>`
expires `STALE_S` after its last beat; `cancel:<id>` is a cancel flag. Writes are one Lua
script each (create-only, owner-checked update, the bounds): atomic across replicas.

Connections time out after `BUSY_TIMEOUT_S`-ish and are not retried: an unreachable Redis fails
the store's operations (`StoreUnavailable`) at once, never the request paths that do not store.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from vllm_pyfrontend.store import (
    BUSY_TIMEOUT_S,
    STALE_S,
    MarkOrphan,
    StoreUnavailable,
    encode_record,
)

PREFIX = "vpf:"
_SOCKET_TIMEOUT_S = 2 * BUSY_TIMEOUT_S

# KEYS: rec, rindex, rsizes, rbytes, running, beat
# ARGV: id, owner, data, size, worker ("" = finished), ttl_ms, now_s, max_entries, max_bytes,
#       mode ("create" | "update" | "update_running"), expect_worker ("" = any), stale_ms, prefix,
#       owner_max (-1: the owner has no bound of its own)
_WRITE = """
local rec, index, sizes, total, running, beat = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, owner, data, size, worker = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local ttl, now, max_entries, max_bytes = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local mode, expect, stale, prefix = ARGV[10], ARGV[11], tonumber(ARGV[12]), ARGV[13]
if mode == 'create' then
  if redis.call('EXISTS', rec) == 1 then return 0 end
else
  if redis.call('HGET', rec, 'owner') ~= owner then return 0 end
  local cur = redis.call('HGET', rec, 'worker')
  if mode == 'update_running' and not cur then return 0 end
  if expect ~= '' and cur ~= expect then return 0 end
end
local old = redis.call('HGET', sizes, id)
if old then
  redis.call('DECRBY', total, old)
  redis.call('HINCRBY', prefix .. 'rowner', owner, -tonumber(old))
end
redis.call('DEL', rec)
redis.call('HSET', rec, 'owner', owner, 'data', data)
if worker ~= '' then
  redis.call('HSET', rec, 'worker', worker)
  redis.call('HSET', running, id, worker)
  redis.call('SET', beat, '1', 'PX', stale)
else
  redis.call('HDEL', running, id)
end
redis.call('PEXPIRE', rec, ttl)
redis.call('HSET', sizes, id, size)
redis.call('INCRBY', total, size)
redis.call('ZADD', index, 'NX', now, id)
redis.call('HSET', prefix .. 'rowner_of', id, owner)
redis.call('HINCRBY', prefix .. 'rowner', owner, size)
redis.call('ZADD', prefix .. 'rindex:' .. owner, 'NX', now, id)
-- an id leaves every index and total at once (`s`: its size, when known); returns the size
local function forget(o, s)
  redis.call('ZREM', index, o)
  local of = redis.call('HGET', prefix .. 'rowner_of', o)
  if of then
    redis.call('ZREM', prefix .. 'rindex:' .. of, o)
    if s then
      local left = redis.call('HINCRBY', prefix .. 'rowner', of, -tonumber(s))
      if left <= 0 then redis.call('HDEL', prefix .. 'rowner', of) end
    end
    redis.call('HDEL', prefix .. 'rowner_of', o)
  end
  if s then redis.call('DECRBY', total, s); redis.call('HDEL', sizes, o) end
  redis.call('HDEL', running, o)
  return tonumber(s or '0')
end
-- a record evicted: gone with everything that names it
local function evict(o)
  local s = forget(o, redis.call('HGET', sizes, o))
  redis.call('DEL', prefix .. 'rec:' .. o)
  return s
end
-- the oldest id of a sorted set but the record just written
local function oldest(set)
  local first = redis.call('ZRANGE', set, 0, 1)
  if first[1] == id then return first[2] end
  return first[1]
end
-- ids whose records expired: off the indexes and the totals
local expired = redis.call('ZRANGEBYSCORE', index, '-inf', now - ttl / 1000, 'LIMIT', 0, 16)
for _, o in ipairs(expired) do
  if redis.call('EXISTS', prefix .. 'rec:' .. o) == 0 then forget(o, redis.call('HGET', sizes, o)) end
end
-- the writing owner's own bound: its oldest go
local owner_max = tonumber(ARGV[14])
if owner_max >= 0 then
  while tonumber(redis.call('HGET', prefix .. 'rowner', owner) or '0') > owner_max do
    local o = oldest(prefix .. 'rindex:' .. owner)
    if not o then break end
    evict(o)
  end
end
-- while a bound is exceeded: the oldest of the owner that holds the most (one tenant storing a
-- lot evicts its own responses, not another's)
local n = redis.call('ZCARD', index)
local bytes = tonumber(redis.call('GET', total) or '0')
while n > max_entries or bytes > max_bytes do
  local owners = redis.call('HGETALL', prefix .. 'rowner')
  local top, most = nil, -1
  for i = 1, #owners, 2 do
    local b = tonumber(owners[i + 1])
    if b > most then top, most = owners[i], b end
  end
  local o = top and oldest(prefix .. 'rindex:' .. top) or oldest(index)
  if not o then o = oldest(index) end
  if not o then break end
  n, bytes = n - 1, bytes - evict(o)
end
return 1
"""

_enc = msgspec.json.encode
_dec = msgspec.json.decode


class RedisStore:
    def __init__(self, url: str, *, ttl: float, max_entries: int, max_bytes: int, max_record_bytes: int,
                 owner_limit=lambda owner: None):
        import redis.asyncio as aioredis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.url = url
        self.ttl_ms = max(1, int(ttl * 1000))
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_record_bytes = max_record_bytes
        self.owner_limit = owner_limit  # owner -> the bytes its records may take (None: no bound of its own)
        self.degraded: str | None = None
        self._redis = aioredis.from_url(url, socket_timeout=_SOCKET_TIMEOUT_S,
                                        socket_connect_timeout=_SOCKET_TIMEOUT_S, retry=Retry(NoBackoff(), 0))
        self._script = self._redis.register_script(_WRITE)

    async def _call(self, awaitable):
        from redis.exceptions import RedisError

        try:
            result = await awaitable
        except (RedisError, OSError) as e:
            self.degraded = f"the response store ({self.url}) failed: {type(e).__name__}: {e}"
            raise StoreUnavailable(self.degraded) from None
        self.degraded = None
        return result

    def _key(self, key: str) -> str:
        return f"{PREFIX}rec:{key}"

    async def get(self, key: str) -> dict[str, Any] | None:
        fields = await self._call(self._redis.hmget(self._key(key), ["owner", "data", "worker"]))
        owner, data, worker = fields
        if data is None:
            return None
        record = _dec(data)
        record["owner"] = owner.decode() if owner is not None else ""
        record["worker"] = worker.decode() if worker is not None else None
        return record

    def _write(self, key: str, owner: str, data: bytes, worker: str | None, mode: str, expect: str = ""):
        p = PREFIX
        return self._script(
            keys=[self._key(key), p + "rindex", p + "rsizes", p + "rbytes", p + "running", f"{p}beat:{worker or ''}"],
            args=[key, owner, data, len(data), worker or "", self.ttl_ms, time.time(), self.max_entries,
                  self.max_bytes, mode, expect, int(STALE_S * 1000), p, self.owner_limit(owner) or -1])

    def _encode(self, record: dict[str, Any]) -> bytes:
        return encode_record(record, self.max_record_bytes)

    async def create(self, key: str, owner: str, record: dict[str, Any], *, worker: str | None = None) -> bool:
        return bool(await self._call(self._write(key, owner, self._encode(record), worker, "create")))

    async def update(self, key: str, owner: str, record: dict[str, Any], *, worker: str | None = None,
                     only_in_progress: bool = False) -> bool:
        mode = "update_running" if only_in_progress else "update"
        return bool(await self._call(self._write(key, owner, self._encode(record), worker, mode)))

    async def request_cancel(self, key: str) -> None:
        await self._call(self._redis.set(f"{PREFIX}cancel:{key}", b"1", px=self.ttl_ms))

    async def cancel_requested(self, keys: list[str]) -> set[str]:
        if not keys:
            return set()
        values = await self._call(self._redis.mget([f"{PREFIX}cancel:{k}" for k in keys]))
        return {k for k, v in zip(keys, values) if v is not None}

    async def heartbeat(self, worker: str) -> None:
        await self._call(self._redis.set(f"{PREFIX}beat:{worker}", b"1", px=int(STALE_S * 1000)))

    async def worker_alive(self, worker: str) -> bool:
        return bool(await self._call(self._redis.exists(f"{PREFIX}beat:{worker}")))

    async def fail_orphans(self, mark: MarkOrphan) -> list[str]:
        running = await self._call(self._redis.hgetall(PREFIX + "running"))
        if not running:
            return []
        workers = sorted({w.decode() for w in running.values()})
        async with self._redis.pipeline(transaction=False) as p:
            for w in workers:
                p.exists(f"{PREFIX}beat:{w}")
            flags = await self._call(p.execute())
        stale = {w for w, f in zip(workers, flags) if not f}
        failed = []
        for rid_b, worker_b in running.items():
            worker = worker_b.decode()
            if worker not in stale:
                continue
            rid = rid_b.decode()
            record = await self.get(rid)
            if record is None:
                await self._call(self._redis.hdel(PREFIX + "running", rid))
                continue
            owner = record.pop("owner")
            record.pop("worker", None)
            data = _enc(mark(record))
            if await self._call(self._write(rid, owner, data, None, "update_running", worker)):
                failed.append(rid)
        return failed

    async def probe(self) -> None:
        await self._call(self._redis.exists(PREFIX + "rindex"))

    async def close(self) -> None:
        try:
            await self._redis.aclose()
        except Exception:  # noqa: BLE001 - closing a broken connection
            pass
