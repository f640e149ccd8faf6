"""A bounded soak of the whole stack on the simulated engine: nothing lost, nothing leaked.

    .venv/bin/python bench/soak.py                       # 2 minutes, 256 clients
    .venv/bin/python bench/soak.py --duration 600        # the 10-minute soak
    .venv/bin/python bench/soak.py --json out.json       # figures for docs/RELIABILITY.md

Starts `frontend-supervisor --engine sim` (tests/stack.py), then `--concurrency` clients loop for
`--duration` seconds, each request drawn at random: streaming or not, a random length, a stop
string in scripted text (`vllm_xargs.sim_text`), tool-call-like scripted text with `tools`,
plain sampled text; a fraction is cancelled by the client at a random moment (connection
closed). Every request ends in exactly one client-side outcome, and the checks are:

- lost = 0: no request ends without a terminal outcome (a response, a 4xx/5xx, `[DONE]` after a
  finish or an error event, or our own cancellation);
- duplicated = 0: no choice finishes twice, no `[DONE]` twice, nothing after `[DONE]`;
- wrong = 0: stop strings cut the scripted text exactly where they should, and the scripted
  DSML tool call comes back as one parsed `get_weather` call (streamed or not);
- the server counted the same requests (`http_requests_total` of /metrics) and finished the
  same successful ones (`vllm:request_success_total`), within the cancellations' race;
- nothing leaked: the engine ends with 0 running / 0 waiting requests, every worker with 0 in
  flight (/load), and each process's RSS and open fds at the end are near their start.
Exit status 0 when every check holds.
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
import urllib.request
from collections import Counter
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import aiohttp  # noqa: E402

from tests.stack import Stack  # noqa: E402

MODEL = "demo:deepseek-v4"
SERVED = "dsv4"
STOP_TEXT = "alpha beta gamma delta STOPHERE epsilon zeta eta theta"
STOP_PREFIX = "alpha beta gamma delta "
REAL_STOPS = ["e", "."]  # common in any text: the output must end before the first of them
_D = "｜DSML｜"
# DeepSeek V4's tool-call markup, parsed by `--tool-call-parser deepseek_v4` in the workers.
TOOL_TEXT = (f'<{_D}tool_calls>\n<{_D}invoke name="get_weather">\n'
             f'<{_D}parameter name="city" string="true">Paris</{_D}parameter>\n'
             f'</{_D}invoke>\n</{_D}tool_calls>')
TOOL_ARGS = {"city": "Paris"}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}}}}]


# -- processes ----------------------------------------------------------------------------------

def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _name(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    if b"vllm_pyfrontend.server.worker" in argv:
        cfg = json.loads(argv[argv.index(b"--config-json") + 1])
        return f"worker {cfg['worker_index']}"
    if b"vllm_pyfrontend.supervisor.sim" in argv or b"vllm_pyfrontend.supervisor.vllm_headless" in argv:
        return "engine"
    return "?"


def snapshot(stack: Stack) -> dict[str, dict]:
    """RSS (MiB) and open fds of the supervisor, each worker and the engine."""
    out = {}
    for pid in [stack.proc.pid, *_children(stack.proc.pid)]:
        try:
            name = "supervisor" if pid == stack.proc.pid else _name(pid)
            with open(f"/proc/{pid}/status") as f:
                rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
            out[name] = {"pid": pid, "rss_mib": round(rss / 1024, 1), "fds": len(os.listdir(f"/proc/{pid}/fd"))}
        except (OSError, StopIteration, ValueError):
            continue
    return out


# -- server-side counts -------------------------------------------------------------------------

def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def engine_idle(stack: Stack) -> tuple[int, int]:
    stats = stack.freshest_engine_stats(polls=16) or {}
    return stats.get("num_running_reqs", -1), stats.get("num_waiting_reqs", -1)


def in_flight(stack: Stack, polls: int = 24) -> int:
    seen: dict[int, int] = {}
    for _ in range(polls):
        load = get_json(stack.base_url + "/load")
        seen[load["worker"]] = load["server_load"]
    return sum(seen.values())


_SAMPLE = re.compile(r'^([a-zA-Z_:]+)\{([^}]*)\} ([0-9.e+]+)$')


def metric_counts(stack: Stack) -> dict[str, float]:
    """Chat requests by status (http_requests_total) and successes by finish reason."""
    try:
        with urllib.request.urlopen(stack.base_url + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return {}
    counts: Counter = Counter()
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, labels, value = m.groups()
        if name == "http_requests_total" and 'handler="/v1/chat/completions"' in labels:
            status = re.search(r'status="([^"]+)"', labels)
            counts[f"http {status.group(1) if status else '?'}"] += float(value)
        elif name == "vllm:request_migrations_total":
            reason = re.search(r'reason="([^"]+)"', labels)
            counts[f"migrations {reason.group(1) if reason else '?'}"] += float(value)
        elif name == "vllm:request_migration_failures_total":
            reason = re.search(r'reason="([^"]+)"', labels)
            counts[f"migration failures {reason.group(1) if reason else '?'}"] += float(value)
        elif name == "vllm:request_success_total":
            reason = re.search(r'finished_reason="([^"]+)"', labels)
            counts[f"success {reason.group(1) if reason else '?'}"] += float(value)
    return dict(counts)


# -- the load -----------------------------------------------------------------------------------

@dataclass
class Tally:
    outcomes: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    sent: int = 0

    def problem(self, what: str) -> None:
        self.outcomes[what] += 1
        if len(self.problems) < 20:
            self.problems.append(what)


REAL_ENGINE = False  # --engine vllm: no scripted output; stop strings are checked on model text


def draw_request(rng: random.Random) -> tuple[str, dict]:
    if REAL_ENGINE:
        kind = rng.choices(["plain", "stop_any", "long"], weights=[5, 3, 1])[0]
    else:
        kind = rng.choices(["plain", "stop", "tool", "long"], weights=[5, 2, 2, 1])[0]
    body: dict = {"model": SERVED, "messages": [{"role": "user", "content": f"Tell me something #{rng.randrange(10**6)}"}],
                  "stream": rng.random() < 0.5}
    if kind == "plain":
        body["max_tokens"] = rng.randint(1, 96)
        body["temperature"] = rng.choice([0.0, 0.7, 1.0])
    elif kind == "stop":
        body["max_tokens"] = 64
        body["stop"] = ["STOPHERE"]
        body["vllm_xargs"] = {"sim_text": STOP_TEXT}
    elif kind == "stop_any":
        body["max_tokens"] = 64
        body["stop"] = REAL_STOPS
    elif kind == "tool":
        body["max_tokens"] = 128
        body["tools"] = TOOLS
        body["vllm_xargs"] = {"sim_text": TOOL_TEXT}
    else:
        body["max_tokens"] = rng.randint(200, 600)
    if body["stream"] and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    return kind, body


async def one_request(session: aiohttp.ClientSession, url: str, kind: str, body: dict, tally: Tally) -> str:
    """Send one request and classify its end; returns the outcome."""
    tally.sent += 1
    async with session.post(url, json=body) as resp:
        if resp.status != 200:
            text = await resp.text()
            try:
                code = json.loads(text)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                return f"http {resp.status} without an OpenAI error (lost)"
            return f"http {code}"
        if not body["stream"]:
            data = await resp.json()
            reason = data["choices"][0]["finish_reason"]
            content = data["choices"][0]["message"].get("content") or ""
            if kind == "stop" and (reason != "stop" or content != STOP_PREFIX):
                return f"wrong: stop cut at {content!r} ({reason})"
            if kind == "stop_any" and any(x in content for x in REAL_STOPS):
                return f"wrong: stop string in the output {content!r} ({reason})"
            if kind == "tool":
                calls = data["choices"][0]["message"].get("tool_calls") or []
                if reason != "tool_calls" or len(calls) != 1 or calls[0]["function"]["name"] != "get_weather" \
                        or json.loads(calls[0]["function"]["arguments"]) != TOOL_ARGS:
                    return f"wrong: tool call {calls!r} ({reason})"
            return f"ok {reason}"
        finishes, done, error, content = [], 0, None, []
        calls: dict[int, dict] = {}
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            if done:
                return "duplicated: data after [DONE]"
            payload = line[6:]
            if payload == "[DONE]":
                done += 1
                continue
            chunk = json.loads(payload)
            if "error" in chunk:
                error = chunk["error"]["code"]
                continue
            for choice in chunk.get("choices", []):
                content.append(choice["delta"].get("content") or "")
                for tc in choice["delta"].get("tool_calls") or []:
                    cur = calls.setdefault(tc["index"], {"name": None, "arguments": ""})
                    fn = tc.get("function") or {}
                    cur["name"] = fn.get("name") or cur["name"]
                    cur["arguments"] += fn.get("arguments") or ""
                if choice.get("finish_reason"):
                    finishes.append(choice["finish_reason"])
        if not done:
            return "lost: stream ended without [DONE]"
        if error is not None:
            return f"stream error {error}"
        if len(finishes) != 1:
            return f"{'duplicated' if finishes else 'lost'}: {len(finishes)} finish events"
        if kind == "stop" and (finishes[0] != "stop" or "".join(content) != STOP_PREFIX):
            return f"wrong: stop cut at {''.join(content)!r} ({finishes[0]})"
        if kind == "stop_any" and any(x in "".join(content) for x in REAL_STOPS):
            return f"wrong: stop string in the streamed output {''.join(content)!r} ({finishes[0]})"
        if kind == "tool":
            try:
                ok = (finishes[0] == "tool_calls" and len(calls) == 1 and calls[0]["name"] == "get_weather"
                      and json.loads(calls[0]["arguments"]) == TOOL_ARGS)
            except (ValueError, KeyError):
                ok = False
            if not ok:
                return f"wrong: streamed tool call {calls!r} ({finishes[0]})"
        return f"ok {finishes[0]}"


class RESTART:
    """The engine-restart window (--kill-engine-at): from the kill until 5 s after the new
    deployment serves."""

    killed_at: float | None = None
    serving_again_at: float | None = None

    @classmethod
    def in_window(cls) -> bool:
        now = time.monotonic()
        return cls.killed_at is not None and (cls.serving_again_at is None or now < cls.serving_again_at + 5)


async def client_loop(session, url: str, deadline: float, cancel_rate: float, rng: random.Random, tally: Tally):
    while time.monotonic() < deadline:
        kind, body = draw_request(rng)
        tally.kinds[f"{kind} {'stream' if body['stream'] else 'json'}"] += 1
        task = asyncio.ensure_future(one_request(session, url, kind, body, tally))
        cancel_after = rng.uniform(0.0, 1.0) if rng.random() < cancel_rate else None
        try:
            if cancel_after is None:
                outcome = await asyncio.wait_for(task, 120)
            else:
                done, _ = await asyncio.wait({task}, timeout=cancel_after)
                if done:
                    outcome = task.result()
                else:
                    task.cancel()  # closes the connection: the server must abort it
                    try:
                        await task
                    except asyncio.CancelledError:
                        pass
                    outcome = "cancelled by client"
        except asyncio.TimeoutError:
            outcome = "lost: no answer in 120 s"
        except (aiohttp.ClientError, ConnectionError) as e:
            outcome = f"lost: {type(e).__name__}: {e}"
            if RESTART.in_window() and isinstance(e, (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError,
                                                      aiohttp.ClientOSError)):
                # The deployment restarts (engine killed): workers stop and start again, so
                # connections are refused or closed under the client for a moment.
                outcome = f"refused during the engine restart: {type(e).__name__}"
                await asyncio.sleep(0.05)
        if outcome.startswith(("lost", "duplicated", "wrong")) or "(lost)" in outcome:
            tally.problem(outcome)
        else:
            tally.outcomes[outcome] += 1


async def run_load(base_url: str, duration: float, concurrency: int, cancel_rate: float, seed: int,
                   sampler) -> Tally:
    tally = Tally()
    deadline = time.monotonic() + duration
    # Idle pooled connections are dropped before the server's keep-alive timeout (5 s, vLLM's
    # --http-timeout-keep-alive default) closes them: a client that reuses a connection the server
    # is closing at that instant gets "Server disconnected" for a request nobody received (HTTP
    # clients such as the openai SDK retry those; this one counts every failure).
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False, keepalive_timeout=3)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        url = base_url + "/v1/chat/completions"
        clients = [client_loop(session, url, deadline, cancel_rate, random.Random(seed * 100_003 + i), tally)
                   for i in range(concurrency)]
        sampling = asyncio.ensure_future(sampler(deadline))
        await asyncio.gather(*clients)
        sampling.cancel()
    return tally


# -- main ---------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=120.0, help="seconds of load (default 120)")
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--step-time", type=float, default=0.01, help="simulated engine step (s)")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--cancel-rate", type=float, default=0.2, help="fraction cancelled by the client")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default=None, help="write the figures here")
    p.add_argument("--engine", choices=("sim", "vllm"), default="sim",
                   help="the simulated engine (default), or vLLM's own CPU EngineCore with the tests' tiny "
                        "random-weight model (plain, long and stop-string requests; no scripted text)")
    p.add_argument("--fault-rate", type=float, default=0.0,
                   help="per engine output, the chance that a fault is armed in a random pipeline layer of "
                        "the worker (bench/faults/sitecustomize.py); 5xx answers are then expected")
    p.add_argument("--kill-engine-at", type=float, default=None,
                   help="kill -9 the engine this many seconds into the load (the stack runs with "
                        "--on-engine-death restart)")
    p.add_argument("--kill-engine-every", type=float, default=None,
                   help="with --kill-engine-at: kill it again every this many seconds while the load runs")
    p.add_argument("--migration-limit", type=int, default=3,
                   help="the stack's --migration-limit: requests of the killed engine move to the restarted "
                        "one and continue (0: they fail with 503 and the workers restart with the engine)")
    args = p.parse_args(argv)
    killing = args.kill_engine_at is not None
    # With migration the requests of a killed engine continue: the server's counts still hold.
    faulty = args.fault_rate > 0 or (killing and args.migration_limit == 0)

    env = {}
    if args.fault_rate > 0:
        path = os.environ.get("PYTHONPATH")
        env = {"SOAK_FAULT_RATE": str(args.fault_rate),
               "PYTHONPATH": os.path.join(REPO, "bench", "faults") + (os.pathsep + path if path else "")}
    extra = ["--on-engine-death", "restart"] if killing else []
    extra += ["--migration-limit", str(args.migration_limit)]
    if args.engine == "vllm":
        global REAL_ENGINE
        REAL_ENGINE = True
        from tests.e2e.tiny_model import ENGINE_ARGS, build_tiny_model

        engine = [*ENGINE_ARGS, build_tiny_model()]
    else:
        engine = ["--engine", "sim", "--sim-step-time", str(args.step_time), "--max-num-seqs", str(args.max_num_seqs),
                  "--max-model-len", "4096", MODEL]
    stack = Stack(["--workers", str(args.workers), "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4",
                   *extra, "--served-model-name", SERVED, "--shutdown-timeout", "10", *engine],
                  ready_timeout=600, env=env)
    try:
        deadline = time.monotonic() + 60
        while not any("serving on http" in l for l in list(stack.log)) and time.monotonic() < deadline:
            time.sleep(0.2)
        # Warm up (first requests load lazily created pieces), then take the baseline.
        asyncio.run(run_load(stack.base_url, 5, 16, 0.0, args.seed + 1, lambda d: asyncio.sleep(0)))
        time.sleep(2)
        start = snapshot(stack)
        metrics0 = metric_counts(stack)
        peak: dict[str, float] = {k: v["rss_mib"] for k, v in start.items()}
        series: dict[str, list[float]] = {k: [v["rss_mib"]] for k, v in start.items()}

        killed: list[int] = []

        async def kill_engine(until: float) -> None:
            await asyncio.sleep(args.kill_engine_at)
            while True:
                await kill_engine_once()
                if args.kill_engine_every is None:
                    return
                await asyncio.sleep(max(0.0, args.kill_engine_every - (time.monotonic() - RESTART.killed_at)))
                if time.monotonic() > until - 5:
                    return

        def engine_back_lines() -> int:
            return sum("the engine is back: serving" in line for line in list(stack.log))

        async def kill_engine_once() -> None:
            engines = [v["pid"] for k, v in (await asyncio.to_thread(snapshot, stack)).items() if k == "engine"]
            back = engine_back_lines()
            RESTART.killed_at = time.monotonic()
            RESTART.serving_again_at = None
            for pid in engines:
                os.kill(pid, 9)
                killed.append(pid)
            print(f"soak: killed the engine (pid {engines}) at {RESTART.killed_at - t0:.0f}s", flush=True)
            if args.migration_limit > 0:
                # The workers serve on (the port stays open); the engine is back when the
                # supervisor says so.
                while engine_back_lines() == back:
                    await asyncio.sleep(0.05)
                RESTART.serving_again_at = time.monotonic()
                print(f"soak: the engine serves again {RESTART.serving_again_at - RESTART.killed_at:.1f}s "
                      f"after the kill", flush=True)
                return

            def health() -> int:
                try:
                    with urllib.request.urlopen(stack.base_url + "/health", timeout=2) as r:
                        return r.status
                except Exception:  # refused, reset, 503: not serving
                    return 0

            while await asyncio.to_thread(health) == 200:  # the old workers, until they stop
                await asyncio.sleep(0.05)
            while await asyncio.to_thread(health) != 200:  # the new deployment
                await asyncio.sleep(0.1)
            RESTART.serving_again_at = time.monotonic()
            print(f"soak: serving again {RESTART.serving_again_at - RESTART.killed_at:.1f}s after the kill",
                  flush=True)

        async def sampler(until: float) -> None:
            """Peak RSS, and a sample every 30 s (does growth level off?)."""
            if args.kill_engine_at is not None:
                killer = asyncio.ensure_future(kill_engine(until))
            n = 0
            while time.monotonic() < until:
                await asyncio.sleep(5)
                n += 1
                for name, v in (await asyncio.to_thread(snapshot, stack)).items():
                    peak[name] = max(peak.get(name, 0.0), v["rss_mib"])
                    if n % 6 == 0:
                        series.setdefault(name, []).append(v["rss_mib"])
            if args.kill_engine_at is not None:
                await killer

        print(f"soak: {args.duration:.0f}s, {args.concurrency} clients, cancel rate {args.cancel_rate}", flush=True)
        t0 = time.monotonic()  # (the killer's clock too)
        tally = asyncio.run(run_load(stack.base_url, args.duration, args.concurrency, args.cancel_rate,
                                     args.seed, sampler))
        elapsed = time.monotonic() - t0

        # Everything settles: no request in the engine, none in flight in any worker.
        settle_deadline = time.monotonic() + 30
        idle = engine_idle(stack)
        load = in_flight(stack)
        while (idle != (0, 0) or load != 0) and time.monotonic() < settle_deadline:
            time.sleep(1)
            idle, load = engine_idle(stack), in_flight(stack)
        time.sleep(2)
        end = snapshot(stack)
        metrics1 = metric_counts(stack)
        restarts = sum("restarting worker" in l for l in list(stack.log))
    finally:
        code = stack.terminate(timeout=60)

    metrics = {k: metrics1.get(k, 0) - metrics0.get(k, 0) for k in sorted(set(metrics0) | set(metrics1))}
    lost = sum(v for k, v in tally.outcomes.items() if k.startswith("lost") or "(lost)" in k)
    duplicated = sum(v for k, v in tally.outcomes.items() if k.startswith("duplicated"))
    wrong = sum(v for k, v in tally.outcomes.items() if k.startswith("wrong"))
    server_errors = sum(v for k, v in tally.outcomes.items()
                        if re.match(r"(http|stream error) 5", k))
    cancelled = tally.outcomes["cancelled by client"]
    completed = sum(v for k, v in tally.outcomes.items() if k.startswith("ok"))
    http_total = sum(v for k, v in metrics.items() if k.startswith("http "))
    success_total = sum(v for k, v in metrics.items() if k.startswith("success "))
    http_2xx = metrics.get("http 2xx", 0) + metrics.get("http 200", 0)
    success_abort = metrics.get("success abort", 0)
    processes = {
        name: {"rss_start_mib": start[name]["rss_mib"], "rss_end_mib": end.get(name, {}).get("rss_mib"),
               "rss_peak_mib": peak.get(name), "rss_every_30s_mib": series.get(name),
               "fds_start": start[name]["fds"], "fds_end": end.get(name, {}).get("fds")}
        for name in start
    }
    refused = sum(v for k, v in tally.outcomes.items() if k.startswith("refused"))
    hung = sum(v for k, v in tally.outcomes.items() if "no answer in" in k)
    past_limit = metrics.get("migration failures limit", 0)
    moved = sum(v for k, v in metrics.items() if k.startswith("migrations "))
    checks = {
        "lost == 0": lost == 0,
        "duplicated == 0": duplicated == 0,
        "wrong stop cuts == 0": wrong == 0,
        "no 5xx": faulty or killing or server_errors == 0,
        # Engine kills with migration: a request fails only past the migration limit, and the
        # port never closes.
        "5xx only past the migration limit": not killing or args.migration_limit == 0
            or args.fault_rate > 0 or server_errors <= past_limit,
        "no connection refused during an engine restart": not killing or args.migration_limit == 0 or refused == 0,
        "engine idle at the end (0 running, 0 waiting)": idle == (0, 0),
        "no request in flight in any worker": load == 0,
        "no worker restarted": (killing and args.migration_limit == 0) or restarts == 0,
        # Both sides count: a request the client cancelled may never have reached the server,
        # or have finished there just before the cancel; nothing else may differ.
        "server saw every request (http_requests_total vs sent, within cancellations)":
            faulty or metrics == {} or 0 <= tally.sent - http_total <= cancelled,
        "server 2xx == client completions (within cancellations)":
            faulty or metrics == {} or 0 <= http_2xx - completed <= cancelled,
        # vllm:request_success counts every finish, aborts included (as vLLM's does).
        "server finishes: non-abort == client completions, all == requests (within cancellations)":
            faulty or success_total == 0 or (0 <= success_total - success_abort - completed <= cancelled
                                   and 0 <= tally.sent - success_total <= cancelled),
        "fds flat (end <= start + 4, each process)": all(
            v["fds_end"] is not None and v["fds_end"] <= v["fds_start"] + 4 for v in processes.values()),
        "RSS flat (end <= start + 10% + 20 MiB, each process)": all(
            v["rss_end_mib"] is not None and v["rss_end_mib"] <= v["rss_start_mib"] * 1.1 + 20
            for v in processes.values()),
        "supervisor exit 0 on SIGTERM": code == 0,
    }
    report = {
        "duration_s": round(elapsed, 1), "engine": args.engine, "concurrency": args.concurrency, "workers": args.workers,
        "step_time_s": args.step_time, "cancel_rate": args.cancel_rate,
        "requests": tally.sent, "completed": completed, "cancelled_by_client": cancelled,
        "fault_rate": args.fault_rate, "engine_killed_at_s": args.kill_engine_at,
        "engine_restarted": bool(args.kill_engine_at is not None and killed),
        "refused_not_accepted": refused, "engine_kills": len(killed), "migration_limit": args.migration_limit,
        "moved": moved, "failed_past_migration_limit": past_limit,
        "lost": lost, "hung": hung, "duplicated": duplicated, "wrong": wrong, "server_errors": server_errors,
        "requests_per_s": round(tally.sent / elapsed, 1),
        "outcomes": dict(tally.outcomes.most_common()), "kinds": dict(tally.kinds.most_common()),
        "server_metrics": metrics, "engine_end": {"running": idle[0], "waiting": idle[1]},
        "in_flight_end": load, "processes": processes, "checks": checks, "problems": tally.problems,
    }
    print(json.dumps(report, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    failed = [k for k, ok in checks.items() if not ok]
    print("FAILED: " + "; ".join(failed) if failed else "all checks held", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
