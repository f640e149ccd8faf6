"""Prefill/decode disaggregation against colocated data parallel serving, on simulated engines.

Two deployments of the same two simulated engines, one at a time:
- colocated: `frontend-supervisor --engine sim --data-parallel-size 2` (least-load routing: every
  engine prefills and decodes);
- disaggregated: the same with `--prefill-engines 1 --prefill-min-prompt-tokens T
  --kv-transfer-config '{"kv_connector": "NixlConnector", "kv_role": "kv_both", ...}'`: rank 0
  computes prompts, rank 1 generates; prompts shorter than T go whole to the decode engine.
Both with `--sim-step-time`, `--prefill-time-per-token` (a step lasts step time + that much per
prompt token it computes, `--max-num-batched-tokens` per step) and `--workers`.

Mixed workload, the same arrivals for both: `--short-concurrency` closed-loop streams of short
prompts decoding continuously, while long prompts arrive open loop (Poisson, `--long-rate` per
second). Prompts are random token ids sent to /v1/completions (exact lengths, no tokenizer work);
`ignore_eos` so every request runs to `max_tokens`. After `--warmup` seconds, over `--duration`:
- inter-token latency of the short streams: time between SSE chunks carrying text, per stream,
  pooled (stream_interval 1: one chunk per token);
- TTFT of short and of long requests that started in the window (a request with no first token
  by the window's end counts its wait so far: then the percentile is a lower bound);
- requests completed per second, short and long;
- from /metrics (difference over the window): disaggregation paths, mean prefill phase and
  mean decode-phase first token;
- CPU: this client's, the frontend's process tree (supervisor and workers, engines excluded) and
  the engines', in cores (bench/procstat.py), and the machine's busy cores.
All of this at each long rate of `--long-rates` (and `--long-rate`, the headline), both
deployments, with the ratios disaggregated / colocated and the first rate where the
disaggregated deployment falls behind (long requests completed per second below 0.9x
colocated's, or total requests per second below 0.95x colocated's): its single prefill engine
saturates while the colocated pair shares prefill over two engines.

    .venv/bin/python bench/disaggregation.py            # ~6 minutes on 2 cores
    .venv/bin/python bench/disaggregation.py --quick    # ~1.5 minutes

Writes bench/results/disaggregation-<UTC date and time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import time

import aiohttp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.procstat import busy_cores, machine_busy, sample_cpu  # noqa: E402
from tests.stack import REPO, Stack, proc_cmdline  # noqa: E402
from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4  # noqa: E402

MODEL = "m"
COLOCATED = "colocated"
DISAGGREGATED = "disaggregated"
ENGINE_MODULE = "vllm_pyfrontend.supervisor.sim"


def deployment(mode: str, model: str, args) -> Stack:
    argv = ["--engine", "sim", "--workers", str(args.workers), "--data-parallel-size", "2",
            "--routing-policy", "least-load", "--sim-step-time", str(args.step_time),
            "--prefill-time-per-token", str(args.prefill_time_per_token),
            "--max-num-batched-tokens", str(args.batched_tokens),
            "--max-model-len", "16384", "--served-model-name", MODEL]
    if mode == DISAGGREGATED:
        kv = {"kv_connector": "NixlConnector", "kv_role": "kv_both",
              "kv_connector_extra_config": {"transfer_time_per_token": args.transfer_time_per_token}}
        argv += ["--prefill-engines", "1", "--prefill-min-prompt-tokens", str(args.prefill_min_prompt_tokens),
                 "--kv-transfer-config", json.dumps(kv)]
    return Stack(argv + [model], ready_timeout=180)


def _body(rng: random.Random, prompt_tokens: int, max_tokens: int) -> bytes:
    return json.dumps({"model": MODEL, "prompt": [rng.randrange(1000, 60000) for _ in range(prompt_tokens)],
                       "max_tokens": max_tokens, "stream": True, "ignore_eos": True, "temperature": 0}).encode()


class Record:
    """What the client saw, with perf_counter timestamps (filtered to the window at the end)."""

    def __init__(self) -> None:
        self.itl: list[tuple[float, float]] = []  # (time of the chunk, gap since the stream's previous one)
        self.short: list[list] = []  # [start, first token or None, end or None]
        self.long: list[list] = []
        self.errors = 0


async def _stream(http: aiohttp.ClientSession, url: str, body: bytes, row: list, itl: list | None) -> None:
    """One streamed completion; fills row = [start, first token, end], appends short ITL gaps."""
    last = None
    async with http.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:200]}")
        async for line in r.content:
            # A chunk carrying text; cheap byte tests instead of decoding every chunk's JSON.
            if line.startswith(b"data: {") and b'"text":"' in line and b'"text":""' not in line:
                now = time.perf_counter()
                if last is None:
                    row[1] = now
                elif itl is not None:
                    itl.append((now, now - last))
                last = now
    row[2] = time.perf_counter()


async def drive(base: str, rate: float, args, seed: int) -> dict:
    """The mixed workload against one deployment: the record and the window's resource samples."""
    url = base + "/v1/completions"
    rng = random.Random(seed)
    short_bodies = [_body(rng, args.short_tokens, args.short_output) for _ in range(256)]
    long_bodies = [_body(rng, args.long_tokens, args.long_output) for _ in range(64)]
    arrivals = random.Random(seed + 1)  # same Poisson arrivals for both deployments
    rec = Record()
    in_flight: set[asyncio.Task] = set()
    stopping = False

    async def short_loop(i: int, http: aiohttp.ClientSession) -> None:
        n = i
        # Spread the streams' starts over one request's length, so their requests arrive evenly
        # rather than all at one step (closed loops started together stay in step).
        await asyncio.sleep(i * args.step_time * args.short_output / args.short_concurrency)
        while not stopping:
            row = [time.perf_counter(), None, None]
            rec.short.append(row)
            try:
                await _stream(http, url, short_bodies[n % len(short_bodies)], row, rec.itl)
            except (aiohttp.ClientError, RuntimeError):
                rec.errors += 1
                await asyncio.sleep(0.1)
            n += args.short_concurrency

    async def long_one(n: int, http: aiohttp.ClientSession) -> None:
        row = [time.perf_counter(), None, None]
        rec.long.append(row)
        try:
            await _stream(http, url, long_bodies[n % len(long_bodies)], row, None)
        except (aiohttp.ClientError, RuntimeError):
            rec.errors += 1

    async def long_arrivals(http: aiohttp.ClientSession) -> None:
        n = 0
        due = time.perf_counter()
        while not stopping:
            due += arrivals.expovariate(rate)
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            if stopping:
                break
            t = asyncio.create_task(long_one(n, http))
            in_flight.add(t)
            t.add_done_callback(in_flight.discard)
            n += 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as http:
        loops = [asyncio.create_task(short_loop(i, http)) for i in range(args.short_concurrency)]
        if rate > 0:
            loops.append(asyncio.create_task(long_arrivals(http)))
        await asyncio.sleep(args.warmup)
        before = await asyncio.gather(_metrics(http, base), asyncio.to_thread(_resources))
        client0, start = time.process_time(), time.perf_counter()
        await asyncio.sleep(args.duration)
        end = time.perf_counter()
        client1 = time.process_time()
        after = await asyncio.gather(_metrics(http, base), asyncio.to_thread(_resources))
        stopping = True
        for t in loops + list(in_flight):
            t.cancel()
        await asyncio.gather(*loops, *in_flight, return_exceptions=True)
    return {"record": rec, "start": start, "end": end, "client_cpu_s": client1 - client0,
            "metrics": (before[0], after[0]), "resources": (before[1], after[1])}


_stack_pid = 0


def _resources() -> tuple:
    """Per-process CPU of the deployment's tree, which of its processes are engines, and the
    machine's busy time, now."""
    cpu = sample_cpu(_stack_pid)
    return cpu, {pid for pid in cpu.per_pid if ENGINE_MODULE in proc_cmdline(pid)}, machine_busy()


async def _metrics(http: aiohttp.ClientSession, base: str) -> str:
    async with http.get(base + "/metrics") as r:
        return await r.text()


def _metric_values(text: str) -> dict[str, float]:
    """Disaggregation counters and histogram sums/counts, summed over engines (by name+path)."""
    out: dict[str, float] = {}
    for name, labels, value in re.findall(
            r"^(vllm:disagg_\w+?(?:_total|_sum|_count))\{([^}]*)\} (\S+)$", text, re.M):
        path = re.search(r'path="(\w+)"', labels)
        key = name + (f"[{path.group(1)}]" if path else "")
        out[key] = out.get(key, 0.0) + float(value)
    return out


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def _ms(v: float | None) -> float | None:
    return None if v is None else round(1000 * v, 1)


def summarize(run: dict, rate: float, args) -> dict:
    rec, start, end = run["record"], run["start"], run["end"]
    wall = end - start
    itl = [gap for t, gap in rec.itl if start <= t <= end]

    def ttfts(rows: list[list]) -> tuple[list[float], int]:
        out, waiting = [], 0
        for s, first, _ in rows:
            if start <= s <= end:
                if first is not None and first <= end:
                    out.append(first - s)
                else:  # no first token by the window's end: its wait so far (a lower bound)
                    out.append(end - s)
                    waiting += 1
        return out, waiting

    short_ttft, short_waiting = ttfts(rec.short)
    long_ttft, long_waiting = ttfts(rec.long)
    short_done = sum(1 for _, _, e in rec.short if e is not None and start <= e <= end)
    long_done = sum(1 for _, _, e in rec.long if e is not None and start <= e <= end)
    long_sent = sum(1 for s, _, _ in rec.long if start <= s <= end)

    m0, m1 = (_metric_values(t) for t in run["metrics"])
    delta = {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in m1}
    paths = {k.split("[")[1][:-1]: int(v) for k, v in delta.items() if k.startswith("vllm:disagg_requests_total[")}

    def mean(prefix: str) -> float | None:
        n = delta.get(prefix + "_count", 0.0)
        return _ms(delta.get(prefix + "_sum", 0.0) / n) if n else None

    (cpu0, _, busy0), (cpu1, engines, busy1) = run["resources"]
    engine_cpu = frontend_cpu = 0.0
    for pid, t in cpu1.per_pid.items():
        used = t - cpu0.per_pid.get(pid, 0.0)
        if pid in engines:
            engine_cpu += used
        else:
            frontend_cpu += used
    return {
        "long_rate_offered": rate,
        "window_s": round(wall, 2),
        "short_itl_ms": {"p50": _ms(_pct(itl, 0.5)), "p99": _ms(_pct(itl, 0.99)), "max": _ms(max(itl, default=None)),
                         "mean": _ms(sum(itl) / len(itl)) if itl else None, "samples": len(itl)},
        "short_ttft_ms": {"p50": _ms(_pct(short_ttft, 0.5)), "p99": _ms(_pct(short_ttft, 0.99)),
                          "started": len(short_ttft), "without_first_token": short_waiting},
        "long_ttft_ms": {"p50": _ms(_pct(long_ttft, 0.5)), "p99": _ms(_pct(long_ttft, 0.99)),
                         "started": len(long_ttft), "without_first_token": long_waiting},
        "short_rps": round(short_done / wall, 2),
        "long_rps": round(long_done / wall, 2),
        "long_sent_rps": round(long_sent / wall, 2),
        "total_rps": round((short_done + long_done) / wall, 2),
        "client_errors": rec.errors,
        "disagg_paths": paths,
        "prefill_phase_mean_ms": mean("vllm:disagg_prefill_phase_seconds"),
        "decode_first_token_mean_ms": mean("vllm:disagg_decode_first_token_seconds"),
        "cores": {"client": round(run["client_cpu_s"] / wall, 2), "frontend": round(frontend_cpu / wall, 2),
                  "engines": round(engine_cpu / wall, 2), "machine_busy": round(busy_cores(busy0, busy1), 2)},
    }


def measure(mode: str, rate: float, model: str, args) -> dict:
    global _stack_pid
    with deployment(mode, model, args) as stack:
        _stack_pid = stack.proc.pid
        roles = None
        if mode == DISAGGREGATED:
            import urllib.request

            with urllib.request.urlopen(stack.base_url + "/load", timeout=5) as r:
                roles = {e: s.get("role") for e, s in json.load(r).get("engines", {}).items()}
        run = asyncio.run(drive(stack.base_url, rate, args, seed=int(rate * 1000) + 17))
    out = summarize(run, rate, args)
    if roles:
        out["engine_roles"] = roles
    return out


def _ratio(a, b) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def compare(colo: dict, dis: dict) -> dict:
    return {
        "short_itl_p99": _ratio(dis["short_itl_ms"]["p99"], colo["short_itl_ms"]["p99"]),
        "short_ttft_p99": _ratio(dis["short_ttft_ms"]["p99"], colo["short_ttft_ms"]["p99"]),
        "long_ttft_p50": _ratio(dis["long_ttft_ms"]["p50"], colo["long_ttft_ms"]["p50"]),
        "long_ttft_p99": _ratio(dis["long_ttft_ms"]["p99"], colo["long_ttft_ms"]["p99"]),
        "short_rps": _ratio(dis["short_rps"], colo["short_rps"]),
        "long_rps": _ratio(dis["long_rps"], colo["long_rps"]),
        "total_rps": _ratio(dis["total_rps"], colo["total_rps"]),
    }


def falls_behind(colo: dict, dis: dict) -> list[str]:
    why = []
    if dis["total_rps"] < 0.95 * colo["total_rps"]:
        why.append(f"total req/s {dis['total_rps']} < 0.95 x {colo['total_rps']}")
    if colo["long_rps"] and dis["long_rps"] < 0.9 * colo["long_rps"]:
        why.append(f"long req/s {dis['long_rps']} < 0.9 x {colo['long_rps']}")
    return why


def table(points: list[dict]) -> str:
    """Markdown: both deployments at each long rate, then the ratio disaggregated / colocated."""
    head = ("| long/s | deployment | short ITL p50 / mean / p99 ms | short TTFT p50 / p99 ms "
            "| long TTFT p50 / p99 ms | short req/s | long req/s sent / done | total req/s "
            "| prefill phase / decode first token ms | cores client / frontend / engines |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for p in points:
        for mode in (COLOCATED, DISAGGREGATED):
            r = p[mode]
            itl, st, lt = r["short_itl_ms"], r["short_ttft_ms"], r["long_ttft_ms"]
            phase = (f"{r['prefill_phase_mean_ms']} / {r['decode_first_token_mean_ms']}"
                     if r["prefill_phase_mean_ms"] is not None else "-")
            wait = f" ({lt['without_first_token']} waiting)" if lt["without_first_token"] else ""
            lines.append(
                f"| {p['long_rate']:g} | {mode} | {itl['p50']} / {itl['mean']} / {itl['p99']} | {st['p50']} / {st['p99']} "
                f"| {lt['p50']} / {lt['p99']}{wait} | {r['short_rps']} | {r['long_sent_rps']} / {r['long_rps']} "
                f"| {r['total_rps']} | {phase} | {r['cores']['client']} / {r['cores']['frontend']} / {r['cores']['engines']} |")
        c = p["ratios"]
        lines.append(f"| {p['long_rate']:g} | **dis/colo** | p99 {c['short_itl_p99']} | p99 {c['short_ttft_p99']} "
                     f"| {c['long_ttft_p50']} / {c['long_ttft_p99']} | {c['short_rps']} | {c['long_rps']} "
                     f"| **{c['total_rps']}** | | |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="rates 2 and 12, 10 s windows (~1.5 minutes)")
    p.add_argument("--table", metavar="JSON", help="print the table of a result file and exit")
    p.add_argument("--long-rate", type=float, default=2.0, help="the headline point (long prompts per second)")
    p.add_argument("--long-rates", default="1,2,4,8,12", help="the sweep (long prompts per second)")
    p.add_argument("--long-tokens", type=int, default=4000)
    p.add_argument("--long-output", type=int, default=16)
    p.add_argument("--short-concurrency", type=int, default=32)
    p.add_argument("--short-tokens", type=int, default=50)
    p.add_argument("--short-output", type=int, default=128)
    p.add_argument("--duration", type=float, default=25.0, help="measured seconds per deployment and rate")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--step-time", type=float, default=0.01)
    p.add_argument("--prefill-time-per-token", type=float, default=2e-5)
    p.add_argument("--batched-tokens", type=int, default=2048, help="--max-num-batched-tokens")
    p.add_argument("--transfer-time-per-token", type=float, default=2e-6)
    p.add_argument("--prefill-min-prompt-tokens", type=int, default=512,
                   help="disaggregated: shorter prompts go whole to the decode engine")
    args = p.parse_args()
    if args.table:
        with open(args.table) as f:
            print(table(json.load(f)["points"]))
        return 0
    if args.quick:
        args.long_rates, args.duration, args.warmup = "2,12", 10.0, 2.0
    rates = sorted({float(r) for r in args.long_rates.split(",")} | {args.long_rate})
    model = materialize_deepseek_v4(os.path.join(REPO, ".cache", "bench-deepseek-v4"))
    result: dict = {"args": vars(args), "points": []}
    t0 = time.monotonic()
    for rate in rates:
        point = {"long_rate": rate}
        for mode in (COLOCATED, DISAGGREGATED):
            point[mode] = measure(mode, rate, model, args)
            print(f"rate {rate} {mode}", json.dumps(point[mode]), flush=True)
        point["ratios"] = compare(point[COLOCATED], point[DISAGGREGATED])
        point["disaggregated_falls_behind"] = falls_behind(point[COLOCATED], point[DISAGGREGATED])
        result["points"].append(point)
    behind = next((pt for pt in result["points"] if pt["disaggregated_falls_behind"]), None)
    result["falls_behind_at_long_rate"] = behind["long_rate"] if behind else None
    result["wall_s"] = round(time.monotonic() - t0, 1)
    print()
    print(table(result["points"]))
    print()
    head = next(pt for pt in result["points"] if pt["long_rate"] == args.long_rate)
    print(f"headline (long rate {args.long_rate}/s): disaggregated/colocated", json.dumps(head["ratios"]))
    if behind:
        print(f"disaggregated falls behind from {behind['long_rate']} long/s:",
              "; ".join(behind["disaggregated_falls_behind"]))
    else:
        print("disaggregated does not fall behind within the sweep")
    out = os.path.join(REPO, "bench", "results", time.strftime("disaggregation-%Y-%m-%dT%H%M.json", time.gmtime()))
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print("wrote", out, f"({result['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
