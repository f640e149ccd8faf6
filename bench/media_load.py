"""Media loading: images per second and event-loop stalls, this frontend's MediaLoader against
vLLM's own MediaConnector, on the same JPEGs from a local HTTP server (and as data: URLs).

    .venv/bin/python bench/media_load.py [--n 200] [--concurrency 8] [--size 640x480]

For each loader and source: wall time of N loads at the given concurrency (images/s), and the
event loop's responsiveness meanwhile: a 1 ms ticker's worst and p99 lateness (a decode on the
loop would show as a stall the length of a decode).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _jpegs(count: int, size: tuple[int, int]) -> list[bytes]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        arr = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def _serve(files: list[bytes]) -> tuple[str, asyncio.AbstractEventLoop]:
    from aiohttp import web

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def start() -> int:
        app = web.Application()

        async def get(request):
            return web.Response(body=files[int(request.match_info["i"])], content_type="image/jpeg")

        app.router.add_get("/{i}.jpg", get)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner.addresses[0][1]

    port = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    return f"http://127.0.0.1:{port}", loop


async def _measure(load, urls: list[str], concurrency: int) -> tuple[float, float, float]:
    lateness: list[float] = []
    stop = False

    async def ticker():
        while not stop:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lateness.append(time.perf_counter() - t - 0.001)

    tick = asyncio.create_task(ticker())
    sem = asyncio.Semaphore(concurrency)

    async def one(url):
        async with sem:
            await load(url)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(u) for u in urls))
    wall = time.perf_counter() - t0
    stop = True
    await tick
    lateness.sort()
    p99 = lateness[int(len(lateness) * 0.99) - 1] if lateness else 0.0
    return len(urls) / wall, max(lateness, default=0.0), p99


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--size", default="640x480")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mm-workers", type=int, default=0, help="our decode threads (0: the default; vLLM: 8)")
    args = ap.parse_args()
    size = tuple(int(x) for x in args.size.split("x"))
    files = _jpegs(16, size)
    base, _ = _serve(files)
    http_urls = [f"{base}/{i % len(files)}.jpg" for i in range(args.n)]
    data_urls = [f"data:image/jpeg;base64,{base64.b64encode(files[i % len(files)]).decode()}" for i in range(args.n)]

    from vllm.multimodal.media import MediaConnector

    from vllm_pyfrontend.media import MediaLoader, MediaPolicy

    ours = MediaLoader(MediaPolicy.from_env(allowed_private_networks=["127.0.0.1/32"],
                                                   mm_workers=args.mm_workers))
    theirs = MediaConnector()
    await ours.load_image(data_urls[0])  # imports and pools warm
    await theirs.fetch_image_async(data_urls[0])
    print(f"{args.n} JPEGs {size[0]}x{size[1]} (~{statistics.mean(map(len, files)) / 1024:.0f} KiB), "
          f"concurrency {args.concurrency}, {os.cpu_count()} CPUs, our threads {ours.executor._max_workers}")
    print(f"{'loader':<28}{'source':<8}{'images/s':>10}{'loop max ms':>13}{'loop p99 ms':>13}")
    loaders = (("vllm_pyfrontend MediaLoader", ours.fetch_image), ("vLLM MediaConnector", theirs.fetch_image_async))
    sources = (("http", http_urls), ("data", data_urls))
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for _ in range(args.rounds):  # interleaved rounds: a busy machine's drift hits both alike
        for source, urls in sources:
            for name, load in loaders:
                results.setdefault((name, source), []).append(await _measure(load, urls, args.concurrency))
    for (name, source), runs in results.items():
        rate, worst, p99 = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"{name:<28}{source:<8}{rate:>10.1f}{worst * 1e3:>13.1f}{p99 * 1e3:>13.1f}")
    print(f"(medians of {args.rounds} interleaved rounds)")
    await ours.close()
    from vllm.connections import global_http_connection

    if global_http_connection._async_client is not None:
        await global_http_connection._async_client.close()


if __name__ == "__main__":
    asyncio.run(main())
