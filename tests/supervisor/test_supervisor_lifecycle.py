"""Supervisor lifecycle with fake engine and worker processes (fast, no real engine).

The supervisor runs as a real subprocess (real signals, real process groups) with the real
HandshakeServer; the engine is a tiny script that performs vLLM's handshake over zmq, and the
workers are tiny scripts that report ready on their status pipe. Every fake appends what
happens to it to one events file, so the tests can check ordering across processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import deque

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAKE_ENGINE = textwrap.dedent(
    """
    import os, signal, sys, time
    import ormsgpack, zmq

    events = os.environ["FAKE_EVENTS"]
    def note(line):
        with open(events, "a") as f:
            f.write(line + "\\n")

    note(f"engine-pid {os.getpid()}")
    mode = os.environ.get("FAKE_ENGINE_MODE")
    first = not os.path.exists(events + ".engine-started")
    open(events + ".engine-started", "a").close()
    if mode == "die-before-handshake" or (mode == "die-first-before-handshake" and first):
        time.sleep(0.2)
        sys.exit(7)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, (0).to_bytes(2, "little"))
    sock.connect(sys.argv[1])
    sock.send(ormsgpack.packb({"status": "HELLO", "local": False, "headless": True}))
    init = ormsgpack.unpackb(sock.recv())
    note("engine-init " + " ".join(init["addresses"]["inputs"]))
    sock.send(ormsgpack.packb({"status": "READY", "local": False, "headless": True}))
    print("fake engine ready", flush=True)

    def on_term(*_):
        note("engine-stopped")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    while True:
        time.sleep(1)
    """
)

FAKE_WORKER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    sys.path.insert(0, os.environ["REPO"])
    from vllm_pyfrontend.config import WorkerConfig

    config = WorkerConfig.from_json(sys.argv[sys.argv.index("--config-json") + 1])
    i = config.worker_index
    events = os.environ["FAKE_EVENTS"]
    def note(line):
        with open(events, "a") as f:
            f.write(line + "\\n")

    mode = os.environ.get("FAKE_WORKER_MODE", "")
    note(f"start {i} {os.getpid()} {config.runtime_dir} {json.dumps(config.engine_infos)}")
    if mode == "crash":
        sys.exit(3)
    if os.environ.get("FAKE_CRASH_SLOT") == str(i):  # serves once, then crashes at every start
        marker = events + f".slot-{i}-started"
        if os.path.exists(marker):
            sys.exit(3)
        open(marker, "a").close()
    with open(os.path.join(config.runtime_dir, "engine-info.json"), "w") as f:
        json.dump([{"engine_index": 0, "max_model_len": 1234, "vllm_version": "fake"}], f)

    # Handlers only queue; the main loop acts, in arrival order (as the real worker's
    # asyncio signal handlers do), so one handler never interrupts another half-way.
    pending = []
    signal.signal(signal.SIGTERM, lambda *_: pending.append("term"))
    signal.signal(signal.SIGUSR1, lambda *_: pending.append("usr1"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print(f"fake worker {i} serving", flush=True)
    os.write(config.status_fd, b"ready\\n")
    # Like the real worker, a SIGUSR1 that arrives while it drains is still handled: the kernel
    # may run the handlers of two signals sent back to back in either order (it stacks one
    # handler frame per pending signal, so the later-numbered SIGTERM can run first).
    draining = False
    while True:
        while pending:
            what = pending.pop(0)
            if what == "usr1":
                note(f"usr1 {i}")
            elif not draining:
                note(f"drain {i}")
                draining = mode != "stubborn"
                drain_started = time.monotonic()
        if draining and time.monotonic() - drain_started >= 0.3:
            note(f"exit {i}")
            sys.exit(0)
        time.sleep(0.02)
    """
)

DRIVER = textwrap.dedent(
    """
    import asyncio, os, sys
    sys.path.insert(0, sys.argv[1])
    import vllm_pyfrontend.supervisor.deployment as sm
    import vllm_pyfrontend.supervisor.workers as wk
    from vllm_pyfrontend.supervisor.engine_launch import EngineLaunch
    from vllm_pyfrontend.supervisor.options import SupervisorOptions

    engine, worker, workers = sys.argv[2], sys.argv[3], int(sys.argv[4])
    wk.BACKOFF_BASE_S = 0.05          # keep restarts and give-ups fast
    wk.QUARANTINE_S = 0.3
    sm.WORKER_KILL_GRACE_S = 0.5
    sm.configure_logging("info")
    options = SupervisorOptions(model="/nonexistent-model", workers=workers, host="127.0.0.1",
                                port=0, shutdown_timeout=float(os.environ.get("FAKE_SHUTDOWN_TIMEOUT", "20")), engine_ready_timeout=20,
                                worker_ready_timeout=20,
                                on_engine_death=os.environ.get("FAKE_ON_ENGINE_DEATH", "exit"))
    if os.environ.get("FAKE_EXTERNAL_PORT"):  # no local engine: one joins over TCP
        options.data_parallel_size_local = 0
        options.data_parallel_address = "127.0.0.1"
        options.data_parallel_rpc_port = int(os.environ["FAKE_EXTERNAL_PORT"])
    sup = sm.Supervisor(
        options,
        launcher=lambda host, port: [EngineLaunch("engine", [sys.executable, engine, f"tcp://{host}:{port}"])
                                     for _ in options.local_engine_ranks],
        worker_command=lambda cfg: [sys.executable, worker, "--config-json", cfg.to_json()],
    )
    sys.exit(asyncio.run(sup.run()))
    """
)


class Run:
    """The supervisor driver as a subprocess, its log lines and the fakes' events."""

    def __init__(self, tmp_path, workers: int = 2, **env: str):
        for name, text in (("engine.py", FAKE_ENGINE), ("worker.py", FAKE_WORKER), ("driver.py", DRIVER)):
            (tmp_path / name).write_text(text)
        self.events_path = tmp_path / "events.txt"
        self.events_path.write_text("")
        self.lines: deque[str] = deque(maxlen=2000)
        self.proc = subprocess.Popen(
            [sys.executable, str(tmp_path / "driver.py"), REPO, str(tmp_path / "engine.py"),
             str(tmp_path / "worker.py"), str(workers)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
            env={**os.environ, "FAKE_EVENTS": str(self.events_path), "REPO": REPO, **env},
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def log(self) -> str:
        return "\n".join(self.lines)

    def events(self) -> list[str]:
        return self.events_path.read_text().splitlines()

    def wait_for(self, predicate, timeout: float = 30.0, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = predicate()
            if result:
                return result
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}\nlog:\n{self.log()}\nevents:\n{self.events()}")

    def wait_log(self, text: str, timeout: float = 30.0) -> None:
        self.wait_for(lambda: any(text in l for l in list(self.lines)), timeout, repr(text))

    def wait_exit(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"supervisor did not exit\nlog:\n{self.log()}") from None

    def starts(self, index: int) -> list[list[str]]:
        return [e.split(" ", 4) for e in self.events() if e.startswith(f"start {index} ")]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        # The fakes die with their parent (PR_SET_PDEATHSIG); sweep any left anyway.
        for e in self.events():
            parts = e.split()
            pid = int(parts[2]) if parts[0] == "start" else int(parts[1]) if parts[0] == "engine-pid" else None
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def run(tmp_path):
    runs: list[Run] = []

    def start(**kw) -> Run:
        r = Run(tmp_path, **kw)
        runs.append(r)
        return r

    yield start
    for r in runs:
        r.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_serve_restart_and_drain(run, stop_signal):
    r = run(workers=2)
    r.wait_log("serving on http://127.0.0.1:")
    assert "(2 workers)" in r.log()
    # Engine saw one input address per worker, in the private runtime dir.
    init = r.wait_for(lambda: [e for e in r.events() if e.startswith("engine-init")], what="init")
    inputs = init[0].split()[1:]
    runtime_dir = r.starts(0)[0][3]
    assert inputs == [f"ipc://{runtime_dir}/w0-in.sock", f"ipc://{runtime_dir}/w1-in.sock"]
    assert r.starts(0)[0][4] == "null"  # first start: engines send their ready responses
    # Children's output is prefixed (it travels on another pipe than the status: wait for it).
    r.wait_for(lambda: any(l.startswith("[worker 0] fake worker 0 serving") for l in list(r.lines)),
               what="worker output")
    r.wait_for(lambda: any(l.startswith("[engine] fake engine ready") for l in list(r.lines)),
               what="engine output")

    # A worker that dies is restarted, with the recorded engine info.
    pid0 = int(r.starts(0)[0][2])
    os.kill(pid0, signal.SIGKILL)
    r.wait_for(lambda: len(r.starts(0)) == 2, what="worker 0 restart")
    assert json.loads(r.starts(0)[1][4])[0]["max_model_len"] == 1234
    r.wait_log("worker 0 ready again")
    assert len(r.starts(1)) == 1

    # SIGTERM/SIGINT: workers drain first, then the engine stops; exit 0, runtime dir removed.
    r.proc.send_signal(stop_signal)
    assert r.wait_exit() == 0, r.log()
    ev = r.events()
    assert {"drain 0", "drain 1", "exit 0", "exit 1", "engine-stopped"} <= set(ev), ev
    assert ev.index("engine-stopped") > max(ev.index("exit 0"), ev.index("exit 1"))
    assert not any(e.startswith("usr1") for e in ev)
    assert not os.path.exists(runtime_dir)
    assert "[supervisor]" in r.log().splitlines()[-1]


def test_engine_death_exits_1(run):
    r = run(workers=2)
    r.wait_log("serving on")
    engine_pid = int(next(e for e in r.events() if e.startswith("engine-pid")).split()[1])
    os.kill(engine_pid, signal.SIGKILL)
    assert r.wait_exit() == 1, r.log()
    ev = r.events()
    # Workers are told (SIGUSR1: fail in-flight requests) and stopped (SIGTERM); the supervisor
    # sends SIGUSR1 first, but the two may reach a worker's handlers in either order, and the
    # worker handles both before it exits.
    for i in (0, 1):
        assert f"usr1 {i}" in ev and f"exit {i}" in ev, (ev, r.log())
        assert max(ev.index(f"usr1 {i}"), ev.index(f"drain {i}")) < ev.index(f"exit {i}"), ev
    assert "engine exited (killed by SIGKILL)" in r.log()
    assert len(r.starts(0)) == 1  # no restarts while stopping


def test_engine_dying_during_handshake_exits_1(run):
    r = run(workers=1, FAKE_ENGINE_MODE="die-before-handshake")
    assert r.wait_exit() == 1, r.log()
    assert "engine exited (exit code 7)" in r.log()
    assert "serving on" not in r.log()
    for start in r.starts(0):
        assert not _alive(int(start[2]))


def test_restart_after_the_engine_dies_during_start_up(run):
    """--on-engine-death restart: an engine that dies before its handshake is started again
    (the first deployment's handshake failure must not end the second one)."""
    r = run(workers=1, FAKE_ENGINE_MODE="die-first-before-handshake", FAKE_ON_ENGINE_DEATH="restart")
    r.wait_log("serving on", timeout=60)
    assert "engine exited (exit code 7)" in r.log()
    assert len([e for e in r.events() if e.startswith("engine-pid")]) == 2
    r.proc.send_signal(signal.SIGTERM)
    assert r.wait_exit() == 0, r.log()


def test_worker_crash_loop_gives_up(run):
    r = run(workers=1, FAKE_WORKER_MODE="crash")
    assert r.wait_exit() == 1, r.log()
    assert "crashed 6 times in a row; giving up" in r.log()
    assert len(r.starts(0)) == 6
    assert "engine-stopped" in r.events()


def test_one_crash_looping_worker_never_stops_the_deployment(run):
    """Worker 1 serves, is killed, and then crashes at every start: past the fast-crash limit
    it is retried slowly and logged as an error, while worker 0 and the engine keep running.
    Only when no worker serves (worker 0 crashing too) does the supervisor give up."""
    r = run(workers=2, FAKE_CRASH_SLOT="1")
    r.wait_log("serving on")
    pid0 = int(r.starts(0)[0][2])
    os.kill(int(r.starts(1)[0][2]), signal.SIGKILL)
    r.wait_log("worker 1 crashed 6 times in a row right after its start")
    r.wait_for(lambda: len(r.starts(1)) >= 9, what="worker 1 retried after the limit")
    assert r.proc.poll() is None and _alive(pid0), r.log()
    assert "engine-stopped" not in r.events() and "giving up" not in r.log()
    assert len(r.starts(0)) == 1
    r.proc.send_signal(signal.SIGTERM)
    assert r.wait_exit() == 0, r.log()


def test_crash_loops_give_up_when_no_worker_serves(run):
    """The only worker serves once, then crashes at every start: with no worker serving, Fatal."""
    r = run(workers=1, FAKE_CRASH_SLOT="0")
    r.wait_log("serving on")
    os.kill(int(r.starts(0)[0][2]), signal.SIGKILL)
    assert r.wait_exit() == 1, r.log()
    assert "crashed 6 times in a row; giving up (no worker serves)" in r.log()
    assert "engine-stopped" in r.events()


def test_stubborn_worker_is_killed_after_the_drain_window(run):
    r = run(workers=1, FAKE_WORKER_MODE="stubborn", FAKE_SHUTDOWN_TIMEOUT="1")
    r.wait_log("serving on")
    pid = int(r.starts(0)[0][2])
    t0 = time.monotonic()
    r.proc.send_signal(signal.SIGTERM)
    assert r.wait_exit() == 0, r.log()
    # shutdown_timeout 1.0 + grace 0.5, then SIGKILL; then the engine.
    assert time.monotonic() - t0 >= 1.4
    assert "worker 0 did not exit: SIGKILL" in r.log()
    assert not _alive(pid)
    assert r.events()[-1] == "engine-stopped"


def test_repeated_sigterm_does_not_cut_the_drain(run):
    """`timeout` and group-wide kills deliver SIGTERM twice: still an orderly drain."""
    r = run(workers=1, FAKE_WORKER_MODE="stubborn", FAKE_SHUTDOWN_TIMEOUT="1")
    r.wait_log("serving on")
    t0 = time.monotonic()
    r.proc.send_signal(signal.SIGTERM)
    r.wait_log("SIGTERM: shutting down")
    r.proc.send_signal(signal.SIGTERM)
    assert r.wait_exit() == 0, r.log()
    assert time.monotonic() - t0 >= 1.4  # waited the drain window
    assert "already shutting down" in r.log()


def test_second_sigint_kills_now(run):
    r = run(workers=1, FAKE_WORKER_MODE="stubborn", FAKE_SHUTDOWN_TIMEOUT="60")
    r.wait_log("serving on")
    r.proc.send_signal(signal.SIGINT)
    r.wait_for(lambda: "drain 0" in r.events(), what="drain")
    t0 = time.monotonic()
    r.proc.send_signal(signal.SIGINT)
    assert r.wait_exit() == 0, r.log()
    assert time.monotonic() - t0 < 10
    assert "SIGINT again: killing everything now" in r.log()
    assert "exception was never retrieved" not in r.log()


def test_external_engine_joins_over_tcp(run, tmp_path):
    """--data-parallel-size-local 0: no engine launched; a headless engine dials tcp://A:P."""
    from tests.stack import free_port

    port = free_port()
    r = run(workers=2, FAKE_EXTERNAL_PORT=str(port))
    r.wait_log(f"waiting for 1 headless engine(s) to join at tcp://127.0.0.1:{port}")
    engine = subprocess.Popen([sys.executable, str(tmp_path / "engine.py"), f"tcp://127.0.0.1:{port}"],
                              env={**os.environ, "FAKE_EVENTS": str(r.events_path)})
    try:
        r.wait_log("serving on")
        init = next(e for e in r.events() if e.startswith("engine-init"))
        # Client slots are TCP on the DP address, reachable from another host.
        inputs = init.split()[1:]
        assert len(inputs) == 2 and all(a.startswith("tcp://127.0.0.1:") for a in inputs)
        r.proc.send_signal(signal.SIGTERM)
        assert r.wait_exit() == 0, r.log()
        assert engine.poll() is None  # not ours to stop
    finally:
        engine.kill()
        engine.wait(10)


def test_port_in_use_fails_fast(tmp_path):
    import socket

    from vllm_pyfrontend.supervisor.deployment import Supervisor
    from vllm_pyfrontend.supervisor.options import SupervisorOptions

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        opts = SupervisorOptions(model="/m", workers=1, host="127.0.0.1", port=s.getsockname()[1])
        launched = []
        sup = Supervisor(opts, launcher=lambda h, p: launched.append(1) or [])
        import asyncio

        assert asyncio.run(sup.run()) == 1
        assert launched == []  # failed before starting any engine
