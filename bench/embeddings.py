"""Embeddings benchmark: this frontend vs vLLM's Python frontend, one simulated engine each run.

For each frontend (interleaved over `--repeat` trials): start the simulated engine as an
embedding model (`--runner pooling`, a `--pooling-dim` float32 vector per request after one
step) and the frontend in front of it (`--runner pooling --convert embed`, no local engine, the
sim joins over TCP as in bench/run.py), drive `POST /v1/embeddings` with short inputs at a fixed
concurrency from a separate load-generator process (aiohttp on uvloop, keep-alive
connections), and report embeddings per second, latency percentiles and the frontend's own CPU
per request (utime+stime of its process tree from /proc, sampled around the measured run).

Model directory `.cache/bench-embed`: the bench's DeepSeek V4 tokenizer with a Qwen3
`config.json` (hidden size = `--pooling-dim`); no weights, the engine is simulated.

    .venv/bin/python bench/embeddings.py --frontends ours,vllm-python --concurrency 256 \\
        --requests 20000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import procstat  # noqa: E402
from bench.frontends import MAX_MODEL_LEN, PY, REPO, SERVED_NAME, spawn, wait_ready  # noqa: E402
from bench.run import bench_model_dir, machine  # noqa: E402
from tests.stack import stop_process_group  # noqa: E402
from vllm_pyfrontend.supervisor.runtime import free_tcp_port  # noqa: E402

RESULTS = REPO / "bench" / "results"
WORDS = ("river stone quiet market signal orange harbor winter lamp garden copper window "
         "valley thread engine silver forest number paper music bridge cloud").split()


def embed_model_dir(dim: int) -> str:
    """Tokenizer files of the bench model plus a Qwen3 config whose hidden size is `dim`."""
    src = Path(bench_model_dir())
    dest = REPO / ".cache" / f"bench-embed-{dim}"
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "config.json":
            shutil.copyfile(f, dest / f.name)
    config = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": dim,
        "intermediate_size": 2 * dim, "num_hidden_layers": 2, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 129280, "max_position_embeddings": MAX_MODEL_LEN,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "bos_token_id": 0, "eos_token_id": 1,
    }
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    return str(dest)


def frontend_argv(name: str, model: str, workers: int, http: int, rpc: int) -> list[str]:
    join = ["--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(rpc)]
    common = ["--host", "127.0.0.1", "--port", str(http), "--served-model-name", SERVED_NAME,
              "--max-model-len", str(MAX_MODEL_LEN), "--runner", "pooling", "--convert", "embed"]
    if name == "ours":
        return [str(Path(PY).parent / "frontend-supervisor"), "--workers", str(workers), *common, *join, model]
    if name == "vllm-python":
        return [PY, "-c", "import sys; from vllm_pyfrontend.supervisor.vllm_headless import run_vllm_cli; "
                "run_vllm_cli(sys.argv[1:])", "serve", model, "--api-server-count", str(workers), *common, *join,
                "--disable-uvicorn-access-log"]
    raise ValueError(f"unknown frontend {name!r} (ours, vllm-python)")


def sim_argv(model: str, rpc: int, args) -> list[str]:
    return [PY, "-m", "vllm_pyfrontend.supervisor.sim", "--handshake-address", f"tcp://127.0.0.1:{rpc}",
            "--engine-index", "0", "--model", model, "--step-time", str(args.step_time),
            "--max-num-seqs", str(args.max_num_seqs), "--max-model-len", str(MAX_MODEL_LEN),
            "--max-num-batched-tokens", str(1 << 24), "--num-gpu-blocks", str(1 << 22),
            "--runner", "pooling", "--pooling-dim", str(args.dim)]


# --------------------------------------------------------------------------- load generator


async def _load(base: str, n: int, concurrency: int, inputs_per_request: int, encoding: str,
                seed: int) -> dict:
    import aiohttp

    rng = random.Random(seed)
    bodies = []
    for _ in range(min(n, 4096)):
        texts = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(inputs_per_request)]
        bodies.append(json.dumps({"model": SERVED_NAME, "input": texts if inputs_per_request > 1 else texts[0],
                                  "encoding_format": encoding}).encode())
    latencies: list[float] = []
    failed = 0
    next_i = 0
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async def worker() -> None:
            nonlocal next_i, failed
            while next_i < n:
                i = next_i
                next_i += 1
                t0 = time.perf_counter()
                try:
                    async with session.post(base + "/v1/embeddings", data=bodies[i % len(bodies)],
                                            headers={"Content-Type": "application/json"}) as r:
                        await r.read()
                        if r.status != 200:
                            failed += 1
                            continue
                except aiohttp.ClientError:
                    failed += 1
                    continue
                latencies.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        duration = time.perf_counter() - t0
    latencies.sort()

    def pct(p: float) -> float | None:
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1e3 if latencies else None

    return {"completed": len(latencies), "failed": failed, "duration_s": duration,
            "latency_ms": {"50": pct(50), "90": pct(90), "99": pct(99)}}


def loadgen_main(argv: list[str]) -> int:
    """`embeddings.py --loadgen BASE N CONCURRENCY INPUTS ENCODING SEED OUT`: one run, JSON to OUT."""
    base, n, conc, per, enc, seed, out = argv
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    result = asyncio.run(_load(base, int(n), int(conc), int(per), enc, int(seed)))
    Path(out).write_text(json.dumps(result))
    return 0


def run_load(base: str, n: int, args, encoding: str, log: Path, seed: int) -> tuple[dict, float]:
    """The load generator in its own process (outside the measured tree); its result and CPU."""
    out = log.with_suffix(".result.json")
    argv = [PY, __file__, "--loadgen", base, str(n), str(args.concurrency), str(args.inputs_per_request),
            encoding, str(seed), str(out)]
    with open(log, "ab") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
        before = procstat.sample_cpu(proc.pid)
        cpu = 0.0
        while proc.poll() is None:
            try:
                cpu = procstat.cpu_delta(before, procstat.sample_cpu(proc.pid))
            except Exception:  # noqa: BLE001 - the process may be gone between poll and read
                pass
            time.sleep(0.2)
    if proc.returncode != 0:
        raise RuntimeError(f"load generator exited {proc.returncode}; see {log}")
    return json.loads(out.read_text()), cpu


# --------------------------------------------------------------------------- one trial


def run_one(name: str, args, model: str, encoding: str, logs: Path, trial: int) -> dict:
    http, rpc = free_tcp_port(), free_tcp_port()
    base = f"http://127.0.0.1:{http}"
    tag = f"embed-{encoding}-{name}-{trial}"
    fe = spawn(frontend_argv(name, model, args.workers, http, rpc), logs / f"{tag}.frontend.log")
    sim = spawn(sim_argv(model, rpc, args), logs / f"{tag}.sim.log")
    row: dict = {"frontend": name, "encoding": encoding, "trial": trial}
    try:
        t0 = time.monotonic()
        wait_ready(base, {"frontend": fe, "sim engine": sim}, args.ready_timeout)
        row["startup_s"] = round(time.monotonic() - t0, 1)
        warm, _ = run_load(base, args.warmup, args, encoding, logs / f"{tag}.load.log", seed=1)
        if warm["failed"]:
            raise RuntimeError(f"{warm['failed']} warm-up requests failed")
        with procstat.RssPeak(fe.pid) as rss:
            before = procstat.sample_cpu(fe.pid)
            sim_before = procstat.sample_cpu(sim.pid)
            busy_before = procstat.machine_busy()
            result, load_cpu = run_load(base, args.requests, args, encoding, logs / f"{tag}.load.log", seed=2)
            cpu = procstat.cpu_delta(before, procstat.sample_cpu(fe.pid))
            sim_cpu = procstat.cpu_delta(sim_before, procstat.sample_cpu(sim.pid))
            busy = procstat.busy_cores(busy_before, procstat.machine_busy())
        done = result["completed"]
        row.update({
            "ok": True, **result,
            "req_per_s": done / result["duration_s"],
            "embeddings_per_s": done * args.inputs_per_request / result["duration_s"],
            "cpu_s": cpu,
            "cpu_ms_per_request": cpu / done * 1e3 if done else None,
            "frontend_cores": cpu / result["duration_s"],
            "peak_rss_mib": rss.peak / 2**20,
            "sim_engine_cpu_s": sim_cpu,
            "loadgen_cpu_s": load_cpu,
            "machine_busy_cores": busy,
        })
    except Exception as e:  # noqa: BLE001 - one failing frontend must not lose the others
        row.update({"ok": False, "error": f"{type(e).__name__}: {e}"})
    finally:
        stop_process_group(fe, 20)
        stop_process_group(sim, 20)
    return row


def _median(xs: list) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--loadgen":
        return loadgen_main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frontends", default="ours,vllm-python")
    p.add_argument("--encodings", default="float", help="float, base64 or both (comma-separated)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--inputs-per-request", type=int, default=1)
    p.add_argument("--dim", type=int, default=1024, help="embedding size")
    p.add_argument("--step-time", type=float, default=0.005, help="sim engine seconds per step")
    p.add_argument("--max-num-seqs", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--ready-timeout", type=float, default=300)
    p.add_argument("--out", default=str(RESULTS / "embeddings.json"))
    args = p.parse_args(argv)
    model = embed_model_dir(args.dim)
    logs = RESULTS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    trials = []
    for enc in args.encodings.split(","):
        for t in range(args.repeat):
            for name in args.frontends.split(","):
                row = run_one(name, args, model, enc, logs, t)
                print(json.dumps({k: row.get(k) for k in ("frontend", "encoding", "trial", "ok", "req_per_s",
                                                          "cpu_ms_per_request", "latency_ms", "failed",
                                                          "error")}), flush=True)
                trials.append(row)
    rows = []
    for enc in args.encodings.split(","):
        for name in args.frontends.split(","):
            ts = [r for r in trials if r["frontend"] == name and r["encoding"] == enc and r.get("ok")]
            if not ts:
                continue
            rows.append({
                "frontend": name, "encoding": enc,
                **{k: _median([r.get(k) for r in ts]) for k in (
                    "embeddings_per_s", "req_per_s", "cpu_ms_per_request", "frontend_cores", "peak_rss_mib",
                    "sim_engine_cpu_s", "loadgen_cpu_s", "machine_busy_cores")},
                "latency_ms": {q: _median([r["latency_ms"][str(q)] for r in ts]) for q in (50, 90, 99)},
                "failed": sum(r["failed"] for r in ts),
                "per_trial_req_per_s": [round(r["req_per_s"], 1) for r in ts],
            })
    print()
    print("| encoding | frontend | embeddings/s | CPU ms/req | frontend cores | latency p50/p90/p99 ms | "
          "peak RSS MiB | failed | box busy cores | req/s of each trial |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lat = r["latency_ms"]
        print(f"| {r['encoding']} | {r['frontend']} | {r['embeddings_per_s']:.0f} | {r['cpu_ms_per_request']:.3f} | "
              f"{r['frontend_cores']:.2f} | {lat[50]:.0f} / {lat[90]:.0f} / {lat[99]:.0f} | "
              f"{r['peak_rss_mib']:.0f} | {r['failed']} | {r['machine_busy_cores']:.2f} | "
              f"{' / '.join(str(x) for x in r['per_trial_req_per_s'])} |")
    Path(args.out).write_text(json.dumps({"started": started, "machine": machine(), "argv": sys.argv,
                                          "results": rows, "trials": trials}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
