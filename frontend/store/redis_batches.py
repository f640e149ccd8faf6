"""Batches and their lines in Redis, for several replicas sharing one deployment's batches.

The same contract as `SQLiteBatchStore` (store/batches.py): claims bounded by the running
leases of the whole deployment, an answer recorded only by its lease holder and only once, the
output assembled from the recorded answers. The hot steps (claiming lines, recording an answer,
renewing and releasing leases) are Lua scripts, so each is atomic in Redis; the rare status
changes of a batch are optimistic transactions (WATCH on the batch's hash: an answer recorded
meanwhile changes its counters, and the transaction is redone). One Redis server (the scripts
touch the keys of several batches: not for Redis Cluster).

Keys, under `vpf:`: `batch:<id>` (hash: record, status, final_status, owner, tenant, created_at,
expires_at, lease_owner, lease_until, total, completed, failed, output_expires_s: the output
files' expiry in seconds, absent when they do not expire), `batches:<owner>` and
`batches:open` (sorted sets by creation time: an owner's batches, the ones not ended yet),
`lines:<id>` (hash: index -> [custom_id, body]), `pending:<id>` (sorted set of indexes),
`done:<id>` (hash: index -> failed flag + answer), `running` (sorted set of `<id>|<index>` by
lease expiry), `brun:<id>` (the batch's running indexes by lease expiry), `lease` (hash:
`<id>|<index>` -> holder), `runners` (sorted set of runners by when last seen: their number
sets each one's fair part of the concurrency bound), `batch_statuses` (hash: status -> count).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from vllm_pyfrontend.store.batches import ACTIVE, STATUS_TIME, Line, NewLine, Task, task_step

P = "vpf:"
RUNNING, OPEN, LEASE, STATUS_COUNTS = P + "running", P + "batches:open", P + "lease", P + "batch_statuses"

_CLAIM = """
local P = ARGV[6]
local now = tonumber(ARGV[2])
local max_running = tonumber(ARGV[5])
local n = math.min(tonumber(ARGV[4]), max_running - redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[2], '+inf'))
local out = {}
redis.call('ZADD', P .. 'runners', now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', P .. 'runners', '-inf', now - tonumber(ARGV[7]))
local live = math.max(1, redis.call('ZCARD', P .. 'runners'))
local mine = 0
local leases = redis.call('HGETALL', KEYS[3])
for i = 1, #leases, 2 do
  if leases[i + 1] == ARGV[1] then
    local until_ = redis.call('ZSCORE', KEYS[1], leases[i])
    if until_ and tonumber(until_) > now then mine = mine + 1 end
  end
end
n = math.min(n, math.ceil(max_running / live) - mine)
if n <= 0 then return out end
local function runnable(id)
  local st = redis.call('HMGET', P .. 'batch:' .. id, 'status', 'expires_at')
  return st[1] == 'in_progress' and tonumber(st[2]) > now
end
local function take(id, idx)
  local m = id .. '|' .. idx
  redis.call('ZADD', KEYS[1], ARGV[3], m)
  redis.call('ZADD', P .. 'brun:' .. id, ARGV[3], idx)
  redis.call('HSET', KEYS[3], m, ARGV[1])
  table.insert(out, m)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, n)) do
  local sep = string.find(m, '|', 1, true)
  local id = string.sub(m, 1, sep - 1)
  if runnable(id) then take(id, string.sub(m, sep + 1)) end
end
if #out < n then
  -- fair across owners: each line to the owner with the fewest lines running (ties: the owner
  -- of the older batch), from that owner's oldest batch first
  local owners, order, running, owner_of = {}, {}, {}, {}
  local function owner(id)
    if not owner_of[id] then owner_of[id] = redis.call('HGET', P .. 'batch:' .. id, 'owner') or '' end
    return owner_of[id]
  end
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    if runnable(id) and redis.call('ZCARD', P .. 'pending:' .. id) > 0 then
      local o = owner(id)
      if not owners[o] then owners[o] = {}; table.insert(order, o); running[o] = 0 end
      table.insert(owners[o], id)
    end
  end
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[2], '+inf')) do
    local o = owner(string.sub(m, 1, string.find(m, '|', 1, true) - 1))
    if running[o] then running[o] = running[o] + 1 end
  end
  while #out < n do
    local best = nil
    for _, o in ipairs(order) do
      if #owners[o] > 0 and (best == nil or running[o] < running[best]) then best = o end
    end
    if best == nil then break end
    local ids = owners[best]
    local popped = redis.call('ZPOPMIN', P .. 'pending:' .. ids[1], 1)
    if #popped > 0 then
      take(ids[1], popped[1])
      running[best] = running[best] + 1
    else
      table.remove(ids, 1)
    end
  end
end
return out
"""

_COMPLETE = """
local P = ARGV[5]
local m = ARGV[1]
if redis.call('HGET', KEYS[2], m) ~= ARGV[2] or not redis.call('ZSCORE', KEYS[1], m) then return 0 end
local sep = string.find(m, '|', 1, true)
local id, idx = string.sub(m, 1, sep - 1), string.sub(m, sep + 1)
redis.call('ZREM', KEYS[1], m)
redis.call('HDEL', KEYS[2], m)
redis.call('ZREM', P .. 'brun:' .. id, idx)
redis.call('HSET', P .. 'done:' .. id, idx, ARGV[4] .. ARGV[3])
redis.call('HINCRBY', P .. 'batch:' .. id, ARGV[4] == '1' and 'failed' or 'completed', 1)
return 1
"""

_RELEASE = """
local P = ARGV[2]
for i = 3, #ARGV do
  local m = ARGV[i]
  if redis.call('HGET', KEYS[2], m) == ARGV[1] and redis.call('ZSCORE', KEYS[1], m) then
    local sep = string.find(m, '|', 1, true)
    local id, idx = string.sub(m, 1, sep - 1), string.sub(m, sep + 1)
    redis.call('ZREM', KEYS[1], m)
    redis.call('HDEL', KEYS[2], m)
    redis.call('ZREM', P .. 'brun:' .. id, idx)
    redis.call('ZADD', P .. 'pending:' .. id, tonumber(idx), idx)
  end
end
return 0
"""

_RENEW = """
local P = ARGV[3]
redis.call('ZADD', P .. 'runners', ARGV[4], ARGV[1])
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  if all[i + 1] == ARGV[1] and redis.call('ZSCORE', KEYS[1], all[i]) then
    local m = all[i]
    local sep = string.find(m, '|', 1, true)
    redis.call('ZADD', KEYS[1], ARGV[2], m)
    redis.call('ZADD', P .. 'brun:' .. string.sub(m, 1, sep - 1), ARGV[2], string.sub(m, sep + 1))
  end
end
return 0
"""


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class RedisBatchStore:
    def __init__(self, url: str):
        import redis.asyncio as aioredis
        from redis.exceptions import WatchError

        self._redis = aioredis.from_url(url)
        self._watch_error = WatchError
        self._claim = self._redis.register_script(_CLAIM)
        self._complete = self._redis.register_script(_COMPLETE)
        self._release = self._redis.register_script(_RELEASE)
        self._renew = self._redis.register_script(_RENEW)

    @staticmethod
    def _key(batch_id: str) -> str:
        return f"{P}batch:{batch_id}"

    @staticmethod
    def _object(h: dict) -> dict[str, Any]:
        obj = msgspec.json.decode(h[b"record"])
        obj["status"] = _s(h[b"status"])
        obj["request_counts"] = {"total": int(h.get(b"total", 0)), "completed": int(h.get(b"completed", 0)),
                                 "failed": int(h.get(b"failed", 0))}
        return obj

    # -- the API's side ----------------------------------------------------------------------------
    async def create(self, batch: dict[str, Any], owner: str, tenant: str, *,
                     output_expires_s: int | None = None) -> None:
        now = time.time()
        expiry = {} if output_expires_s is None else {"output_expires_s": output_expires_s}
        async with self._redis.pipeline(transaction=True) as p:
            p.hset(self._key(batch["id"]), mapping={
                "record": msgspec.json.encode(batch), "status": batch["status"], "final_status": "",
                "owner": owner, "tenant": tenant, "created_at": now, "expires_at": batch["expires_at"],
                "lease_owner": "", "lease_until": 0, "total": 0, "completed": 0, "failed": 0, **expiry})
            p.zadd(f"{P}batches:{owner}", {batch["id"]: now})
            p.zadd(OPEN, {batch["id"]: now})
            p.hincrby(STATUS_COUNTS, batch["status"], 1)
            await p.execute()

    async def get(self, batch_id: str, owner: str | None) -> dict[str, Any] | None:
        h = await self._redis.hgetall(self._key(batch_id))
        if not h or (owner is not None and _s(h[b"owner"]) != owner):
            return None
        return self._object(h)

    async def list(self, owner: str, *, after: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        ids = [_s(i) for i in await self._redis.zrevrange(f"{P}batches:{owner}", 0, -1)]
        if after:
            ids = ids[ids.index(after) + 1:] if after in ids else []
        ids = ids[:limit + 1]
        async with self._redis.pipeline(transaction=False) as p:
            for i in ids:
                p.hgetall(self._key(i))
            rows = await p.execute()
        objs = [self._object(h) for h in rows if h]
        return objs[:limit], len(objs) > limit

    async def _change(self, batch_id: str, fn) -> Any:
        """`fn(h, pipe)` on the batch's hash under WATCH: it queues its writes (after
        `pipe.multi()`) and returns a result; redone when the hash changed meanwhile."""
        key = self._key(batch_id)
        async with self._redis.pipeline(transaction=True) as p:
            while True:
                try:
                    await p.watch(key)
                    h = await p.hgetall(key)
                    result = await fn(h, p)
                    if p.explicit_transaction:
                        await p.execute()
                    else:
                        await p.unwatch()
                    return result
                except self._watch_error:
                    continue

    @staticmethod
    def _set_status(p, batch_id: str, h: dict, status: str, *, record: dict | None = None, **fields) -> None:
        obj = record if record is not None else msgspec.json.decode(h[b"record"])
        old = _s(h[b"status"])
        obj["status"] = status
        field = STATUS_TIME.get(status)
        if field is not None and old != status:
            obj[field] = int(time.time())
        p.hset(RedisBatchStore._key(batch_id), mapping={"record": msgspec.json.encode(obj), "status": status, **fields})
        if old != status:
            p.hincrby(STATUS_COUNTS, old, -1)
            p.hincrby(STATUS_COUNTS, status, 1)

    async def cancel(self, batch_id: str, owner: str) -> dict[str, Any] | None:
        async def fn(h, p):
            if not h or _s(h[b"owner"]) != owner:
                return None
            if _s(h[b"status"]) in ACTIVE:
                p.multi()
                self._set_status(p, batch_id, h, "cancelling", final_status="cancelled")
            return True

        if await self._change(batch_id, fn) is None:
            return None
        return await self.get(batch_id, owner)

    # -- the runners' side -------------------------------------------------------------------------
    async def claim_task(self, me: str, lease_s: float) -> Task | None:
        ids = [_s(i) for i in await self._redis.zrange(OPEN, 0, -1)]
        if not ids:
            return None
        now = time.time()
        async with self._redis.pipeline(transaction=False) as p:
            for i in ids:
                p.hmget(self._key(i), "status", "expires_at", "lease_until")
                p.zcard(f"{P}pending:{i}")
                p.zcard(f"{P}brun:{i}")
                p.zcount(f"{P}brun:{i}", f"({now}", "+inf")
            rows = await p.execute()
        for n, batch_id in enumerate(ids):
            (status, expires, lease_until), pending, running, live = rows[4 * n:4 * n + 4]
            if status is None or float(lease_until or 0) > now:
                continue
            status = _s(status)
            due = ((status in ACTIVE and float(expires) <= now) or status in ("validating", "finalizing")
                   or (status == "in_progress" and pending == 0 and running == 0)
                   or (status == "cancelling" and live == 0))
            if not due:
                continue
            task = await self._take(batch_id, me, now, lease_s)
            if task is not None:
                return task
        return None

    async def _take(self, batch_id: str, me: str, now: float, lease_s: float) -> Task | None:
        async def fn(h, p):
            if not h or float(h[b"lease_until"]) > now:
                return None
            obj = msgspec.json.decode(h[b"record"])
            status = obj["status"] = _s(h[b"status"])
            owner = _s(h[b"owner"])
            if status not in ("validating", "in_progress", "cancelling", "finalizing"):
                return None
            kind, final = task_step(status, obj["expires_at"] <= now, _s(h.get(b"final_status") or b""))
            expires_s = h.get(b"output_expires_s")
            task = Task(kind, obj, owner, final, None if expires_s is None else int(expires_s))
            p.multi()
            p.hset(self._key(batch_id), mapping={"lease_owner": me, "lease_until": now + lease_s})
            return task

        return await self._change(batch_id, fn)

    @staticmethod
    def _holds(h: dict, me: str) -> bool:
        return bool(h) and _s(h[b"lease_owner"]) == me

    async def start_run(self, batch_id: str, me: str, lines: list[NewLine]) -> bool:
        async def fn(h, p):
            if not self._holds(h, me):
                return False
            if _s(h[b"status"]) != "validating":  # cancelled meanwhile: its finalize need not wait for the lease
                p.multi()
                p.hset(self._key(batch_id), mapping={"lease_owner": "", "lease_until": 0})
                return False
            p.multi()
            for k in ("lines", "pending", "done", "brun"):
                p.delete(f"{P}{k}:{batch_id}")
            for start in range(0, len(lines), 1000):
                chunk = lines[start:start + 1000]
                p.hset(f"{P}lines:{batch_id}", mapping={
                    str(ln.idx): msgspec.json.encode([ln.custom_id, (ln.body or b"").decode()]) for ln in chunk})
                pending = {str(ln.idx): ln.idx for ln in chunk if ln.error is None}
                if pending:
                    p.zadd(f"{P}pending:{batch_id}", pending)
                errors = {str(ln.idx): b"1" + ln.error for ln in chunk if ln.error is not None}
                if errors:
                    p.hset(f"{P}done:{batch_id}", mapping=errors)
            failed = sum(1 for ln in lines if ln.error is not None)
            self._set_status(p, batch_id, h, "in_progress", total=len(lines), completed=0, failed=failed,
                             lease_owner="", lease_until=0)
            return True

        return await self._change(batch_id, fn)

    async def fail(self, batch_id: str, me: str, errors: list[dict[str, Any]]) -> bool:
        async def fn(h, p):
            if not self._holds(h, me):
                return False
            obj = msgspec.json.decode(h[b"record"])
            obj["errors"] = {"object": "list", "data": errors}
            p.multi()
            self._set_status(p, batch_id, h, "failed", record=obj, lease_owner="", lease_until=0)
            p.zrem(OPEN, batch_id)
            return True

        return await self._change(batch_id, fn)

    async def claim_lines(self, me: str, want: int, max_running: int, lease_s: float) -> list[Line]:
        now = time.time()
        members = await self._claim(keys=[RUNNING, OPEN, LEASE],
                                    args=[me, repr(now), repr(now + lease_s), want, max_running, P, repr(lease_s)])
        if not members:
            return []
        keys = [tuple(_s(m).split("|", 1)) for m in members]
        batch_ids = sorted({b for b, _ in keys})
        async with self._redis.pipeline(transaction=False) as p:
            for b in batch_ids:
                p.hmget(self._key(b), "record", "owner", "tenant")
            for b, i in keys:
                p.hget(f"{P}lines:{b}", i)
            rows = await p.execute()
        meta = {}
        for b, (record, owner, tenant) in zip(batch_ids, rows[:len(batch_ids)]):
            meta[b] = (msgspec.json.decode(record)["endpoint"], _s(owner), _s(tenant))
        out = []
        for (b, i), data in zip(keys, rows[len(batch_ids):]):
            custom_id, body = msgspec.json.decode(data)
            url, owner, tenant = meta[b]
            out.append(Line(b, int(i), custom_id, url, body.encode(), owner, tenant))
        return out

    async def renew(self, me: str, lease_s: float) -> None:
        now = time.time()
        await self._renew(keys=[RUNNING, LEASE], args=[me, repr(now + lease_s), P, repr(now)])

    async def complete(self, me: str, batch_id: str, idx: int, answer: bytes, failed: bool) -> bool:
        done = await self._complete(keys=[RUNNING, LEASE],
                                    args=[f"{batch_id}|{idx}", me, answer, "1" if failed else "0", P])
        return bool(done)

    async def release(self, me: str, keys: list[tuple[str, int]]) -> None:
        if keys:
            await self._release(keys=[RUNNING, LEASE], args=[me, P, *(f"{b}|{i}" for b, i in keys)])

    async def statuses(self, batch_ids: list[str]) -> dict[str, str]:
        if not batch_ids:
            return {}
        async with self._redis.pipeline(transaction=False) as p:
            for b in batch_ids:
                p.hmget(self._key(b), "status", "expires_at")
            rows = await p.execute()
        now = time.time()
        out = {}
        for b, (status, expires) in zip(batch_ids, rows):
            if status is not None:
                s = _s(status)
                out[b] = "expired" if s in ACTIVE and float(expires) <= now else s
        return out

    async def answers(self, batch_id: str, after: int = -1, limit: int = -1) -> list[tuple[int, bool, bytes]]:
        end = int(await self._redis.hget(self._key(batch_id), "total") or 0)
        out: list[tuple[int, bool, bytes]] = []
        start = after + 1
        while start < end and (limit < 0 or len(out) < limit):  # (answers in index order, a page at a time)
            idxs = list(range(start, min(end, start + (1000 if limit < 0 else max(limit - len(out), 1)))))
            for i, v in zip(idxs, await self._redis.hmget(f"{P}done:{batch_id}", idxs)):
                if v is not None:
                    out.append((i, v[:1] == b"1", v[1:]))
            start = idxs[-1] + 1
        return out if limit < 0 else out[:limit]

    async def begin_finalize(self, batch_id: str, me: str, final_status: str, unfinished_answer) -> bool:
        async def fn(h, p):
            if not self._holds(h, me):
                return False
            pending = [_s(i) for i in await p.zrange(f"{P}pending:{batch_id}", 0, -1)]
            running = [_s(i) for i in await p.zrange(f"{P}brun:{batch_id}", 0, -1)]
            answers = {}
            if final_status == "expired":
                unfinished = pending + running
                datas = await p.hmget(f"{P}lines:{batch_id}", unfinished) if unfinished else []
                for i, data in zip(unfinished, datas):
                    answers[i] = b"1" + unfinished_answer(msgspec.json.decode(data)[0])
            p.multi()
            if answers:
                p.hset(f"{P}done:{batch_id}", mapping=answers)
                p.delete(f"{P}pending:{batch_id}")
            if final_status == "expired" or final_status == "cancelled":
                # (a cancel gets here once none of its lines runs: these leases expired)
                for i in running:
                    p.zrem(RUNNING, f"{batch_id}|{i}")
                    p.hdel(LEASE, f"{batch_id}|{i}")
                p.delete(f"{P}brun:{batch_id}")
            status = "cancelling" if final_status == "cancelled" else "finalizing"
            extra = {"failed": int(h[b"failed"]) + len(answers)} if answers else {}
            self._set_status(p, batch_id, h, status, final_status=final_status, **extra)
            return True

        return await self._change(batch_id, fn)

    async def end_finalize(self, batch_id: str, me: str, output_file_id: str | None,
                           error_file_id: str | None) -> bool:
        async def fn(h, p):
            if not self._holds(h, me):
                return False
            obj = msgspec.json.decode(h[b"record"])
            obj["output_file_id"] = output_file_id
            obj["error_file_id"] = error_file_id
            p.multi()
            self._set_status(p, batch_id, h, _s(h[b"final_status"]), record=obj, lease_owner="", lease_until=0)
            p.zrem(OPEN, batch_id)
            # the lines and their answers are in the output files now: not kept twice
            p.delete(f"{P}lines:{batch_id}", f"{P}done:{batch_id}", f"{P}pending:{batch_id}", f"{P}brun:{batch_id}")
            return True

        return await self._change(batch_id, fn)

    async def counts_by_status(self) -> dict[str, int]:
        counts = await self._redis.hgetall(STATUS_COUNTS)
        return {_s(k): int(v) for k, v in counts.items()}

    async def close(self) -> None:
        await self._redis.aclose()
