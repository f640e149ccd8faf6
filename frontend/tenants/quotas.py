"""Per-tenant quotas of the keys file, held deployment-wide across the workers of one supervisor.

Counting is admission control's scheme (serving/admission.py, vLLM's `SharedAdmissionStats`):
one shared file in the runtime directory, mmap'ed by every worker; each worker writes only its
own record per tenant and a check sums the records of every worker. Nothing is locked; two
workers admitting at the same instant may both pass, so a limit can be overshot by at most
one request per other worker. A record (384 bytes, cache-line aligned) holds:

    in_flight                  this worker's requests of the tenant in progress now
    requests ring              10 buckets of 100 ms: (bucket number, requests started)
    tokens ring                12 buckets of 5 s:    (bucket number, tokens charged)

A ring is summed over the buckets still inside its window (one second, one minute), so the
windows slide in bucket steps; a bucket is reused once its number has left the window (its
count written before its number, so a reader never counts a stale count as fresh).

The tenant's row is its position in the keys file, so a reload builds a new table: it lives in
a new file (`tenant-quotas.<generation>`), into which each worker carries its own counts by
tenant name as it takes the reload; the supervisor removes the files of older generations. A
restarted worker keeps its predecessor's rings (the tokens were spent) and zeroes its in-flight
counts (those requests are gone).

What is limited and when:

- `admit` (the auth middleware, each POST on a guarded path, before the body is read):
  concurrency, requests per second, and tokens per minute already spent; it starts the
  request's `Lease`, which the middleware releases when the handler ends, whatever ended it.
- `Lease.check_submit` / `Lease.submitted` (serving/responder.py, when a generation request is
  sent): the `max_tokens` rule (more than the tenant's limit asked: 400 naming it; not asked: capped
  to it) and the prompt tokens against tokens per minute, charged once the request is sent.
- `Lease.on_end` (llm/generation.py, each engine request's end): its completion tokens.

Over a limit the answer is a 429 in OpenAI's shape (`type` "requests" or "tokens", `code`
"rate_limit_exceeded") with `Retry-After` (whole seconds) and `retry-after-ms`.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import time
from typing import Any

from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.tenants.keys_file import KeyEntry, Limits

FILE_PREFIX = "tenant-quotas."
_Q = 48  # int64 values per record: 384 bytes, six cache lines
RECORD = _Q * 8
_INFLIGHT = 0
RPS_BUCKETS, RPS_WIDTH = 10, 0.1  # a one-second window
TPM_BUCKETS, TPM_WIDTH = 12, 5.0  # a one-minute window
_RPS_E, _RPS_C = 1, 1 + RPS_BUCKETS  # bucket numbers, then counts
_TPM_E, _TPM_C = 1 + 2 * RPS_BUCKETS, 1 + 2 * RPS_BUCKETS + TPM_BUCKETS
_INT = struct.Struct("<q")
# Bucket numbers start far from 0, so that an unwritten bucket (0) is never inside a window.
_EPOCH_BASE = 1 << 20

REASONS = ("requests_per_second", "tokens_per_minute", "max_concurrency", "max_tokens")


def quota_file(runtime_dir: str, generation: int) -> str:
    return os.path.join(runtime_dir, f"{FILE_PREFIX}{generation}")


def remove_older_files(runtime_dir: str, keep_from: int) -> None:
    """Drop the counter files of generations before `keep_from` (workers that still map one
    keep their mapping until they reload)."""
    try:
        names = os.listdir(runtime_dir)
    except OSError:
        return
    for name in names:
        if name.startswith(FILE_PREFIX) and name[len(FILE_PREFIX):].isdigit():
            if int(name[len(FILE_PREFIX):]) < keep_from:
                try:
                    os.unlink(os.path.join(runtime_dir, name))
                except OSError:
                    pass


class QuotaExceeded(APIError):
    """429 in OpenAI's rate-limit shape, with when to retry (None: retrying cannot help)."""

    def __init__(self, reason: str, message: str, retry_after: float | None):
        super().__init__(429, message, None, "tokens" if reason == "tokens_per_minute" else "requests")
        self.reason = reason
        self.retry_after = retry_after

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.err_type, "param": None,
                          "code": "rate_limit_exceeded"}}

    def to_response(self):
        resp = super().to_response()
        if self.retry_after is not None:
            resp.headers["Retry-After"] = str(max(1, math.ceil(self.retry_after)))
            resp.headers["retry-after-ms"] = str(max(1, math.ceil(self.retry_after * 1000)))
        return resp


class _Board:
    """The counter file of one generation of the key table: a row per tenant, a record per
    worker in each row."""

    def __init__(self, runtime_dir: str, generation: int, num_tenants: int, num_workers: int, worker_index: int):
        self.generation = generation
        self.num_workers = num_workers
        self.worker_index = worker_index
        self.row_bytes = num_workers * RECORD
        size = max(1, num_tenants) * self.row_bytes
        fd = os.open(quota_file(runtime_dir, generation), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.row = struct.Struct(f"<{num_workers * _Q}q")

    def own(self, index: int) -> int:
        return index * self.row_bytes + self.worker_index * RECORD

    def read(self, index: int) -> tuple[int, ...]:
        return self.row.unpack_from(self.map, index * self.row_bytes)


def _ring_sum(values: tuple[int, ...], num_workers: int, e0: int, c0: int, buckets: int, lo: int) -> int:
    total = 0
    for base in range(0, num_workers * _Q, _Q):
        es = values[base + e0:base + e0 + buckets]
        cs = values[base + c0:base + c0 + buckets]
        for e, c in zip(es, cs):
            if e >= lo:
                total += c
    return total


def _retry_after(values: tuple[int, ...], num_workers: int, e0: int, c0: int, buckets: int, width: float,
                 now: float, excess: int) -> float:
    """Seconds until enough of the window's oldest counts leave it to free `excess`."""
    cur = int(now / width) + _EPOCH_BASE
    lo = cur - buckets + 1
    per: dict[int, int] = {}
    for base in range(0, num_workers * _Q, _Q):
        for k in range(buckets):
            e, c = values[base + e0 + k], values[base + c0 + k]
            if e >= lo and c:
                per[e] = per.get(e, 0) + c
    freed = 0
    for e in sorted(per):
        freed += per[e]
        if freed >= excess:
            return max(0.001, (e + buckets - _EPOCH_BASE) * width - now)
    return buckets * width


class TenantQuota:
    """One tenant's limits and this worker's counts of it; one object per tenant name, kept
    across reloads (a lease taken under the old table releases into the new one)."""

    __slots__ = ("name", "limits", "in_flight", "_board", "_index", "_own", "_recorder")

    def __init__(self, name: str, recorder: Any):
        self.name = name
        self.limits = Limits()
        self.in_flight = 0
        self._board: _Board | None = None
        self._index = 0
        self._own = 0
        self._recorder = recorder

    # -- table changes (TenantQuotas.install) -------------------------------------------
    def _move(self, board: _Board, index: int, limits: Limits) -> None:
        own = board.own(index)
        old = self._board
        if old is not None and old is not board:
            # This worker's rings follow the tenant into the new table.
            board.map[own + 8:own + RECORD] = old.map[self._own + 8:self._own + RECORD]
        self._board, self._index, self._own, self.limits = board, index, own, limits
        self._publish_in_flight()

    def _detach(self) -> None:
        self._board = None

    def _publish_in_flight(self) -> None:
        if self._board is not None:
            _INT.pack_into(self._board.map, self._own + _INFLIGHT * 8, self.in_flight)

    def _add(self, e0: int, c0: int, buckets: int, width: float, amount: int, now: float) -> None:
        board = self._board
        if board is None:
            return
        cur = int(now / width) + _EPOCH_BASE
        k = cur % buckets
        eoff, coff = self._own + (e0 + k) * 8, self._own + (c0 + k) * 8
        m = board.map
        if _INT.unpack_from(m, eoff)[0] == cur:
            _INT.pack_into(m, coff, _INT.unpack_from(m, coff)[0] + amount)
        else:  # a new bucket: its count first, then its number
            _INT.pack_into(m, coff, amount)
            _INT.pack_into(m, eoff, cur)

    def _reject(self, reason: str, message: str, retry_after: float | None) -> QuotaExceeded:
        if self._recorder is not None:
            self._recorder.tenant_rejected(self.name, reason)
        return QuotaExceeded(reason, message, retry_after)

    # -- a request ----------------------------------------------------------------------
    def admit(self) -> "Lease":
        """Start a request (raises QuotaExceeded): concurrency, requests per second and the
        tokens of the last minute, summed over every worker."""
        lim = self.limits
        board = self._board
        now = time.monotonic()
        conc, rps, tpm = lim.max_concurrency, lim.requests_per_second, lim.tokens_per_minute
        if board is not None and (conc is not None or rps is not None or tpm is not None):
            v = board.read(self._index)
            w = board.num_workers
            if conc is not None:
                running = sum(v[_INFLIGHT::_Q])
                if running >= conc:
                    raise self._reject("max_concurrency", f"Concurrency limit reached for `{self.name}`: "
                                       f"Limit {conc}, In progress {running}. Please try again later.", 1.0)
            if rps is not None:
                lo = int(now / RPS_WIDTH) + _EPOCH_BASE - RPS_BUCKETS + 1
                used = _ring_sum(v, w, _RPS_E, _RPS_C, RPS_BUCKETS, lo)
                if used + 1 > rps:
                    wait = _retry_after(v, w, _RPS_E, _RPS_C, RPS_BUCKETS, RPS_WIDTH, now, used + 1 - rps)
                    raise self._reject("requests_per_second", f"Rate limit reached for `{self.name}` on requests "
                                       f"per second (RPS): Limit {rps}, Used {used}, Requested 1. Please try "
                                       f"again in {wait:.3g}s.", wait)
            if tpm is not None:
                used = self._tokens_used(v, now)
                if used >= tpm:
                    wait = _retry_after(v, w, _TPM_E, _TPM_C, TPM_BUCKETS, TPM_WIDTH, now, used + 1 - tpm)
                    raise self._reject("tokens_per_minute", f"Rate limit reached for `{self.name}` on tokens per "
                                       f"min (TPM): Limit {tpm}, Used {used}. Please try again in {wait:.3g}s.", wait)
            if rps is not None:
                self._add(_RPS_E, _RPS_C, RPS_BUCKETS, RPS_WIDTH, 1, now)
        self.in_flight += 1
        self._publish_in_flight()
        if self._recorder is not None:
            self._recorder.tenant_admitted(self.name)
        return Lease(self)

    def _tokens_used(self, v: tuple[int, ...], now: float) -> int:
        assert self._board is not None
        lo = int(now / TPM_WIDTH) + _EPOCH_BASE - TPM_BUCKETS + 1
        return _ring_sum(v, self._board.num_workers, _TPM_E, _TPM_C, TPM_BUCKETS, lo)

    def _release(self) -> None:
        self.in_flight -= 1
        self._publish_in_flight()

    def check_tokens(self, prompt_tokens: int) -> None:
        """The prompt's tokens against the tokens per minute left (raises QuotaExceeded)."""
        tpm = self.limits.tokens_per_minute
        board = self._board
        if tpm is None or board is None:
            return
        if prompt_tokens > tpm:
            raise self._reject("tokens_per_minute", f"Request too large for `{self.name}` on tokens per min "
                               f"(TPM): Limit {tpm}, Requested {prompt_tokens}. The input or output tokens must "
                               "be reduced in order to run successfully.", None)
        now = time.monotonic()
        v = board.read(self._index)
        used = self._tokens_used(v, now)
        if used + prompt_tokens > tpm:
            wait = _retry_after(v, board.num_workers, _TPM_E, _TPM_C, TPM_BUCKETS, TPM_WIDTH, now,
                                used + prompt_tokens - tpm)
            raise self._reject("tokens_per_minute", f"Rate limit reached for `{self.name}` on tokens per min "
                               f"(TPM): Limit {tpm}, Used {used}, Requested {prompt_tokens}. Please try again "
                               f"in {wait:.3g}s.", wait)

    def charge_tokens(self, tokens: int) -> None:
        if tokens > 0 and self.limits.tokens_per_minute is not None:
            self._add(_TPM_E, _TPM_C, TPM_BUCKETS, TPM_WIDTH, tokens, time.monotonic())


class Lease:
    """One admitted request of a named tenant: released once (the middleware's `finally`);
    the output sink's `quota` of its engine requests, which charge their completion tokens at
    their end (`on_end`)."""

    __slots__ = ("quota", "released")

    def __init__(self, quota: TenantQuota):
        self.quota = quota
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.quota._release()

    def check_submit(self, samplings: list[dict[str, Any]], requested_max_tokens: int | None,
                     prompt_tokens: int) -> None:
        """Before a generation request is sent: the `max_tokens` rule (raises APIError 400
        when more was asked than the tenant may; an unset `max_tokens` is capped in the
        sampling maps) and the prompt against tokens per minute (raises QuotaExceeded)."""
        q = self.quota
        cap = q.limits.max_tokens
        if cap is not None:
            if requested_max_tokens is not None and requested_max_tokens > cap:
                if q._recorder is not None:
                    q._recorder.tenant_rejected(q.name, "max_tokens")
                raise APIError(400, f"max_tokens is {requested_max_tokens}, more than this API key's limit of "
                               f"{cap} tokens per completion (max_tokens).", "max_tokens")
            for sampling in samplings:
                if sampling.get("max_tokens", cap + 1) > cap:
                    sampling["max_tokens"] = cap
        q.check_tokens(prompt_tokens)

    def submitted(self, prompt_tokens: int) -> None:
        """The request reached the engine: its prompt tokens count."""
        q = self.quota
        q.charge_tokens(prompt_tokens)
        if q._recorder is not None:
            q._recorder.tenant_tokens(q.name, prompt_tokens, 0)

    def on_end(self, gen) -> None:
        """An engine request ended (`Generation._finish`): its completion tokens count."""
        q = self.quota
        tokens = gen.num_output_tokens
        q.charge_tokens(tokens)
        if q._recorder is not None:
            q._recorder.tenant_tokens(q.name, 0, tokens)


class TenantQuotas:
    """This worker's quota counters of every named tenant."""

    def __init__(self, runtime_dir: str, worker_index: int, num_workers: int, recorder: Any = None):
        self.runtime_dir = runtime_dir
        self.worker_index = worker_index
        self.num_workers = max(1, num_workers, worker_index + 1)
        self.recorder = recorder  # tenant_admitted(name), tenant_rejected(name, reason), tenant_tokens(name, p, c)
        self.by_name: dict[str, TenantQuota] = {}
        self.generation: int | None = None

    def install(self, generation: int, entries: list[KeyEntry]) -> dict[str, TenantQuota]:
        """Take a new key table: a new counter file, this worker's counts carried into it."""
        board = _Board(self.runtime_dir, generation, len(entries), self.num_workers, self.worker_index)
        current: dict[str, TenantQuota] = {}
        for i, e in enumerate(entries):
            q = self.by_name.get(e.name)
            if q is None:
                q = TenantQuota(e.name, self.recorder)
            q._move(board, i, e.limits)  # (a restarted worker's in-flight counts start at 0)
            current[e.name] = q
        for name, q in self.by_name.items():
            if name not in current:
                q._detach()
        self.by_name = current
        self.generation = generation
        return current
