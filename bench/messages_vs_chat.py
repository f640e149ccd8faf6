"""The Anthropic Messages route against the chat-completions route it is built on: the same
streamed generations (simulated engine, DeepSeek V4 parsers, scripted thinking + text output)
through `POST /v1/messages` and `POST /v1/chat/completions`, and the worker CPU each costs.

    .venv/bin/python -m bench.messages_vs_chat [--requests 400] [--concurrency 32] [--tokens 128]

One worker, so the worker's CPU time per request is the cost of the route; a Python aiohttp
client (a light load: the point is the per-request cost, not the peak rate). Prints one line per
route: requests/s, output tokens/s, worker CPU ms per request and per 1k streamed tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import aiohttp

from tests.reliability.helpers import workers_of
from tests.stack import Stack

TEXT = "Let me think about the weather in Paris for a moment. " * 4 + "</think>" + "It is sunny and mild today. " * 40


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one(session: aiohttp.ClientSession, url: str, body: dict) -> int:
    events = 0
    async with session.post(url, json=body) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            if line.startswith(b"data: "):
                events += 1
    return events


async def drive(base: str, route: str, n: int, concurrency: int, tokens: int) -> tuple[float, int]:
    common = {"model": "dsv4", "max_tokens": tokens, "stream": True, "vllm_xargs": {"sim_text": TEXT}}
    msg = [{"role": "user", "content": "Weather in Paris?"}]
    body = {**common, "messages": msg}
    if route == "/v1/chat/completions":
        body["stream_options"] = {"include_usage": True}
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        async def task() -> int:
            async with sem:
                return await one(session, base + route, body)
        t0 = time.monotonic()
        events = await asyncio.gather(*(task() for _ in range(n)))
        return time.monotonic() - t0, sum(events)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=128)
    a = ap.parse_args()
    args = ["--engine", "sim", "--workers", "1", "--sim-step-time", "0.005", "--max-model-len", "4096",
            "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4", "--reasoning-parser", "deepseek_v4",
            "--served-model-name", "dsv4", "--shutdown-timeout", "5", "demo:deepseek-v4"]
    with Stack(args) as stack:
        (worker,) = workers_of(stack)
        for route in ("/v1/chat/completions", "/v1/messages"):
            asyncio.run(drive(stack.base_url, route, 20, 8, a.tokens))  # warm-up
        for route in ("/v1/chat/completions", "/v1/messages", "/v1/chat/completions", "/v1/messages"):
            c0 = cpu_seconds(worker)
            wall, events = asyncio.run(drive(stack.base_url, route, a.requests, a.concurrency, a.tokens))
            cpu = cpu_seconds(worker) - c0
            toks = a.requests * a.tokens
            print(json.dumps({"route": route, "requests": a.requests, "concurrency": a.concurrency,
                              "wall_s": round(wall, 2), "req_per_s": round(a.requests / wall, 1),
                              "tokens_per_s": round(toks / wall), "sse_events": events,
                              "worker_cpu_ms_per_req": round(cpu * 1000 / a.requests, 2),
                              "worker_cpu_ms_per_1k_tokens": round(cpu * 1e6 / toks, 1)}))


if __name__ == "__main__":
    main()
