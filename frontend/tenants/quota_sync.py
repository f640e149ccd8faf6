"""Quotas held across replicas: a shared Redis (`--quota-store`, by default the `--response-store`
when that is Redis) carries each replica's counts of every tenant to the others.

One worker per replica (worker 0) runs a `QuotaSync`. Every `interval` (100 ms) it sums its
deployment's records of each tenant (every local worker's in-flight requests, requests this
second and the one before, tokens this minute and the one before), writes the sums into Redis
under its replica id, reads the other replicas' sums back, and writes what they add up to into
the row's record of the other replicas (tenants/quotas.py), which every check of every local
worker sums with its own. The round trip is one pipeline for all tenants, off the request path:
a check never waits on Redis.

What this holds: a tenant limited to N per second gets at most N per second across replicas,
plus what the other replicas admitted in the last interval before this one saw it (the same
kind of slack as between the workers of one replica, one interval wide). A replica whose sums
are older than `stale` seconds (it stopped or lost Redis) no longer counts.

When Redis does not answer: the replica goes on with its own counts (fail-open, the default;
a warning once per outage, `vllm_frontend_quota_store_errors_total`), or with
`--quota-store-failure closed` refuses the requests of tenants with limits (503) until it
answers again.

Keys: `vpf:quota:<tenant>`, a hash: replica id -> JSON `[time, in_flight, rps window, rps
current, rps previous, tpm window, tpm current, tpm previous]`; fields older than `stale` are
deleted by whichever replica sees them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
import struct
import time
from typing import Any

from vllm_pyfrontend.tenants.quotas import (
    _INFLIGHT, _Q, _RPS, _SYNCED, _TPM, RECORD, RPS_WINDOW, TPM_WINDOW, TenantQuotas, _rate,
)

log = logging.getLogger(__name__)

PREFIX = "vpf:quota:"
_RECORD = struct.Struct(f"<{_Q}q")


def _aligned(w: int, cur: int, prev: int, win: int) -> tuple[int, int]:
    """(current, previous) of a rate counted in window `w`, seen from window `win`."""
    if w == win:
        return cur, prev
    if w == win - 1:
        return 0, cur
    return 0, 0


class QuotaSync:
    def __init__(self, quotas: TenantQuotas, url: str, *, recorder: Any = None, interval: float = 0.05,
                 stale: float = 2.0):
        import redis.asyncio as aioredis

        self.quotas = quotas
        self.url = url
        self.recorder = recorder
        self.interval = interval
        self.stale = stale
        self.replica = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self._redis = aioredis.from_url(url, socket_timeout=max(0.5, 5 * interval),
                                        socket_connect_timeout=max(0.5, 5 * interval))
        self._task: asyncio.Task | None = None
        self.down: str | None = None  # why the last sync failed (None: it answered)
        self._down_since: float | None = None
        self.syncs = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        await self._redis.aclose()

    async def _run(self) -> None:
        while True:
            try:
                await self.sync_once()
                if self.down is not None:
                    log.warning("quota store %s answers again: limits hold across replicas", self.url)
                self.down = self._down_since = None
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - Redis gone or slow: local counts go on
                if self.down is None:
                    log.warning("quota store %s does not answer (%s: %s): %s", self.url, type(e).__name__, e,
                                "refusing limited tenants' requests (--quota-store-failure closed)"
                                if self.quotas.fail_closed else "limits hold per replica until it answers")
                self.down = f"{type(e).__name__}: {e}"
                if self.recorder is not None:
                    self.recorder.quota_store_error()
                self._forget_replicas()
            await asyncio.sleep(self.interval)

    def _rows(self) -> list[tuple[str, Any, int]]:
        """(tenant, board, row) of every named tenant of the table in use."""
        return [(name, q._board, q._index) for name, q in self.quotas.by_name.items() if q._board is not None]

    async def sync_once(self) -> None:
        rows = self._rows()
        if not rows:
            return
        now = time.time()
        rps_win, tpm_win = int(now / RPS_WINDOW), int(now / TPM_WINDOW)
        async with self._redis.pipeline(transaction=False) as p:
            for name, board, index in rows:
                v = board.read(index)
                local = board.bases[:-1]  # this replica's workers (not the other replicas' record)
                in_flight = sum(v[base + _INFLIGHT] for base in local)
                rps_cur, rps_prev, _ = _rate(board, v, _RPS, RPS_WINDOW, now, local)
                tpm_cur, tpm_prev, _ = _rate(board, v, _TPM, TPM_WINDOW, now, local)
                p.hset(PREFIX + name, self.replica, json.dumps(
                    [now, in_flight, rps_win, rps_cur, rps_prev, tpm_win, tpm_cur, tpm_prev]))
                p.hgetall(PREFIX + name)
            replies = await p.execute()
        stale: list[tuple[str, list[bytes]]] = []
        for (name, board, index), others in zip(rows, replies[1::2]):
            total = [0] * 7
            old = []
            for field, raw in others.items():
                if field.decode() == self.replica:
                    continue
                t, in_flight, rw, rc, rp, tw, tc, tp = json.loads(raw)
                if now - t > self.stale:
                    old.append(field)
                    continue
                total[0] += in_flight
                cur, prev = _aligned(rw, rc, rp, rps_win)
                total[2] += cur
                total[3] += prev
                cur, prev = _aligned(tw, tc, tp, tpm_win)
                total[5] += cur
                total[6] += prev
            if old:
                stale.append((name, old))
            _RECORD.pack_into(board.map, board.replicas(index), total[0], rps_win, total[2], total[3],
                              tpm_win, total[5], total[6], 1)
        for name, fields in stale:
            await self._redis.hdel(PREFIX + name, *fields)
        self.syncs += 1

    def _forget_replicas(self) -> None:
        """Redis does not answer: the other replicas' counts stop counting once stale, and the
        record says the store is down (a fail-closed check refuses meanwhile)."""
        for _, board, index in self._rows():
            off = board.replicas(index)
            rec = list(_RECORD.unpack_from(board.map, off))
            rec[_SYNCED] = 0
            _RECORD.pack_into(board.map, off, *rec)
        if self._down_since is None:
            self._down_since = time.time()
        if time.time() - self._down_since > self.stale:
            for _, board, index in self._rows():
                _RECORD.pack_into(board.map, board.replicas(index), 0, 0, 0, 0, 0, 0, 0, 0)


assert RECORD == _RECORD.size
