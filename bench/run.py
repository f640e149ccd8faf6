"""Side-by-side frontend benchmark: ours vs vLLM's Python and Rust frontends, one simulated engine.

    .venv/bin/python bench/run.py --workload decode,preprocess,stop,toolcall \\
        --frontends ours,vllm-python,vllm-rust --concurrency 1024 --duration 30

For each workload and frontend: start the simulated engine and the frontend (no local engine,
the engine joins over TCP), send one probe request (behaviour), a warm-up run of `--concurrency`
requests (its rate sizes the measured run to about `--duration` seconds), then the measured run.
The frontend's CPU (utime+stime over its whole process tree, from /proc) is sampled right before
and after the measured run; its RSS is sampled throughout. Results: a table on stdout,
bench/results/latest.json and bench/results/latest.png.

`--py-spy` additionally records a py-spy profile of our frontend's process tree during the
measured run (raw collapsed stacks + a summary); use it in a separate run, as sampling perturbs
the numbers (at 100 samples a second on a 2-core box, req1 served half its request rate:
`--py-spy-rate 20` perturbs less).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import procstat  # noqa: E402
from bench.frontends import (  # noqa: E402
    REPO, frontend_spec, sim_argv, spawn, vllm_rs_binary, wait_ready)
from bench.loadgen import bench_serve, probe  # noqa: E402
from bench.workloads import WORKLOADS, Workload  # noqa: E402
from tests.stack import stop_process_group  # noqa: E402

RESULTS = REPO / "bench" / "results"
FRONTENDS = ("ours", "vllm-python", "vllm-rust")


def bench_model_dir() -> str:
    """The bench's own copy of the DeepSeek V4 tokenizer dir (config.json, tokenizer.json,
    tokenizer_config.json with the chat template). All three frontends parse it as is."""
    from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4

    return materialize_deepseek_v4(str(REPO / ".cache" / "bench-deepseek-v4"))


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "mem_gib": round(mem / 2**30, 1),
            "kernel": platform.release(), "python": platform.python_version(),
            "loadavg_at_start": os.getloadavg()}


def _pct(result: dict, metric: str, p: int) -> float | None:
    for key in (f"p{p}_{metric}_ms", f"median_{metric}_ms" if p == 50 else ""):
        if key and result.get(key) is not None:
            return result[key]
    return None


def _children_cpu() -> float:
    """CPU seconds of this script's reaped children (each bench serve run, once it exited)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def start_py_spy(pid: int, duration: float, out: Path, rate: int = 100) -> subprocess.Popen | None:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        print("py-spy not found; no profile", file=sys.stderr)
        return None
    argv = [exe, "record", "--pid", str(pid), "--subprocesses", "--nonblocking", "--rate", str(rate),
            "--duration", str(int(duration)), "--format", "raw", "-o", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _summarise_profile(raw: Path) -> None:
    """profile-X.txt (py-spy raw) -> profile-X.svg (flame graph) + profile-X-summary.txt."""
    from bench.profile_summary import flamegraph_svg, load, summarise

    if not raw.exists():
        print(f"py-spy wrote no {raw}", file=sys.stderr)
        return
    stacks = load(raw)
    raw.with_name(raw.stem + "-summary.txt").write_text(summarise(stacks, 30) + "\n")
    raw.with_suffix(".svg").write_text(flamegraph_svg(stacks, f"py-spy, ours: {raw.stem}"))


def run_one(name: str, wl: Workload, args, model: str, logs: Path) -> dict:
    spec = frontend_spec(name, model, args.workers, shlex.split(args.frontend_args))
    base = f"http://127.0.0.1:{spec.http_port}"
    tag = f"{wl.name}-{name}"
    fe = spawn(spec.argv, logs / f"{tag}.frontend.log", spec.env)
    step = workload_step(wl, args)
    sim = spawn(sim_argv(model, spec.rpc_port, step, args.max_num_seqs), logs / f"{tag}.sim.log")
    row: dict = {"frontend": name, "workload": wl.name, "argv": spec.argv, "step_time_s": step}
    bench_log = logs / f"{tag}.bench.log"
    try:
        t0 = time.monotonic()
        wait_ready(base, {"frontend": fe, "sim engine": sim}, args.ready_timeout)
        row["startup_s"] = round(time.monotonic() - t0, 1)
        row["probe"] = probe(base, wl)
        # Memory of the idle tree (after one request), per process: supervisor / main process and
        # each worker. PSS counts a page shared by k processes as 1/k in each.
        time.sleep(0.5)
        idle_pss = procstat.tree_pss_by_pid(fe.pid)
        with procstat.RssPeak(fe.pid, pss=True) as rss:
            warm = bench_serve(base, model, wl, args.warmup or min(args.concurrency, 512),
                               args.concurrency, bench_log, timeout=args.bench_timeout)
            rate = warm["completed"] / max(warm["duration"], 1e-6)
            # ~duration seconds at the warm-up rate; more (up to min_waves x concurrency) when that
            # fits in max_duration, so fast frontends reach a steady state past the first wave.
            n = max(int(rate * args.duration),
                    min(int(args.min_waves * args.concurrency), int(rate * args.max_duration)), 32)
            before = procstat.sample_cpu(fe.pid)
            io_before = procstat.tree_io_calls(fe.pid)
            sim_before, kids_before = procstat.sample_cpu(sim.pid), _children_cpu()
            busy_before, load_before = procstat.machine_busy(), os.getloadavg()[0]
            overflows_before = procstat.listen_overflows()
            spy = None
            if args.py_spy and name == "ours":
                est = n / max(rate, 1e-6)
                spy = start_py_spy(fe.pid, args.py_spy_seconds or max(5, est * 0.8),
                                   RESULTS / f"profile-{wl.name}{args.py_spy_tag}.txt", args.py_spy_rate)
            result = bench_serve(base, model, wl, n, args.concurrency, bench_log, timeout=args.bench_timeout)
            after = procstat.sample_cpu(fe.pid)
            io_reads, io_writes = procstat.io_calls_delta(io_before, procstat.tree_io_calls(fe.pid))
            sim_cpu = procstat.cpu_delta(sim_before, procstat.sample_cpu(sim.pid))
            loadgen_cpu = _children_cpu() - kids_before  # the finished bench serve process
            busy_after = procstat.machine_busy()
            overflows = procstat.listen_overflows() - overflows_before
            if spy is not None:
                spy.wait(120)
                _summarise_profile(RESULTS / f"profile-{wl.name}{args.py_spy_tag}.txt")
        cpu = procstat.cpu_delta(before, after)
        gone = sorted(set(before.per_pid) - set(after.per_pid))
        out_tokens = result["total_output_tokens"]
        done = result["completed"]
        row.update({
            "ok": True,
            "num_prompts": n,
            "completed": done,
            "failed": result.get("failed", 0),
            "duration_s": result["duration"],
            "req_per_s": result["request_throughput"],
            "out_tok_per_s": result["output_throughput"],
            "total_output_tokens": out_tokens,
            "mean_output_tokens": out_tokens / done if done else None,
            "ttft_ms": {p: _pct(result, "ttft", p) for p in (50, 90, 99)},
            "tpot_ms": {p: _pct(result, "tpot", p) for p in (50, 90, 99)},
            "itl_ms": {p: _pct(result, "itl", p) for p in (50, 90, 99)},
            "cpu_s": cpu,
            "cpu_sys_s": procstat.sys_delta(before, after),
            "cpu_us_per_out_token": cpu / out_tokens * 1e6 if out_tokens else None,
            "cpu_ms_per_request": cpu / done * 1e3 if done else None,
            "cpu_util_cores": cpu / result["duration"],
            # read/write-family system calls (socket writes of SSE, eventfd wake-ups; not ZMQ's
            # sendto/recvfrom) per request
            "read_calls_per_request": io_reads / done if done else None,
            "write_calls_per_request": io_writes / done if done else None,
            "peak_rss_mib": rss.peak / 2**20,
            "peak_pss_mib": rss.peak_pss / 2**20,
            "idle_pss_mib": sum(idle_pss.values()) / 2**20,
            "idle_pss_per_process_mib": [round(v / 2**20, 1) for v in idle_pss.values()],
            "pss_kib_per_open_stream": (rss.peak_pss - sum(idle_pss.values())) / 1024 / args.concurrency,
            "loadavg_1m_after": os.getloadavg()[0],
            "sim_engine_cpu_s": sim_cpu,
            "loadgen_cpu_s": loadgen_cpu,
            "machine_cpu_busy_cores": procstat.busy_cores(busy_before, busy_after),
            "loadavg_1m_before": load_before,
            "tcp_listen_overflows": overflows,
            "steady_req_per_s": (result.get("steady_state") or {}).get("request_throughput"),
            "steady_out_tok_per_s": (result.get("steady_state") or {}).get("output_throughput"),
            "tree_pids": len(after.per_pid),
            "pids_exited_during_run": gone,
            "steady_state": result.get("steady_state"),
            "warmup": {"completed": warm["completed"], "duration_s": warm["duration"],
                       "req_per_s": warm["request_throughput"]},
        })
    except Exception as e:  # noqa: BLE001 - one frontend failing must not lose the others' rows
        row.update({"ok": False, "error": f"{type(e).__name__}: {e}"})
    finally:
        stop_process_group(fe, 20)
        stop_process_group(sim, 20)
    return row


_MEDIAN_KEYS = ("req_per_s", "out_tok_per_s", "cpu_us_per_out_token", "cpu_ms_per_request",
                "cpu_util_cores", "peak_rss_mib", "machine_cpu_busy_cores", "steady_req_per_s",
                "duration_s", "sim_engine_cpu_s", "loadgen_cpu_s", "peak_pss_mib", "idle_pss_mib",
                "pss_kib_per_open_stream", "loadavg_1m_before", "loadavg_1m_after")


def _median(xs: list) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def aggregate(trials: list[dict]) -> list[dict]:
    """One row per (workload, frontend): the median of each metric over its successful trials
    (trials of different frontends are interleaved, so slow phases of a shared machine hit all
    of them alike), with every trial's req/s kept in `trials_req_per_s`. A frontend with no
    successful trial gets its first error."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in trials:
        groups.setdefault((r["workload"], r["frontend"]), []).append(r)
    out = []
    for (wl, fe), rs in groups.items():
        ok = [r for r in rs if r.get("ok")]
        if not ok:
            out.append(rs[0])
            continue
        row = dict(ok[0])
        row.pop("trial", None)
        row["trials"] = len(ok)
        row["trials_req_per_s"] = [round(r["req_per_s"], 1) for r in ok]
        row["failed"] = sum(r["failed"] for r in ok)
        row["tcp_listen_overflows"] = sum(r.get("tcp_listen_overflows", 0) for r in ok)
        for key in _MEDIAN_KEYS:
            row[key] = _median([r.get(key) for r in ok])
        for key in ("ttft_ms", "tpot_ms", "itl_ms"):
            row[key] = {p: _median([{int(k): v for k, v in r[key].items()}.get(p) for r in ok])
                        for p in (50, 90, 99)}
        out.append(row)
    return out


def workload_step(wl: Workload, args) -> float:
    """Engine seconds per step: the workload's own (frontend-bound workloads), else --step-time."""
    return args.step_time if wl.step_time is None else wl.step_time


def fmt(v, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def md_table(columns: list[str], rows: list[dict], keys: list[str], cells) -> str:
    """A markdown table: the `keys` columns of each row, then `cells(row)` (or its error)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        head = [str(r[k]) for k in keys]
        if r.get("ok"):
            rest = cells(r)
        else:
            rest = [f"error: {r.get('error', '')[:80]}"] + [""] * (len(columns) - len(keys) - 1)
        lines.append("| " + " | ".join(head + rest) + " |")
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    columns = ["workload", "frontend", "req/s", "out tok/s", "TTFT p50/p90/p99 ms",
               "TPOT p50/p90/p99 ms", "CPU µs/out tok", "CPU ms/req", "frontend cores",
               "peak RSS MiB", "PSS idle / peak MiB", "PSS KiB/stream", "failed", "steady req/s",
               "SYN overflows", "box busy cores", "load avg", "req/s of each trial"]

    def cells(r: dict) -> list[str]:
        # int keys in memory, str keys once read back from JSON
        t = {int(k): v for k, v in r["ttft_ms"].items()}
        p = {int(k): v for k, v in r["tpot_ms"].items()}
        return [fmt(r["req_per_s"]), fmt(r["out_tok_per_s"], ".0f"),
                f"{fmt(t[50], '.0f')} / {fmt(t[90], '.0f')} / {fmt(t[99], '.0f')}",
                f"{fmt(p[50])} / {fmt(p[90])} / {fmt(p[99])}",
                fmt(r["cpu_us_per_out_token"]), fmt(r["cpu_ms_per_request"], ".2f"),
                fmt(r["cpu_util_cores"], ".2f"), fmt(r["peak_rss_mib"], ".0f"),
                f"{fmt(r.get('idle_pss_mib'), '.0f')} / {fmt(r.get('peak_pss_mib'), '.0f')}",
                fmt(r.get("pss_kib_per_open_stream"), ".0f"), str(r["failed"]),
                fmt(r.get("steady_req_per_s")), str(r.get("tcp_listen_overflows", "-")),
                fmt(r["machine_cpu_busy_cores"], ".2f"), fmt(r.get("loadavg_1m_before")),
                " / ".join(str(x) for x in r.get("trials_req_per_s", [round(r["req_per_s"], 1)]))]

    return md_table(columns, rows, ["workload", "frontend"], cells)


def ratios(rows: list[dict]) -> dict:
    """Ours relative to each peer, per workload (the issue's acceptance ratios)."""
    by = {(r["workload"], r["frontend"]): r for r in rows if r.get("ok")}
    out: dict = {}
    for wl in {r["workload"] for r in rows}:
        ours = by.get((wl, "ours"))
        if not ours:
            continue
        for peer in ("vllm-rust", "vllm-python", "ours-base"):
            p = by.get((wl, peer))
            if not p:
                continue
            def div(a, b):
                return a / b if a is not None and b else None
            out[f"{wl}/ours÷{peer}"] = {
                "throughput": div(ours["req_per_s"], p["req_per_s"]),
                "cpu_per_out_token": div(ours["cpu_us_per_out_token"], p["cpu_us_per_out_token"]),
                "cpu_per_request": div(ours["cpu_ms_per_request"], p["cpu_ms_per_request"]),
                "out_tok_per_s": div(ours["out_tok_per_s"], p["out_tok_per_s"]),
                "ttft_p50": div(ours["ttft_ms"][50], p["ttft_ms"][50]),
                "ttft_p99": div(ours["ttft_ms"][99], p["ttft_ms"][99]),
                "peak_rss": div(ours["peak_rss_mib"], p["peak_rss_mib"]),
                "peak_pss": div(ours.get("peak_pss_mib"), p.get("peak_pss_mib")),
            }
    return out


def chart(rows: list[dict], path: Path, title: str) -> bool:
    """Draw the run's chart; False (and nothing written) without matplotlib."""
    try:
        import matplotlib
    except ImportError:  # the `bench` extra; the JSON results are written already
        print(f"[bench] no chart ({path}): pip install '.[bench]' for matplotlib")
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("ok")]
    wls = list(dict.fromkeys(r["workload"] for r in rows))
    fes = list(dict.fromkeys(r["frontend"] for r in rows))
    by = {(r["workload"], r["frontend"]): r for r in ok}
    panels = [("req_per_s", "requests / s (higher is better)"),
              ("cpu_us_per_out_token", "frontend CPU µs per output token (lower is better)"),
              ("cpu_ms_per_request", "frontend CPU ms per request (lower is better)"),
              ("peak_pss_mib", "frontend peak PSS of the process tree, MiB (lower is better)")]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    colors = {"ours": "#2b8a3e", "ours-base": "#8ce99a", "vllm-python": "#1c7ed6", "vllm-rust": "#e8590c"}
    width = 0.8 / max(len(fes), 1)
    for ax, (key, label) in zip(axes.flat, panels):
        for i, fe in enumerate(fes):
            xs, ys, labels = [], [], []
            for j, wl in enumerate(wls):
                r = by.get((wl, fe))
                if r and r.get(key) is not None:
                    xs.append(j + (i - (len(fes) - 1) / 2) * width)
                    ys.append(r[key])
                    # a throughput with failed requests is not comparable: say so on the bar
                    failed = f"\n{r['failed']} failed" if r.get("failed") and key == "req_per_s" else ""
                    labels.append(f"{r[key]:.3g}{failed}")
            bars = ax.bar(xs, ys, width, label=fe, color=colors.get(fe))
            ax.bar_label(bars, labels=labels, fontsize=7)
        ax.set_xticks(range(len(wls)), wls)
        ax.set_title(label, fontsize=10)
        if key in ("cpu_us_per_out_token", "cpu_ms_per_request"):
            ax.set_yscale("log")
    axes.flat[0].legend()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _write(path: Path, doc: dict) -> None:
    """Written after every row too, so an interrupted run keeps what it measured."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="decode,preprocess,stop,toolcall",
                    help=f"comma list of {', '.join(WORKLOADS)}")
    ap.add_argument("--frontends", default=",".join(FRONTENDS))
    ap.add_argument("--concurrency", type=int, default=1024)
    ap.add_argument("--duration", type=float, default=30.0, help="target seconds per measured run")
    ap.add_argument("--warmup", type=int, default=0,
                    help="warm-up requests, whose rate sizes the measured run (default: min(concurrency, 512))")
    ap.add_argument("--repeat", type=int, default=1,
                    help="trials per frontend, interleaved (ours, peers, ours, ...); the table shows "
                         "each metric's median over the trials and every trial's req/s")
    ap.add_argument("--min-waves", type=float, default=4.0,
                    help="measured run has up to this many x --concurrency requests (if that fits in "
                         "--max-duration at the warm-up rate), to reach a steady state past the "
                         "first all-at-once wave")
    ap.add_argument("--max-duration", type=float, default=60.0)
    ap.add_argument("--frontend-args", default="",
                    help="flags added to every frontend's command line, e.g. '--stream-interval 4'")
    ap.add_argument("--workers", type=int, default=os.cpu_count(),
                    help="frontend processes (ours, vllm-python) / runtime threads (vllm-rust)")
    ap.add_argument("--step-time", type=float, default=0.01,
                    help="engine seconds per step for workloads without their own (fbound: 2 ms, fbound0: 0)")
    ap.add_argument("--max-num-seqs", type=int, default=1024)
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("--bench-timeout", type=float, default=600)
    ap.add_argument("--py-spy", action="store_true", help="profile ours during the measured run")
    ap.add_argument("--py-spy-seconds", type=float, default=0,
                    help="profile only the first N seconds of the measured run (e.g. the first wave)")
    ap.add_argument("--py-spy-tag", default="", help="suffix of the profile file names")
    ap.add_argument("--py-spy-rate", type=int, default=100,
                    help="samples per second (default 100; at full load on a small box py-spy's own "
                         "work takes CPU from the frontend it samples: 20-25 perturbs less)")
    ap.add_argument("--out", default=str(RESULTS / "latest.json"))
    args = ap.parse_args(argv)

    vllm_rs_binary()  # fail early with the extraction hint
    RESULTS.mkdir(parents=True, exist_ok=True)
    logs = RESULTS / "logs"
    logs.mkdir(exist_ok=True)
    model = bench_model_dir()
    info = {"started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(), "argv": sys.argv, "concurrency": args.concurrency,
            "workers": args.workers, "step_time": args.step_time, "duration_target_s": args.duration,
            "load_generator": "vllm-rs bench serve (vllm 0.33.0 wheel), openai-chat, streaming"}
    info["repeat"] = args.repeat
    trials: list[dict] = []
    for wl_name in args.workload.split(","):
        wl = WORKLOADS[wl_name]
        for trial in range(args.repeat):
            for fe in args.frontends.split(","):
                print(f"[bench] {wl.name} / {fe} (trial {trial + 1}/{args.repeat}) ...",
                      file=sys.stderr, flush=True)
                row = run_one(fe, wl, args, model, logs)
                row["trial"] = trial
                trials.append(row)
                _write(Path(args.out), {**info, "trials": trials, "partial": True})
                brief = (f"{row['req_per_s']:.1f} req/s, {row['cpu_us_per_out_token']:.1f} µs/tok"
                         if row.get("ok") else row.get("error"))
                print(f"[bench] {wl.name} / {fe}: {brief}", file=sys.stderr, flush=True)
    rows = aggregate(trials)
    info["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    doc = {**info, "workloads": {w: WORKLOADS[w].description for w in args.workload.split(",")},
           "results": rows, "ratios": ratios(rows), "trials": trials}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _write(out, doc)
    m = info["machine"]
    steps = ", ".join(f"{w} {workload_step(WORKLOADS[w], args) * 1000:g} ms"
                      for w in args.workload.split(","))
    title = (f"{m['cpus']} cores ({m['cpu_model']}), sim engine step: {steps}, "
             f"{args.concurrency} concurrent streams, workers={args.workers}, median of "
             f"{args.repeat} trial(s); {info['started']}")
    charted = chart(rows, out.with_suffix(".png"), title)
    print(table(rows))
    print()
    for k, v in sorted(doc["ratios"].items()):
        print(k, {kk: (round(vv, 2) if vv is not None else None) for kk, vv in v.items()})
    print(f"\nwrote {out}" + (f" and {out.with_suffix('.png')}" if charted else " (no chart)"))
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
