"""The shared counters behind the quotas (frontend/tenants/quotas.py), several workers' views of
one runtime directory in one process: each limit summed over the workers, the 429's shape and
Retry-After, a reload carrying the counts into the new table, a restarted worker's slot."""

from __future__ import annotations

import json

import pytest

from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.tenants.keys_file import parse_entries
from vllm_pyfrontend.tenants.quotas import QuotaExceeded, TenantQuotas


class _Recorder:
    def __init__(self):
        self.admitted: list[str] = []
        self.rejected: list[tuple[str, str]] = []
        self.tokens: list[tuple[str, int, int]] = []

    def tenant_admitted(self, name):
        self.admitted.append(name)

    def tenant_rejected(self, name, reason):
        self.rejected.append((name, reason))

    def tenant_tokens(self, name, p, c):
        self.tokens.append((name, p, c))


def _workers(tmp_path, entries, n=2, recorder=None):
    out = []
    for w in range(n):
        q = TenantQuotas(str(tmp_path), w, n, recorder)
        out.append(q.install(1, entries))
    return out


def test_concurrency_is_summed_over_workers_and_released(tmp_path):
    entries = parse_entries([{"name": "a", "key": "k", "max_concurrency": 2}])
    w0, w1 = _workers(tmp_path, entries)
    l0 = w0["a"].admit()
    l1 = w1["a"].admit()
    with pytest.raises(QuotaExceeded) as e:
        w0["a"].admit()
    assert e.value.reason == "max_concurrency"
    l1.release()
    l1.release()  # once only
    w0["a"].admit().release()
    l0.release()
    assert w0["a"].in_flight == 0 and w1["a"].in_flight == 0


def test_requests_per_second_over_workers_and_the_429(tmp_path):
    rec = _Recorder()
    entries = parse_entries([{"name": "a", "key": "k", "requests_per_second": 3}, {"name": "b", "key": "k2"}])
    w0, w1 = _workers(tmp_path, entries, recorder=rec)
    for q in (w0["a"], w1["a"], w0["a"]):
        q.admit().release()
    with pytest.raises(QuotaExceeded) as e:
        w1["a"].admit()
    err = e.value
    assert err.status == 429 and err.reason == "requests_per_second"
    body = json.loads(err.to_bytes())["error"]
    assert body["type"] == "requests" and body["code"] == "rate_limit_exceeded" and body["param"] is None
    assert "Limit 3, Used 3" in body["message"]
    resp = err.to_response()
    # Room for one more once a third of a window has gone by after this one.
    assert resp.status == 429 and resp.headers["Retry-After"] in ("1", "2")
    assert 333 <= int(resp.headers["retry-after-ms"]) <= 1334
    # Another tenant, no limits: never refused.
    for _ in range(20):
        w1["b"].admit().release()
    assert rec.rejected == [("a", "requests_per_second")]
    assert rec.admitted.count("a") == 3 and rec.admitted.count("b") == 20


def test_tokens_per_minute_reserved_then_settled(tmp_path):
    rec = _Recorder()
    entries = parse_entries([{"name": "a", "key": "k", "tokens_per_minute": 100}])
    w0, w1 = _workers(tmp_path, entries, recorder=rec)
    lease = w0["a"].admit()
    lease.reserve([{"max_tokens": 30}], None, 60)  # 90 reserved before it runs, in worker 0's slot
    other = w1["a"].admit()  # 90 < 100: admitted
    with pytest.raises(QuotaExceeded) as e:
        other.reserve([{"max_tokens": 10}], None, 20)  # 90 + 30 > 100, while the first still runs
    assert e.value.reason == "tokens_per_minute" and json.loads(e.value.to_bytes())["error"]["type"] == "tokens"
    # What is left of this minute's window, then until the 90 of it, counted at (1 - f) into the
    # next one, leave room for 30: f = 2/9, 13.3 s. At most 60 + 13.3 s, early in a window.
    assert 1 <= int(e.value.to_response().headers["Retry-After"]) <= 74
    with pytest.raises(QuotaExceeded) as e:
        other.reserve([{"max_tokens": 1}], None, 100)  # never fits: no Retry-After
    assert "Request too large" in e.value.message and "Retry-After" not in e.value.to_response().headers
    lease.settle(60, 10)  # it used 70 of its 90: 20 given back
    lease.release()
    other.reserve([{"max_tokens": 10}], None, 10)  # 70 + 20 <= 100
    other.settle(10, 10)
    other.release()
    with pytest.raises(QuotaExceeded):  # 90 spent: a request of 11 tokens no longer fits
        w1["a"].admit().reserve([{"max_tokens": 1}], None, 10)
    assert rec.tokens == [("a", 60, 10), ("a", 10, 10)]


def test_a_refund_never_goes_below_zero(tmp_path):
    entries = parse_entries([{"name": "a", "key": "k", "tokens_per_minute": 100}])
    (w0,) = _workers(tmp_path, entries, n=1)
    lease = w0["a"].admit()
    lease.reserve([{"max_tokens": 10}], None, 10)
    lease.settle(0, 0)  # nothing used (failed before the engine): the whole reservation back
    lease.release()
    big = w0["a"].admit()
    big.reserve([{"max_tokens": 50}], None, 50)  # 100: fits only if the refund was whole
    big.settle(50, 50)
    big.release()


def test_max_tokens_rule(tmp_path):
    entries = parse_entries([{"name": "a", "key": "k", "max_tokens": 8}])
    (w0,) = _workers(tmp_path, entries, n=1)
    lease = w0["a"].admit()
    samplings = [{"max_tokens": 1000}, {"max_tokens": 5}]
    lease.reserve(samplings, None, 1)  # not asked: capped
    assert samplings == [{"max_tokens": 8}, {"max_tokens": 5}]
    lease.reserve([{"max_tokens": 8}], 8, 1)
    with pytest.raises(APIError) as e:
        lease.reserve([{"max_tokens": 9}], 9, 1)
    assert e.value.status == 400 and e.value.param == "max_tokens" and "limit of 8" in e.value.message


def test_reload_carries_counts_by_name(tmp_path):
    old = parse_entries([{"name": "a", "key": "k", "max_concurrency": 1}, {"name": "b", "key": "k2"}])
    quotas = TenantQuotas(str(tmp_path), 0, 1)
    a = quotas.install(1, old)["a"]
    lease = a.admit()
    # New table: a moved to row 1 (its limit raised), b removed, c added.
    new = parse_entries([{"name": "c", "key": "k3"}, {"name": "a", "key": "k", "max_concurrency": 2}])
    table = quotas.install(2, new)
    assert table["a"] is a and a.in_flight == 1
    a.admit().release()  # 1 in flight + 1 <= 2
    lease.release()  # a lease of the old table releases into the new one
    assert a.in_flight == 0
    # A worker restarted on the same table starts with no requests in flight.
    held = a.admit()
    restarted = TenantQuotas(str(tmp_path), 0, 1).install(2, new)
    assert restarted["a"].in_flight == 0
    restarted["a"].admit().release()
    held.release()
