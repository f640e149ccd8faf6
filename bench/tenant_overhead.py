"""What API keys and per-tenant quotas cost per request: the worker CPU per request of the same
short chat completions with no keys, with an anonymous `--api-key`, and with a keys file
(`--api-keys-file`) whose tenant has every limit set (high enough never to refuse).

    .venv/bin/python -m bench.tenant_overhead [--requests 600] [--rounds 3] [--concurrency 16]

Three stacks run side by side (simulated engine at 1 ms per step, one worker each, so the
worker's CPU time is the route's cost); the rounds interleave the three (none, api-key, keys
file, none, ...) so a slow phase of the shared machine hits all of them alike. Each request is
a non-streamed chat completion of 4 tokens on its own keep-alive connection pool (aiohttp, a
light load: the point is the per-request cost). Prints one JSON line per measurement and the
summary (median CPU microseconds per request, and each against no keys); `--out` writes it.
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
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
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
    per: dict[str, list[float]] = {name: [] for name in configs}
    rows = []
    with ExitStack() as stacks:
        running = {}
        for name, (extra, key) in configs.items():
            stack = stacks.enter_context(Stack(extra + common))
            wait_all_serving(stack)
            (worker,) = workers_of(stack)
            running[name] = (stack, worker, key)
            asyncio.run(drive(stack.base_url, key, 100, a.concurrency))  # warm-up
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
        "median_worker_cpu_us_per_request": {k: round(v, 1) for k, v in medians.items()},
        "ratio_vs_no_keys": {k: round(v / medians["no_keys"], 3) for k, v in medians.items()},
        "added_us_per_request_vs_no_keys": {k: round(v - medians["no_keys"], 1) for k, v in medians.items()},
        "rows": rows,
    }
    print(json.dumps({k: summary[k] for k in ("median_worker_cpu_us_per_request", "ratio_vs_no_keys",
                                               "added_us_per_request_vs_no_keys")}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
