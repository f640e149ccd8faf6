"""Interactive latency beside a running batch, and the batch's own throughput.

Starts `frontend-supervisor --engine sim` (2 workers) and measures the time to first token of
streaming chat requests from C interactive clients for D seconds: first alone, then while a
batch of N chat lines runs (created through the Batch API: upload, create, poll). Reports TTFT
p50/p99 for both phases, and the batch's lines per second (in_progress to completed, the
store's timestamps, and the client's create-to-completed wall time). The batch runs within
`--batch-max-concurrency`, at engine priority 1; the simulated engine ignores priorities, so
what this measures is the frontend's share (CPU, event loops) and the concurrency bound.

    .venv/bin/python bench/batch_interactive.py --lines 10000 --duration 20 [--out bench/results/...]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import sys
import tempfile
import time

import httpx
import openai

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.stack import Stack  # noqa: E402

MODEL = "m"


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def interactive(base: str, duration: float, concurrency: int, tokens: int) -> list[float]:
    """TTFT (seconds to the first content delta) of streaming chat requests, back to back."""
    ttft: list[float] = []
    end = time.monotonic() + duration
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Write a short poem about the sea."}],
            "max_tokens": tokens, "stream": True}

    async def client() -> None:
        async with httpx.AsyncClient(base_url=base, timeout=60) as c:
            while time.monotonic() < end:
                t0 = time.perf_counter()
                first = None
                async with c.stream("POST", "/v1/chat/completions", json=body) as r:
                    r.raise_for_status()
                    async for raw in r.aiter_lines():
                        if first is None and raw.startswith("data: {"):
                            delta = json.loads(raw[6:])["choices"][0]["delta"]
                            if delta.get("content"):
                                first = time.perf_counter() - t0
                if first is not None:
                    ttft.append(first)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return ttft


def summary(values: list[float]) -> dict:
    return {"requests": len(values), "ttft_p50_ms": round(_pct(values, 0.5) * 1000, 2),
            "ttft_p99_ms": round(_pct(values, 0.99) * 1000, 2),
            "ttft_mean_ms": round(statistics.fmean(values) * 1000, 2) if values else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=10000, help="batch lines")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of interactive load per phase")
    ap.add_argument("--concurrency", type=int, default=4, help="interactive clients")
    ap.add_argument("--tokens", type=int, default=16, help="max_tokens of every request")
    ap.add_argument("--batch-max-concurrency", type=int, default=32)
    ap.add_argument("--step-time", type=float, default=0.005, help="simulated engine step (s)")
    ap.add_argument("--out", default=None, help="JSON result (default bench/results/batch-interactive-<date>.json)")
    a = ap.parse_args()
    files_dir = tempfile.mkdtemp(prefix="vpf-bench-files-")
    load_before = os.getloadavg()[0]
    args = ["--engine", "sim", "--workers", "2", "--sim-step-time", str(a.step_time), "--max-model-len", "4096",
            "--served-model-name", MODEL, "--shutdown-timeout", "5", "--files-dir", files_dir,
            "--batch-max-concurrency", str(a.batch_max_concurrency), "demo:deepseek-v4"]
    with Stack(args) as stack:
        c = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0, timeout=120)
        asyncio.run(interactive(stack.base_url, 2.0, a.concurrency, a.tokens))  # warm-up
        alone = asyncio.run(interactive(stack.base_url, a.duration, a.concurrency, a.tokens))

        lines = "\n".join(json.dumps({"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions", "body": {
            "model": MODEL, "messages": [{"role": "user", "content": f"Summarise item {i}."}],
            "max_tokens": a.tokens}}) for i in range(a.lines)).encode()
        f = c.files.create(file=("batch.jsonl", io.BytesIO(lines)), purpose="batch")
        t_create = time.time()
        batch = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        while (b := c.batches.retrieve(batch.id)).status in ("validating",):
            time.sleep(0.05)
        beside = asyncio.run(interactive(stack.base_url, a.duration, a.concurrency, a.tokens))
        during = c.batches.retrieve(batch.id).request_counts
        while (b := c.batches.retrieve(batch.id)).status not in ("completed", "failed", "expired", "cancelled"):
            time.sleep(0.2)
        t_done = time.time()
        run_s = max(1, (b.completed_at or 0) - (b.in_progress_at or 0))
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{os.cpu_count()} CPUs",
        # other processes' load skews every number here: the 1-minute load average around the run
        "load_average_1m": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "settings": {"lines": a.lines, "duration_s": a.duration, "interactive_clients": a.concurrency,
                     "max_tokens": a.tokens, "batch_max_concurrency": a.batch_max_concurrency,
                     "sim_step_time_s": a.step_time, "workers": 2},
        "interactive_alone": summary(alone),
        "interactive_beside_batch": summary(beside),
        "batch": {"status": b.status, "completed": b.request_counts.completed, "failed": b.request_counts.failed,
                  "lines_done_during_interactive_phase": during.completed,
                  "lines_per_s_store": round(b.request_counts.completed / run_s, 1),
                  "lines_per_s_wall": round(b.request_counts.completed / (t_done - t_create), 1),
                  "wall_s": round(t_done - t_create, 1)},
    }
    print(json.dumps(result, indent=2))
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                f"batch-interactive-{time.strftime('%Y-%m-%d', time.gmtime())}.json")
    with open(out, "w") as fh:
        json.dump(result, fh, indent=2)
        fh.write("\n")


if __name__ == "__main__":
    main()
