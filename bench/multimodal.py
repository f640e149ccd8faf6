"""Multimodal benchmark: this frontend vs vLLM's Python frontend, one simulated engine each run.

For each frontend (one worker / one API server, interleaved over `--repeat` trials): start the
simulated engine (it takes the requests' mm_features and out-of-band frames and generates as
for text) and the frontend in front of it on the tiny Idefics3 model of
tests/e2e/tiny_idefics3.py (so the frontend runs the model's real HF processor, image
hashing, and the feature encoding), then for `--duration` seconds drive at once:

- `--image-concurrency` clients sending chat requests with one image each (random-pixel
  `--image-size` PNGs as data: URLs, `--unique-images` of them, each used once while they last:
  processor and engine cache misses; max_tokens 2), and
- `--text-concurrency` clients sending streaming text-only chat requests (max_tokens 16),
  whose time to first token measures whether image processing blocks the event loop.

Before that, the same text clients alone for `--duration` seconds (baseline TTFT). Reports
images per second per worker, the text streams' TTFT p50/p99 with and without image load, and
the frontend's CPU per image. The load generator runs in this process (aiohttp), sharing the
cores: compare the frontends with each other, not with other benchmarks.

    .venv/bin/python bench/multimodal.py --duration 20 --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import procstat  # noqa: E402
from bench.frontends import PY, REPO, SERVED_NAME, spawn, wait_ready  # noqa: E402
from tests.e2e.tiny_idefics3 import build_tiny_idefics3  # noqa: E402
from tests.stack import stop_process_group  # noqa: E402
from vllm_pyfrontend.supervisor.runtime import free_tcp_port  # noqa: E402

RESULTS = REPO / "bench" / "results"
MAX_MODEL_LEN = 2048


def frontend_argv(name: str, model: str, http: int, rpc: int) -> list[str]:
    join = ["--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(rpc)]
    common = ["--host", "127.0.0.1", "--port", str(http), "--served-model-name", SERVED_NAME,
              "--max-model-len", str(MAX_MODEL_LEN), "--limit-mm-per-prompt", '{"image": 2}']
    if name == "ours":
        return [str(Path(PY).parent / "frontend-supervisor"), "--workers", "1", *common, *join, model]
    if name == "vllm-python":
        return [PY, "-c", "import sys; from vllm_pyfrontend.supervisor.vllm_headless import run_vllm_cli; "
                "run_vllm_cli(sys.argv[1:])", "serve", model, "--api-server-count", "1", *common, *join,
                "--disable-uvicorn-access-log"]
    raise ValueError(f"unknown frontend {name!r} (ours, vllm-python)")


def sim_argv(model: str, rpc: int, args) -> list[str]:
    return [PY, "-m", "vllm_pyfrontend.supervisor.sim", "--handshake-address", f"tcp://127.0.0.1:{rpc}",
            "--engine-index", "0", "--model", model, "--step-time", str(args.step_time),
            "--max-num-seqs", "256", "--max-model-len", str(MAX_MODEL_LEN)]


def _png(rng: random.Random, size: int) -> str:
    from PIL import Image

    img = Image.frombytes("RGB", (size, size), rng.randbytes(size * size * 3))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def _drive(base: str, args, images: list[str] | None) -> dict:
    import aiohttp

    url = base + "/v1/chat/completions"
    stop_at = time.monotonic() + args.duration
    pool = images or []
    ttfts: list[float] = []
    img_done = img_failed = text_failed = 0
    counter = 0

    async def text_client(session):
        nonlocal text_failed
        body = {"model": SERVED_NAME, "stream": True, "max_tokens": 16, "temperature": 0,
                "messages": [{"role": "user", "content": "Tell me a short story about a lighthouse."}]}
        while time.monotonic() < stop_at:
            t0 = time.monotonic()
            first = None
            try:
                async with session.post(url, json=body) as r:
                    async for line in r.content:
                        if first is None and line.startswith(b"data: {") and b'"content"' in line:
                            first = time.monotonic() - t0
                    if r.status != 200:
                        text_failed += 1
            except aiohttp.ClientError:
                text_failed += 1
            if first is not None:
                ttfts.append(first)

    async def image_client(session):
        nonlocal img_done, img_failed, counter
        while time.monotonic() < stop_at:
            # Unique images (until the pool runs out): processor and engine cache misses.
            data = pool[counter % len(pool)]
            counter += 1
            body = {"model": SERVED_NAME, "max_tokens": 2, "temperature": 0,
                    "messages": [{"role": "user", "content": [
                        {"type": "image_url", "image_url": {"url": data}},
                        {"type": "text", "text": f"Image {counter}: what is it?"}]}]}
            try:
                async with session.post(url, json=body) as r:
                    await r.read()
                    if r.status == 200:
                        img_done += 1
                    else:
                        img_failed += 1
            except aiohttp.ClientError:
                img_failed += 1

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as session:
        t0 = time.monotonic()
        tasks = [text_client(session) for _ in range(args.text_concurrency)]
        if pool:
            tasks += [image_client(session) for _ in range(args.image_concurrency)]
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - t0
    return {"duration_s": elapsed, "images": img_done, "images_failed": img_failed,
            "images_per_s": img_done / elapsed, "text_streams": len(ttfts), "text_failed": text_failed,
            "ttft_p50_ms": (_pct(ttfts, 0.5) or 0) * 1e3, "ttft_p99_ms": (_pct(ttfts, 0.99) or 0) * 1e3}


def run_one(name: str, args, model: str, logs: Path, trial: int, images: list[str]) -> dict:
    http, rpc = free_tcp_port(), free_tcp_port()
    base = f"http://127.0.0.1:{http}"
    tag = f"mm-{name}-{trial}"
    fe = spawn(frontend_argv(name, model, http, rpc), logs / f"{tag}.frontend.log")
    sim = spawn(sim_argv(model, rpc, args), logs / f"{tag}.sim.log")
    row: dict = {"frontend": name, "trial": trial}
    try:
        wait_ready(base, {"frontend": fe, "sim engine": sim}, args.ready_timeout)
        warm = asyncio.run(_drive(base, argparse.Namespace(**{**vars(args), "duration": 5}), images[-64:]))
        if not warm["images"]:
            raise RuntimeError(f"warm-up: no image request succeeded ({warm})")
        row["text_only"] = asyncio.run(_drive(base, args, None))
        before = procstat.sample_cpu(fe.pid)
        mixed = asyncio.run(_drive(base, args, images[:-64]))
        cpu = procstat.cpu_delta(before, procstat.sample_cpu(fe.pid))
        row.update({"ok": True, "with_images": mixed, "frontend_cpu_s": cpu,
                    "cpu_ms_per_image": cpu / mixed["images"] * 1e3 if mixed["images"] else None})
    except Exception as e:  # noqa: BLE001
        row.update({"ok": False, "error": f"{type(e).__name__}: {e}"})
    finally:
        stop_process_group(fe, 20)
        stop_process_group(sim, 20)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frontends", default="ours,vllm-python")
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--image-concurrency", type=int, default=8)
    p.add_argument("--text-concurrency", type=int, default=16)
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--unique-images", type=int, default=1500)
    p.add_argument("--step-time", type=float, default=0.01)
    p.add_argument("--ready-timeout", type=float, default=600.0)
    p.add_argument("--out", default=str(RESULTS / "multimodal.json"))
    args = p.parse_args(argv)
    model = build_tiny_idefics3()
    logs = REPO / ".cache" / "bench-logs"
    logs.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    images = [_png(rng, args.image_size) for _ in range(args.unique_images + 64)]  # last 64: warm-up
    rows = []
    for trial in range(args.repeat):
        for name in args.frontends.split(","):
            row = run_one(name, args, model, logs, trial, images)
            print(json.dumps(row), flush=True)
            rows.append(row)
    Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
