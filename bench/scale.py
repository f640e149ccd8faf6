"""Scale sweep: frontend CPU per output token and memory per open stream, from 1 to 4096
concurrent streams (decode-heavy requests, 32 in / 512 out).

    .venv/bin/python bench/scale.py --frontends ours,vllm-rust \\
        --concurrency 1,16,256,1024,2048,4096

Each point starts a fresh frontend and simulated engine, warms the frontend up with 16
requests, samples its idle RSS, then runs `2 x concurrency` requests at the point's concurrency
while sampling RSS. Reported per point: frontend CPU per
output token (whole process tree, /proc), TPOT, and (peak RSS during the run - idle RSS) /
concurrency = memory per open stream.

The engine's token rate is held near the decode benchmark's (1024 streams at 10 ms per step,
~100k tokens/s): the step time is max(--step-time, concurrency x --step-time / 1024). A 2-core
machine cannot stream 4096 x 100 tokens/s through any of the frontends plus the load generator,
and a saturated machine would measure queueing, not the per-token cost; holding the rate keeps
every point below saturation, so a cost that grows with the number of open streams (a scan over
all streams per token, a timer per stream) shows up as µs per token rising with concurrency.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import procstat  # noqa: E402
from bench.frontends import frontend_spec, sim_argv, spawn, wait_ready  # noqa: E402
from bench.loadgen import bench_serve  # noqa: E402
from bench.run import RESULTS, bench_model_dir, fmt, machine, md_table  # noqa: E402
from bench.workloads import WORKLOADS  # noqa: E402
from tests.stack import stop_process_group  # noqa: E402

WARMUP_CONCURRENCY = 16
WARMUP_REQUESTS = 16


def run_point(name: str, concurrency: int, args, model: str, logs: Path) -> dict:
    step = max(args.step_time, concurrency * args.step_time / 1024)
    wl = replace(WORKLOADS["decode"], output_len=args.output_len)
    spec = frontend_spec(name, model, args.workers)
    base = f"http://127.0.0.1:{spec.http_port}"
    tag = f"scale-{name}-{concurrency}"
    fe = spawn(spec.argv, logs / f"{tag}.frontend.log", spec.env)
    sim = spawn(sim_argv(model, spec.rpc_port, step, max(concurrency, 1024)), logs / f"{tag}.sim.log")
    row: dict = {"frontend": name, "concurrency": concurrency, "step_time_s": step}
    bench_log = logs / f"{tag}.bench.log"
    try:
        wait_ready(base, {"frontend": fe, "sim engine": sim}, args.ready_timeout)
        bench_serve(base, model, wl, WARMUP_REQUESTS, WARMUP_CONCURRENCY, bench_log, timeout=300)
        time.sleep(1.0)
        idle = min(procstat.tree_rss(fe.pid) for _ in range(3) if time.sleep(0.2) is None)
        n = 2 * concurrency
        before = procstat.sample_cpu(fe.pid)
        with procstat.RssPeak(fe.pid, interval=0.25) as rss:
            result = bench_serve(base, model, wl, n, concurrency, bench_log, timeout=args.bench_timeout)
        cpu = procstat.cpu_delta(before, procstat.sample_cpu(fe.pid))
        tokens = result["total_output_tokens"]
        row.update({
            "ok": True,
            "num_prompts": n,
            "completed": result["completed"],
            "failed": result.get("failed", 0),
            "duration_s": result["duration"],
            "out_tok_per_s": result["output_throughput"],
            "tpot_p50_ms": result.get("median_tpot_ms"),
            "ttft_p50_ms": result.get("median_ttft_ms"),
            "cpu_s": cpu,
            "cpu_us_per_out_token": cpu / tokens * 1e6 if tokens else None,
            "idle_rss_mib": idle / 2**20,
            "peak_rss_mib": rss.peak / 2**20,
            "kib_per_open_stream": (rss.peak - idle) / concurrency / 1024,
        })
    except Exception as e:  # noqa: BLE001 - one point failing must not lose the others
        row.update({"ok": False, "error": f"{type(e).__name__}: {e}"})
    finally:
        stop_process_group(fe, 20)
        stop_process_group(sim, 20)
    return row


def table(rows: list[dict]) -> str:
    columns = ["frontend", "streams", "engine step ms", "out tok/s", "TPOT p50 ms", "CPU µs/out tok",
               "idle RSS MiB", "peak RSS MiB", "KiB per open stream", "failed"]
    return md_table(columns, rows, ["frontend", "concurrency"], lambda r: [
        f"{r['step_time_s'] * 1000:.0f}", fmt(r["out_tok_per_s"], ".0f"), fmt(r["tpot_p50_ms"]),
        fmt(r["cpu_us_per_out_token"]), fmt(r["idle_rss_mib"], ".0f"), fmt(r["peak_rss_mib"], ".0f"),
        fmt(r["kib_per_open_stream"], ".0f"), str(r["failed"])])


def chart(rows: list[dict], path: Path, title: str) -> None:
    try:
        import matplotlib
    except ImportError:  # the `bench` extra; the JSON results are written already
        print(f"[bench] no chart ({path}): pip install '.[bench]' for matplotlib")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = {"ours": "#2b8a3e", "vllm-python": "#1c7ed6", "vllm-rust": "#e8590c"}
    for fe in dict.fromkeys(r["frontend"] for r in rows):
        pts = [r for r in rows if r["frontend"] == fe and r.get("ok")]
        xs = [r["concurrency"] for r in pts]
        for ax, key in zip(axes, ("cpu_us_per_out_token", "kib_per_open_stream")):
            ax.plot(xs, [r[key] for r in pts], marker="o", label=fe, color=colors.get(fe))
    for ax, label in zip(axes, ("frontend CPU µs per output token", "memory per open stream, KiB")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent streams")
        ax.set_title(label, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.legend()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frontends", default="ours,vllm-rust")
    ap.add_argument("--concurrency", default="1,16,256,1024,2048,4096")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--output-len", type=int, default=512)
    ap.add_argument("--step-time", type=float, default=0.01)
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("--bench-timeout", type=float, default=600)
    ap.add_argument("--out", default=str(RESULTS / "scale.json"))
    args = ap.parse_args(argv)

    logs = RESULTS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    model = bench_model_dir()
    info = {"started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(), "argv": sys.argv, "workers": args.workers}
    rows: list[dict] = []
    out = Path(args.out)
    for c in (int(x) for x in args.concurrency.split(",")):
        for fe in args.frontends.split(","):
            print(f"[scale] {fe} at {c} streams ...", file=sys.stderr, flush=True)
            row = run_point(fe, c, args, model, logs)
            rows.append(row)
            out.write_text(json.dumps({**info, "results": rows, "partial": True}, indent=2, default=str))
            brief = (f"{row['cpu_us_per_out_token']:.1f} µs/tok, {row['kib_per_open_stream']:.0f} KiB/stream"
                     if row.get("ok") else row.get("error"))
            print(f"[scale] {fe} at {c}: {brief}", file=sys.stderr, flush=True)
    info["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    out.write_text(json.dumps({**info, "results": rows}, indent=2, default=str))
    m = info["machine"]
    chart(rows, out.with_suffix(".png"),
          f"{m['cpus']} cores ({m['cpu_model']}), decode 32 in / {args.output_len} out, "
          f"workers={args.workers}; {info['started']}")
    print(table(rows))
    print(f"\nwrote {out} and {out.with_suffix('.png')}")
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
