"""Per-tenant quotas of the keys file, held deployment-wide across the workers of one supervisor.

Counting is admission control's scheme (serving/admission.py, vLLM's `SharedAdmissionStats`):
one shared file in the runtime directory, mmap'ed by every worker; each worker writes only its
own record per tenant and a check sums the records of every worker (one read of the tenant's
row). Nothing is locked; two workers admitting at the same instant may both pass, so a limit
can be overshot by at most one request per other worker. A record is one cache line:

    in_flight                          this worker's requests of the tenant in progress now
    window, requests, previous         requests started in this second and the one before
    window, tokens, previous           tokens charged in this minute and the one before

Each row has one record more, the other replicas' sums (the same fields, and whether the quota
store answered), written by one worker per replica when replicas share a quota store
(`quota_sync.py`); a check sums it with the rest. Windows are numbered by wall-clock time, so
every replica's windows are the same ones.

A rate is a sliding window estimated from two fixed ones (as nginx's and Cloudflare's rate
limiters do): at fraction f into the current window, what the last full window length used is
`previous * (1 - f) + current`. Three numbers per rate and worker, so a check reads a few
values per worker however busy the tenant is; the estimate assumes the previous window's
requests were spread evenly over it.

The tenant's row is its position in the keys file, so a reload builds a new table: it lives in
a new file (`tenant-quotas.<generation>`), into which each worker carries its own counts by
tenant name as it takes the reload; the supervisor removes the files of older generations. A
restarted worker keeps its predecessor's rates (the tokens were spent) and zeroes its in-flight
counts (those requests are gone).

What is limited and when:

- `admit` (a request's scope opens, serving/scope.py: every request of every API style and
  path, HTTP, batch lines and gRPC alike): concurrency, requests per second, and tokens per
  minute already spent; it starts the request's `Lease`, released when the scope ends,
  whatever ended it (a background response holds it until its run ends).
- `Lease.reserve` (before engine work is sent): the `max_tokens` rule (more than the tenant's
  limit asked: 400 naming it; not asked: capped to it), then the prompt plus every engine
  request's `max_tokens` reserved against tokens per minute, counted at once.
- `Lease.settle` (the scope's end): the reservation comes down to the tokens used.

Over a limit the answer is a 429 in OpenAI's shape (`type` "requests" or "tokens", `code`
"rate_limit_exceeded") with `Retry-After` (whole seconds) and `retry-after-ms`.
"""

from __future__ import annotations

import math
import os
import struct
import time
from typing import Any

from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.shared_files import map_shared
from vllm_pyfrontend.tenants.keys_file import KeyEntry, Limits

FILE_PREFIX = "tenant-quotas."
_Q = 8  # int64 values per record: 64 bytes, one cache line
RECORD = _Q * 8
_INFLIGHT = 0
_RPS, _TPM = 1, 4  # where each rate's (window number, current count, previous count) starts
RPS_WINDOW, TPM_WINDOW = 1.0, 60.0
_INT = struct.Struct("<q")
_RATE = struct.Struct("<qqq")

REASONS = ("requests_per_second", "tokens_per_minute", "max_concurrency", "max_tokens", "quota_store")


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

    def __init__(self, reason: str, message: str, retry_after: float | None, status: int = 429):
        super().__init__(status, message, None, "tokens" if reason == "tokens_per_minute" else
                         "requests" if status == 429 else None)
        self.reason = reason
        self.retry_after = retry_after

    def body(self) -> dict:
        if self.status != 429:  # (the quota store does not answer, fail-closed: a 503)
            return super().body()
        return {"error": {"message": self.message, "type": self.err_type, "param": None,
                          "code": "rate_limit_exceeded"}}

    def headers(self) -> dict[str, str]:
        if self.retry_after is None:
            return {}
        return {"Retry-After": str(max(1, math.ceil(self.retry_after))),
                "retry-after-ms": str(max(1, math.ceil(self.retry_after * 1000)))}


_SYNCED = 7  # in the other replicas' record: 1 while the quota store answers (quota_sync.py)


class _Board:
    """The counter file of one generation of the key table: a row per tenant, a record per
    worker in each row, and one more for the other replicas of the deployment (their sums, kept
    by `quota_sync.QuotaSync` when a quota store is shared; zeros otherwise): every check sums
    all of them."""

    def __init__(self, runtime_dir: str, generation: int, num_tenants: int, num_workers: int, worker_index: int,
                 fail_closed: bool = False):
        self.generation = generation
        self.num_workers = num_workers
        self.worker_index = worker_index
        self.fail_closed = fail_closed  # with a quota store: refuse while it does not answer
        self.row_bytes = (num_workers + 1) * RECORD
        size = max(1, num_tenants) * self.row_bytes
        self.map = map_shared(quota_file(runtime_dir, generation), size)
        self.row = struct.Struct(f"<{(num_workers + 1) * _Q}q")
        self.bases = range(0, (num_workers + 1) * _Q, _Q)

    def replicas(self, index: int) -> int:
        """The offset of row `index`'s record of the other replicas."""
        return index * self.row_bytes + self.num_workers * RECORD

    def own(self, index: int) -> int:
        return index * self.row_bytes + self.worker_index * RECORD

    def read(self, index: int) -> tuple[int, ...]:
        return self.row.unpack_from(self.map, index * self.row_bytes)


def _rate(board: _Board, v: tuple[int, ...], at: int, window: float, now: float,
          bases: range | None = None) -> tuple[int, int, float]:
    """(current, previous, f) of one rate over every worker (or the records at `bases`): the
    counts of the current and the previous window, and how far into the current one `now` is."""
    t = now / window
    win = int(t)
    cur = prev = 0
    for base in board.bases if bases is None else bases:
        w = v[base + at]
        if w == win:
            cur += v[base + at + 1]
            prev += v[base + at + 2]
        elif w == win - 1:
            prev += v[base + at + 1]
    return cur, prev, t - win


def _wait(cur: int, prev: int, f: float, cost: int, limit: int, window: float) -> float:
    """Seconds until `cost` more fits under `limit` as the estimate slides (nothing else added)."""
    room = limit - cost
    if cur <= room:  # the previous window's share must shrink: prev * (1 - g) <= room - cur
        g = 1.0 - (room - cur) / prev if prev else f
        return max(0.001, (g - f) * window)
    # Only in the next window: cur becomes its previous one, cur * (1 - g) <= room.
    g = 1.0 - room / cur if cur else 0.0
    return max(0.001, (1.0 - f + g) * window)


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
            # This worker's rates follow the tenant into the new table.
            board.map[own + 8:own + RECORD] = old.map[self._own + 8:self._own + RECORD]
        self._board, self._index, self._own, self.limits = board, index, own, limits
        self._publish_in_flight()

    def _detach(self) -> None:
        self._board = None

    def _publish_in_flight(self) -> None:
        if self._board is not None:
            _INT.pack_into(self._board.map, self._own + _INFLIGHT * 8, self.in_flight)

    def _add(self, at: int, window: float, amount: int, now: float) -> None:
        """This worker's count of one rate, `amount` more (its record written in one go)."""
        board = self._board
        if board is None:
            return
        off = self._own + at * 8
        win = int(now / window)
        w, cur, prev = _RATE.unpack_from(board.map, off)
        if w == win:
            cur += amount
        else:
            w, cur, prev = win, amount, cur if w == win - 1 else 0
        _RATE.pack_into(board.map, off, w, cur, prev)

    def _reject(self, reason: str, message: str, retry_after: float | None, status: int = 429) -> QuotaExceeded:
        if self._recorder is not None:
            self._recorder.tenant_rejected(self.name, reason)
        return QuotaExceeded(reason, message, retry_after, status)

    # -- a request ----------------------------------------------------------------------
    def admit(self) -> "Lease":
        """Start a request (raises QuotaExceeded): concurrency, requests per second and the
        tokens of the last minute, summed over every worker."""
        lim = self.limits
        board = self._board
        conc, rps, tpm = lim.max_concurrency, lim.requests_per_second, lim.tokens_per_minute
        if board is not None and (conc is not None or rps is not None or tpm is not None):
            now = time.time()
            v = board.read(self._index)
            if board.fail_closed and not v[board.num_workers * _Q + _SYNCED]:
                raise self._reject("quota_store", f"The limits of `{self.name}` cannot be checked now (the shared "
                                   "quota store does not answer). Please try again later.", 1.0, status=503)
            if conc is not None:
                running = sum(v[_INFLIGHT::_Q])
                if running >= conc:
                    raise self._reject("max_concurrency", f"Concurrency limit reached for `{self.name}`: "
                                       f"Limit {conc}, In progress {running}. Please try again later.", 1.0)
            if rps is not None:
                cur, prev, f = _rate(board, v, _RPS, RPS_WINDOW, now)
                used = prev * (1.0 - f) + cur
                if used + 1 > rps:
                    wait = _wait(cur, prev, f, 1, rps, RPS_WINDOW)
                    raise self._reject("requests_per_second", f"Rate limit reached for `{self.name}` on requests "
                                       f"per second (RPS): Limit {rps}, Used {math.ceil(used)}, Requested 1. "
                                       f"Please try again in {wait:.3g}s.", wait)
            if tpm is not None:
                cur, prev, f = _rate(board, v, _TPM, TPM_WINDOW, now)
                used = prev * (1.0 - f) + cur
                if used >= tpm:
                    wait = _wait(cur, prev, f, 1, tpm, TPM_WINDOW)
                    raise self._reject("tokens_per_minute", f"Rate limit reached for `{self.name}` on tokens per "
                                       f"min (TPM): Limit {tpm}, Used {math.ceil(used)}. Please try again in "
                                       f"{wait:.3g}s.", wait)
            if rps is not None:
                self._add(_RPS, RPS_WINDOW, 1, now)
        self.in_flight += 1
        self._publish_in_flight()
        if self._recorder is not None:
            self._recorder.tenant_admitted(self.name)
        return Lease(self)

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
        now = time.time()
        cur, prev, f = _rate(board, board.read(self._index), _TPM, TPM_WINDOW, now)
        used = prev * (1.0 - f) + cur
        if used + prompt_tokens > tpm:
            wait = _wait(cur, prev, f, prompt_tokens, tpm, TPM_WINDOW)
            raise self._reject("tokens_per_minute", f"Rate limit reached for `{self.name}` on tokens per min "
                               f"(TPM): Limit {tpm}, Used {math.ceil(used)}, Requested {prompt_tokens}. Please "
                               f"try again in {wait:.3g}s.", wait)

    def charge_tokens(self, tokens: int) -> None:
        if tokens > 0 and self.limits.tokens_per_minute is not None:
            self._add(_TPM, TPM_WINDOW, tokens, time.time())

    def refund_tokens(self, tokens: int) -> None:
        """Give back part of a reservation made in this window or the one before (an older
        one no longer counts anyway)."""
        board = self._board
        if tokens <= 0 or board is None or self.limits.tokens_per_minute is None:
            return
        off = self._own + _TPM * 8
        win = int(time.time() / TPM_WINDOW)
        w, cur, prev = _RATE.unpack_from(board.map, off)
        if w == win:
            take = min(cur, tokens)
            cur -= take
            prev = max(0, prev - (tokens - take))
        elif w == win - 1:  # the reservation is in what is now the previous window
            w, cur, prev = win, 0, max(0, cur - tokens)
        else:
            return
        _RATE.pack_into(board.map, off, w, cur, prev)


class Lease:
    """One admitted request of a named tenant, held by its request scope (serving/scope.py):
    tokens reserved before its engine work is sent (`reserve`), settled to what was used and
    released once when the scope ends, whatever ended it."""

    __slots__ = ("quota", "released", "reserved")

    def __init__(self, quota: TenantQuota):
        self.quota = quota
        self.released = False
        self.reserved = 0  # tokens counted against tokens per minute, until `settle`

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.quota._release()

    def reserve(self, samplings: list[dict[str, Any]], requested_max_tokens: int | None,
                prompt_tokens: int) -> None:
        """Before generation requests are sent: the `max_tokens` rule (raises APIError 400
        when more was asked than the tenant may; an unset `max_tokens` is capped in the
        sampling maps), then the prompt and every engine request's `max_tokens` reserved
        against tokens per minute (raises QuotaExceeded): what the request may use at most is
        counted before it runs, so a burst of requests cannot spend past the limit."""
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
        self.reserve_tokens(prompt_tokens + sum(s.get("max_tokens") or 0 for s in samplings))

    def reserve_tokens(self, tokens: int) -> None:
        """`tokens` more reserved against tokens per minute (raises QuotaExceeded)."""
        q = self.quota
        q.check_tokens(tokens)
        q.charge_tokens(tokens)
        self.reserved += tokens

    def settle(self, prompt_tokens: int, completion_tokens: int) -> None:
        """The request ended: what it used stays counted, the rest of its reservation is given
        back. Called once, by the request's scope."""
        q = self.quota
        unused = self.reserved - prompt_tokens - completion_tokens
        self.reserved = 0
        if unused > 0:
            q.refund_tokens(unused)
        elif unused < 0:  # (used more than reserved: an engine that overran max_tokens)
            q.charge_tokens(-unused)
        if q._recorder is not None and (prompt_tokens or completion_tokens):
            q._recorder.tenant_tokens(q.name, prompt_tokens, completion_tokens)


class TenantQuotas:
    """This worker's quota counters of every named tenant."""

    def __init__(self, runtime_dir: str, worker_index: int, num_workers: int, recorder: Any = None,
                 fail_closed: bool = False):
        self.runtime_dir = runtime_dir
        self.worker_index = worker_index
        self.num_workers = max(1, num_workers, worker_index + 1)
        self.fail_closed = fail_closed  # a shared quota store that does not answer: refuse (503)
        self.recorder = recorder  # tenant_admitted(name), tenant_rejected(name, reason), tenant_tokens(name, p, c)
        self.by_name: dict[str, TenantQuota] = {}
        self.generation: int | None = None

    def install(self, generation: int, entries: list[KeyEntry]) -> dict[str, TenantQuota]:
        """Take a new key table: a new counter file, this worker's counts carried into it."""
        board = _Board(self.runtime_dir, generation, len(entries), self.num_workers, self.worker_index,
                       self.fail_closed)
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
