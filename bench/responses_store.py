"""What the Responses API costs over chat completions, and what its store costs.

Starts `frontend-supervisor --engine sim` (2 workers, 1 ms steps) and sends the same short
non-streaming request N times with C concurrent clients, as `/v1/chat/completions`, as
`/v1/responses` with `store: false`, and as `/v1/responses` stored (SQLite in the runtime
directory, or `--response-store URL`). Prints requests/s and latency percentiles per variant.

    .venv/bin/python bench/responses_store.py --requests 400 --concurrency 8 [--response-store redis://...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.stack import Stack  # noqa: E402


async def run(base: str, path: str, body: dict, n: int, concurrency: int) -> tuple[float, list[float]]:
    lat: list[float] = []
    todo = iter(range(n))

    async def client() -> None:
        async with httpx.AsyncClient(base_url=base, timeout=60) as c:
            for _ in todo:
                t0 = time.perf_counter()
                r = await c.post(path, json=body)
                r.raise_for_status()
                lat.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return time.perf_counter() - t0, lat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--response-store", default=None)
    a = ap.parse_args()
    args = ["--engine", "sim", "--workers", "2", "--sim-step-time", "0.001", "--max-model-len", "4096",
            "--served-model-name", "m", "--shutdown-timeout", "5"]
    if a.response_store:
        args += ["--response-store", a.response_store]
    msg = "Write a short poem about the sea."
    variants = [
        ("chat", "/v1/chat/completions",
         {"model": "m", "messages": [{"role": "user", "content": msg}], "max_tokens": a.tokens}),
        ("responses store=false", "/v1/responses",
         {"model": "m", "input": msg, "max_output_tokens": a.tokens, "store": False}),
        ("responses stored", "/v1/responses", {"model": "m", "input": msg, "max_output_tokens": a.tokens}),
    ]
    with Stack([*args, "demo:deepseek-v4"]) as s:
        for name, path, body in variants:
            asyncio.run(run(s.base_url, path, body, 50, a.concurrency))  # warm-up
            wall, lat = asyncio.run(run(s.base_url, path, body, a.requests, a.concurrency))
            q = statistics.quantiles(lat, n=100)
            print(f"{name:24s} {a.requests / wall:8.1f} req/s   p50 {q[49] * 1e3:6.1f} ms   p99 {q[98] * 1e3:6.1f} ms")


if __name__ == "__main__":
    main()
