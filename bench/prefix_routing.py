"""Prefix-aware routing against least-load routing, on simulated engines with a prefix cache.

One deployment per policy (`frontend-supervisor --engine sim --data-parallel-size 4`), each
engine modelling vLLM's prefix cache with a limited number of blocks and publishing KV events;
prefill costs one step per `--max-num-batched-tokens` uncached tokens, so a turn whose history
is cached where it lands starts sooner and leaves room for others.

Phases, the same for both policies:
1. conversations: `--conversations` three-turn chats of mixed opening lengths (each turn resends
   the history), `--concurrency` at a time: TTFT p50/p99, requests/s, and the share of turns
   2-3 whose `prompt_tokens_details.cached_tokens` covers the previous turn;
2. skew: `--skew-requests` single-turn requests that all start with one hot system prompt:
   prompt tokens each engine admitted (its scheduler stats), and the most loaded engine against
   the mean.
Besides: the routing decision's cost (µs, `Router.route` over a loaded index) and one KV event
batch's decode + apply cost in a worker (µs), which is what per-worker subscription costs.

    .venv/bin/python bench/prefix_routing.py [--conversations 1000] [--concurrency 64]

Writes bench/results/prefix-routing-<UTC date and time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import socket
import statistics
import sys
import time

import aiohttp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.stack import REPO, Stack, free_port  # noqa: E402
from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4  # noqa: E402

MODEL = "m"
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def _two_ports() -> int:
    while True:
        base = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", base + 1))
                s.close()
                with socket.socket() as s2:
                    s2.bind(("127.0.0.1", base + 3))
            except OSError:
                continue
        return base


def deployment(policy: str, model: str, args) -> Stack:
    kv = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{_two_ports()}",
                     "replay_endpoint": f"tcp://*:{_two_ports()}"})
    return Stack(["--engine", "sim", "--workers", str(args.workers), "--data-parallel-size", str(args.engines),
                  "--sim-step-time", str(args.step_time), "--max-model-len", "16384", "--served-model-name", MODEL,
                  "--routing-policy", policy, "--enable-prompt-tokens-details", "--kv-events-config", kv,
                  "--block-size", "16", "--num-gpu-blocks-override", str(args.blocks),
                  "--max-num-batched-tokens", str(args.batched_tokens), model], ready_timeout=180)


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


async def _turn(http: aiohttp.ClientSession, url: str, messages: list[dict], max_tokens: int) -> tuple[float, dict, str]:
    """(TTFT s, usage, answer) of one streamed chat turn."""
    t0 = time.perf_counter()
    ttft = None
    usage: dict = {}
    parts = []
    async with http.post(url, json={"model": MODEL, "messages": messages, "max_tokens": max_tokens, "stream": True,
                                    "stream_options": {"include_usage": True}, "temperature": 0}) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk.get("choices") or []:
                if ttft is None and (c.get("delta") or {}).get("content"):
                    ttft = time.perf_counter() - t0
                parts.append((c.get("delta") or {}).get("content") or "")
    return (ttft if ttft is not None else time.perf_counter() - t0), usage, "".join(parts)


async def conversations(base: str, args) -> dict:
    rng = random.Random(7)
    url = base + "/v1/chat/completions"
    openings = [rng.choice((150, 400, 800, 1500, 2500)) for _ in range(args.conversations)]
    queue: asyncio.Queue = asyncio.Queue()
    for i, n in enumerate(openings):
        queue.put_nowait((i, n))
    ttfts: list[float] = []
    covered = []
    done = 0

    async def runner(http):
        nonlocal done
        while not queue.empty():
            i, n = queue.get_nowait()
            r = random.Random(i)
            messages = [{"role": "system", "content": f"Conversation {i}. " + _text(r, n)},
                        {"role": "user", "content": _text(r, 30)}]
            previous = 0
            for turn in range(3):
                ttft, usage, answer = await _turn(http, url, messages, args.max_tokens)
                ttfts.append(ttft)
                if turn:
                    cached = ((usage.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0
                    covered.append(cached >= previous - 16)
                previous = usage.get("prompt_tokens", 0)
                messages = messages + [{"role": "assistant", "content": answer},
                                       {"role": "user", "content": _text(r, 30)}]
                done += 1

    t0 = time.perf_counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
        await asyncio.gather(*(runner(http) for _ in range(args.concurrency)))
    wall = time.perf_counter() - t0
    ttfts.sort()
    return {"requests": done, "wall_s": round(wall, 2), "requests_per_s": round(done / wall, 1),
            "ttft_p50_ms": round(1000 * ttfts[len(ttfts) // 2], 1),
            "ttft_p99_ms": round(1000 * ttfts[min(len(ttfts) - 1, int(len(ttfts) * 0.99))], 1),
            "turns_2_3_covered_share": round(sum(covered) / len(covered), 3)}


def admitted_per_engine(base: str) -> dict[str, float]:
    """Prompt tokens each engine admitted (its scheduler stats: `vllm:prefix_cache_queries`)."""
    import httpx

    text = httpx.get(base + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for labels, value in re.findall(r"^vllm:prefix_cache_queries_total\{([^}]*)\} (\S+)$", text, re.M):
        engine = re.search(r'engine="(\d+)"', labels)
        if engine:
            out[engine.group(1)] = out.get(engine.group(1), 0.0) + float(value)
    return out


async def skew(base: str, args) -> dict:
    before = admitted_per_engine(base)
    rng = random.Random(11)
    system = "You are the hot shared assistant. " + _text(rng, 1500)
    url = base + "/v1/chat/completions"
    queue: asyncio.Queue = asyncio.Queue()
    for i in range(args.skew_requests):
        queue.put_nowait(i)

    async def runner(http):
        while not queue.empty():
            i = queue.get_nowait()
            await _turn(http, url, [{"role": "system", "content": system},
                                    {"role": "user", "content": f"Question {i}: " + _text(random.Random(i), 20)}],
                        args.max_tokens)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
        await asyncio.gather(*(runner(http) for _ in range(args.concurrency)))
    after = admitted_per_engine(base)
    per = {e: after.get(e, 0) - before.get(e, 0) for e in after}
    mean = sum(per.values()) / max(1, len(per))
    return {"prompt_tokens_admitted_per_engine": per, "max_over_mean": round(max(per.values()) / mean, 3) if mean else None}


def micro() -> dict:
    """Routing decision and event-apply costs, in this process."""
    from vllm_pyfrontend.engine.inflight import InFlight
    from vllm_pyfrontend.engine.kv_events import BlockStored, KVEventBatch, decode_batch, encode_batch
    from vllm_pyfrontend.engine.kv_index import KvIndex
    from vllm_pyfrontend.engine.routing import EngineStats, PrefixRouting, Router
    from vllm_pyfrontend.engine.types import EngineRequest

    rng = random.Random(3)
    engines = [0, 1, 2, 3]
    index = KvIndex(engines)
    router = Router(engines, InFlight(engines), {}, EngineStats())
    router.prefix = PrefixRouting(index, None, 1.0)
    prompts = []
    for c in range(2000):  # 2000 cached conversations of 1,000-3,000 tokens over 4 engines
        p = [rng.randrange(100000) for _ in range(rng.choice((1024, 2048, 3072)))]
        hashes = [rng.getrandbits(64) for _ in range(len(p) // 16)]
        index.apply(c % 4, [BlockStored(block_hashes=hashes, parent_block_hash=None, token_ids=p, block_size=16,
                                        lora_id=None, medium="GPU", lora_name=None, group_idx=0)])
        prompts.append(p)
    reqs = [EngineRequest("r", prompts[i] + [1, 2, 3], {}, 0.0) for i in range(0, 2000, 7)]
    fresh = [EngineRequest("r", [rng.randrange(100000) for _ in range(2048)], {}, 0.0) for _ in range(200)]
    out = {}
    for name, batch in (("route_cached_2k_tokens_us", reqs), ("route_uncached_us", fresh)):
        t0 = time.perf_counter()
        for _ in range(5):
            for r in batch:
                router.route(r)
        out[name] = round(1e6 * (time.perf_counter() - t0) / (5 * len(batch)), 1)
    # One step's batch as an engine publishes it: a few requests' new blocks.
    payloads = []
    for _ in range(500):
        events = []
        for _ in range(4):
            p = [rng.randrange(100000) for _ in range(16 * 32)]
            events.append(BlockStored(block_hashes=[rng.getrandbits(64) for _ in range(32)], parent_block_hash=None,
                                      token_ids=p, block_size=16, lora_id=None, medium="GPU", lora_name=None,
                                      group_idx=0))
        payloads.append(encode_batch(KVEventBatch(ts=time.time(), events=events, data_parallel_rank=0)))
    idx2 = KvIndex([0])
    t0 = time.perf_counter()
    for pl in payloads:
        idx2.apply(0, decode_batch(pl).events)
    out["event_batch_decode_apply_us (4 stores x 32 blocks)"] = round(1e6 * (time.perf_counter() - t0) / len(payloads), 1)
    out["index_blocks_per_engine"] = index.blocks_held(0)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--conversations", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--skew-requests", type=int, default=400)
    p.add_argument("--engines", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--step-time", type=float, default=0.02)
    p.add_argument("--blocks", type=int, default=1500, help="prefix cache blocks per engine (16 tokens each)")
    p.add_argument("--batched-tokens", type=int, default=256, help="prefill tokens per engine step")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--policies", default="least-load,prefix-aware")
    args = p.parse_args()
    model = materialize_deepseek_v4(os.path.join(REPO, ".cache", "bench-deepseek-v4"))
    result = {"args": vars(args), "micro": micro(), "policies": {}}
    print(json.dumps(result["micro"]), flush=True)
    for policy in args.policies.split(","):
        with deployment(policy, model, args) as stack:
            conv = asyncio.run(conversations(stack.base_url, args))
            sk = asyncio.run(skew(stack.base_url, args))
        result["policies"][policy] = {"conversations": conv, "skew": sk}
        print(policy, json.dumps(result["policies"][policy]), flush=True)
    out = os.path.join(REPO, "bench", "results", time.strftime("prefix-routing-%Y-%m-%dT%H%M.json", time.gmtime()))
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
