"""What API keys and per-tenant quotas cost per request: the worker CPU per request of the same
short chat completions with no keys, with an anonymous `--api-key`, and with a keys file
(`--api-keys-file`) whose tenant has every limit set (high enough never to refuse).

    .venv/bin/python -m bench.tenant_overhead [--requests 600] [--rounds 3] [--concurrency 16]

Two measurements in one run:

- in process: the added work itself (the auth middleware, and with a keys file every quota
  step a request takes: admit, the submit check, the token charges, the release, against the
  counters of four workers), microseconds per request over 20k mocked requests, against no
  middleware at all. Precise: this is the figure the added cost is read from.
- end to end: three stacks side by side (simulated engine at 1 ms per step, one worker each, so
  the worker's CPU time is the route's cost), the rounds interleaved (none, api-key, keys file,
  none, ...) so a slow phase of the shared machine hits all alike; each request a non-streamed
  chat completion of 4 tokens (aiohttp keep-alive, a light load). On a shared 2-core machine
  the round-to-round noise (tens of percent) is far above the difference: it shows that the
  whole request costs the same, not the microseconds.

Prints one JSON line per measurement and the summary; `--out` writes it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import aiohttp

from tests.reliability.helpers import wait_all_serving, workers_of
from tests.stack import Stack

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS_FILE = """
- name: bench
  key: key-bench
  requests_per_second: 1000000
  tokens_per_minute: 1000000000
  max_concurrency: 100000
  max_tokens: 100000
- name: other
  key: key-other
  requests_per_second: 10
"""


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of `pid`, in nanoseconds' resolution (schedstat: time on CPU)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total / 1e9


def components(n: int = 20_000, workers: int = 4) -> dict[str, float]:
    """The added work itself, in this process: microseconds per request of the auth middleware
    (and, with a keys file, every quota step the serving path takes: admit, the submit check,
    the prompt and completion charges, the release), against no middleware at all. The
    counters are four workers' (a check sums four records)."""
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    from vllm_pyfrontend.metrics import WorkerMetrics
    from vllm_pyfrontend.server.middleware import ApiKeys, auth_middleware
    from vllm_pyfrontend.serving.scope import QUOTA
    from vllm_pyfrontend.tenants.key_table import TenantKeys
    from vllm_pyfrontend.tenants.keys_file import parse_entries, publish

    import yaml

    runtime = tempfile.mkdtemp(prefix="tenant-components-")
    publish(runtime, parse_entries(yaml.safe_load(KEYS_FILE)), 1)
    tenants = TenantKeys(runtime, 0, workers, ["key-anon"], recorder=WorkerMetrics("m", [0], 2048).tenant_recorder())
    tenants.load()
    done = web.Response(text="ok")

    async def plain(request):
        return done

    async def serving(request):  # what a request's scope (serving/scope.py) does with a quota
        quota = request.get(QUOTA)
        if quota is not None:
            lease = quota.admit()
            lease.reserve([{"max_tokens": 4}], 4, 20)
            lease.settle(20, 4)
            lease.release()
        return done

    def time_it(mw, handler, key: str | None) -> float:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        pool = [make_mocked_request("POST", "/v1/chat/completions", headers=headers) for _ in range(100)]
        reqs = pool * (n // len(pool))

        async def run() -> float:
            t0 = time.process_time()  # CPU time: the shared machine's other load does not count
            for r in reqs:
                coro = mw(r, handler) if mw is not None else handler(r)
                try:
                    coro.send(None)
                except StopIteration:
                    pass
            return time.process_time() - t0

        return asyncio.run(run()) / len(reqs) * 1e6

    cases = {
        "no_keys": (None, serving, None),
        "api_key": (auth_middleware(ApiKeys(["key-anon"]), False), serving, "key-anon"),
        "keys_file_no_limits": (auth_middleware(tenants, False), serving, "key-anon"),
        "keys_file_quotas": (auth_middleware(tenants, False), serving, "key-bench"),
    }
    out: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(5):
        for name, (mw, handler, key) in cases.items():
            out[name].append(time_it(mw, handler, key))
    base = statistics.median(out["no_keys"])
    return {k: round(statistics.median(v) - base, 2) for k, v in out.items()}


async def drive(base: str, key: str | None, n: int, concurrency: int) -> float:
    body = {"model": "m", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 4}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    sem = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        async def one() -> None:
            async with sem:
                async with session.post(base + "/v1/chat/completions", json=body) as r:
                    await r.read()
                    assert r.status == 200, r.status

        t0 = time.monotonic()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--out", default=None, help="write the summary JSON here")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tenant-bench-")
    keys = os.path.join(tmp, "keys.yaml")
    with open(keys, "w") as f:
        f.write(KEYS_FILE)
    common = ["--engine", "sim", "--workers", "1", "--sim-step-time", "0.001", "--max-model-len", "2048",
              "--served-model-name", "m", "--shutdown-timeout", "5", "demo:deepseek-v4"]
    configs = {
        "no_keys": ([], None),
        "api_key": (["--api-key", "key-anon"], "key-anon"),
        "keys_file_quotas": (["--api-keys-file", keys], "key-bench"),
    }
    added = components()
    print(json.dumps({"added_us_per_request_in_process": added}), flush=True)
    per: dict[str, list[float]] = {name: [] for name in configs}
    rows = []
    with ExitStack() as stacks:
        running = {}
        with ThreadPoolExecutor(len(configs)) as pool:  # the three start side by side
            started = list(pool.map(lambda c: Stack(c[0] + common), configs.values()))
        for stack in started:
            stacks.enter_context(stack)
        for (name, (extra, key)), stack in zip(configs.items(), started):
            wait_all_serving(stack)
            (worker,) = workers_of(stack)
            running[name] = (stack, worker, key)
            asyncio.run(drive(stack.base_url, key, 200, a.concurrency))  # warm-up
        for r in range(a.rounds):
            for name, (stack, worker, key) in running.items():
                c0 = cpu_seconds(worker)
                wall = asyncio.run(drive(stack.base_url, key, a.requests, a.concurrency))
                cpu = cpu_seconds(worker) - c0
                us = cpu / a.requests * 1e6
                per[name].append(us)
                row = {"round": r, "config": name, "requests": a.requests, "wall_s": round(wall, 3),
                       "req_per_s": round(a.requests / wall, 1), "worker_cpu_us_per_request": round(us, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    medians = {name: statistics.median(v) for name, v in per.items()}
    summary = {
        "benchmark": "tenant_overhead",
        "command": "python -m bench.tenant_overhead " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "setup": {"workers": 1, "sim_step_s": 0.001, "requests_per_round": a.requests, "rounds": a.rounds,
                  "concurrency": a.concurrency, "request": "chat completion, 4 tokens, not streamed",
                  "keys_file": "one tenant with all four limits (never reached), one other"},
        "added_us_per_request_in_process": added,
        "median_worker_cpu_us_per_request": {k: round(v, 1) for k, v in medians.items()},
        "ratio_vs_no_keys": {k: round(v / medians["no_keys"], 3) for k, v in medians.items()},
        "added_us_per_request_vs_no_keys": {k: round(v - medians["no_keys"], 1) for k, v in medians.items()},
        "rows": rows,
    }
    print(json.dumps({k: summary[k] for k in ("added_us_per_request_in_process",
                                               "median_worker_cpu_us_per_request", "ratio_vs_no_keys",
                                               "added_us_per_request_vs_no_keys")}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
