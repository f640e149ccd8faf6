"""Start the whole stack (`frontend-supervisor`) as a subprocess for integration tests."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque

from vllm_pyfrontend.supervisor.runtime import free_tcp_port

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stop_process_group(proc: subprocess.Popen, timeout: float) -> int | None:
    """SIGTERM the process group (started with start_new_session), SIGKILL whatever is left
    after `timeout` (stragglers in the group included); the leader's exit code, or None."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(10)
    except subprocess.TimeoutExpired:
        return None


def newer_stats(stats: dict, than: dict | None) -> bool:
    """Whether one engine's /load sample `stats` is newer than `than` (from another worker, say).

    By the engine's clock on the step that sent them (`engine_timestamp`), then by receipt time:
    a worker may read an older step's batch a few milliseconds after another worker read a newer
    one, and once the engine is idle nothing replaces that stale sample."""
    if than is None:
        return True
    return (stats.get("engine_timestamp", 0.0), stats["timestamp"]) > (than.get("engine_timestamp", 0.0), than["timestamp"])


def proc_children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def proc_descendants(pid: int) -> list[int]:
    """Every descendant of `pid`, deepest first (children in their own process groups too)."""
    out: list[int] = []
    for child in proc_children(pid):
        out += proc_descendants(child)
        out.append(child)
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every descendant at once, deepest first, as when the host dies (a
    SIGKILLed supervisor alone lets its children see it go and stop on their own)."""
    for p in proc_descendants(pid) + [pid]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def proc_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def proc_alive(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


WORKER_TEMPLATE_MODULE = "vllm_pyfrontend.server.preload"


def worker_template_pids(supervisor_pid: int) -> list[int]:
    """The supervisor's worker template (supervisor/forkserver.py), if one runs."""
    return [p for p in proc_children(supervisor_pid) if WORKER_TEMPLATE_MODULE in proc_cmdline(p)]


def worker_pids(supervisor_pid: int) -> list[int]:
    """The supervisor's HTTP workers: spawned ones are its children, forked ones the children of
    its worker template."""
    pids = [p for p in proc_children(supervisor_pid) if "vllm_pyfrontend.server.worker" in proc_cmdline(p)]
    for template in worker_template_pids(supervisor_pid):
        pids += proc_children(template)
    return pids


def worker_index(pid: int) -> int:
    """Worker i's index: from its `--config-json` (spawned) or its process title (forked:
    `... -m vllm_pyfrontend.server.worker --worker-index I (forked)`)."""
    argv = proc_cmdline(pid).split()
    if "--config-json" in argv:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read().split(b"\0")
        return json.loads(raw[raw.index(b"--config-json") + 1])["worker_index"]
    return int(argv[argv.index("--worker-index") + 1])


def _port_range() -> range:
    """Ports for the servers tests start: below the kernel's ephemeral range, so that no port the
    system hands out by itself (an engine's ZMQ sockets, vLLM's own server's ports, clients)
    can take one between its pick and its bind; one share of it per pytest-xdist worker."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    base, top = 10000, max(ephemeral, 12000)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
    index = int(worker) if worker.isdigit() else 0
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1), index + 1)
    share = (top - base) // count
    return range(base + index * share, base + (index + 1) * share)


_picker = random.Random()  # (its own: tests seed the module's)
_handed_out: set[int] = set()


def free_port() -> int:
    """A port nothing listens on now, not handed out before by this process."""
    ports = _port_range()
    for _ in range(500):
        port = _picker.randrange(ports.start, ports.stop)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    return free_tcp_port("127.0.0.1")


class Stack:
    """A running `frontend-supervisor`; logs are kept (last lines) for failure messages."""

    def __init__(self, args: list[str], *, port: int | None = None, ready_timeout: float = 120.0, env=None,
                 command: list[str] | None = None, cwd: str | None = None):
        """`command`: the supervisor to run (default: this interpreter's, from the source tree);
        `cwd`: where it runs (default: the repository root)."""
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        if command is None:
            command = [sys.executable, "-c",
                       "import sys; from vllm_pyfrontend.supervisor.cli import main; sys.exit(main())"]
        cmd = [*command, "--host", "127.0.0.1", "--port", str(self.port), *args]
        self.log: deque[str] = deque(maxlen=400)
        self.proc = subprocess.Popen(
            cmd, cwd=cwd or REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True, env={**os.environ, **(env or {})},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.wait_healthy(ready_timeout)
        except BaseException:
            self.stop()
            raise

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line.rstrip("\n"))
            if os.environ.get("STACK_ECHO"):
                print(line, end="", file=sys.stderr)

    def logs(self) -> str:
        return "\n".join(self.log)

    def wait_for(self, pred, timeout: float, what: str):
        """Poll `pred` until it returns something true (returned); on time-out fail with the log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = pred()
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")

    def health(self) -> int | None:
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"supervisor exited with {self.proc.returncode}:\n{self.logs()}")
            if self.health() == 200:
                return
            time.sleep(0.25)
        raise TimeoutError(f"stack not healthy after {timeout}s:\n{self.logs()}")

    def freshest_engine_stats(self, polls: int = 24) -> dict | None:
        """The engine's most recent scheduler stats as any worker saw them (`/load`).

        The engine sends stats to one worker per step, and SO_REUSEPORT spreads the polls
        over the workers, so the freshest sample wins (see `newer_stats`)."""
        best = None
        for _ in range(polls):
            with urllib.request.urlopen(self.base_url + "/load", timeout=5) as r:
                load = json.load(r)
            for stats in load.get("engines", {}).values():
                if newer_stats(stats, best):
                    best = stats
        return best

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM the supervisor (graceful drain) and return its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        return self.stop()

    def stop(self) -> int:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> "Stack":
        return self

    def __exit__(self, *exc) -> None:
        self.terminate()
