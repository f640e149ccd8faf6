"""CPU time and memory of a process tree, read from /proc.

The benchmark charges a frontend for everything its process tree does (supervisor, workers,
API servers, helper threads) and for nothing else: the simulated engine and the load generator
run outside the tree. CPU is utime+stime summed over the tree's live processes; RSS is the sum of
the processes' resident sets, sampled periodically so its peak over a run can be reported.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _children_map() -> dict[int, list[int]]:
    """ppid -> [pid] for every process on the machine (one pass over /proc)."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # comm may contain spaces or ')': fields after the last ')' are fixed.
        fields = stat[stat.rfind(b")") + 2 :].split()
        kids.setdefault(int(fields[1]), []).append(int(name))
    return kids


def tree_pids(root: int) -> list[int]:
    """`root` and all its descendants that are alive now."""
    kids = _children_map()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of one process, its threads included."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0.0, 0.0
    fields = stat[stat.rfind(b")") + 2 :].split()
    # fields[0] is field 3 (state); utime is field 14, stime field 15.
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


@dataclass
class CpuSample:
    """Tree CPU seconds at one instant, per process (so a process that exits between two
    samples is visible as missing rather than silently lowering the total)."""

    per_pid: dict[int, float]
    sys_per_pid: dict[int, float] | None = None  # the kernel's part of per_pid (stime)

    @property
    def total(self) -> float:
        return sum(self.per_pid.values())


def sample_cpu(root: int) -> CpuSample:
    split = {pid: _cpu_seconds(pid) for pid in tree_pids(root)}
    return CpuSample({pid: u + s for pid, (u, s) in split.items()}, {pid: s for pid, (u, s) in split.items()})


def cpu_delta(before: CpuSample, after: CpuSample) -> float:
    """CPU seconds the tree spent between two samples. A process born in between counts from
    zero; one that died in between contributes nothing after `before` (its last ticks are lost,
    which is why the harness checks that the tree's membership did not change)."""
    return sum(t - before.per_pid.get(pid, 0.0) for pid, t in after.per_pid.items())


def sys_delta(before: CpuSample, after: CpuSample) -> float:
    """The kernel's part of `cpu_delta` (system calls: socket reads and writes, mostly)."""
    b, a = before.sys_per_pid or {}, after.sys_per_pid or {}
    return sum(t - b.get(pid, 0.0) for pid, t in a.items())


def _io_calls(pid: int) -> tuple[int, int]:
    """(read, write) system calls of one process so far, its threads included (/proc/PID/io's
    syscr/syscw: read/write/readv/writev and the like; socket sendto/recvfrom are not counted)."""
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            fields = dict(line.split(b":", 1) for line in f.read().splitlines())
        return int(fields[b"syscr"]), int(fields[b"syscw"])
    except (OSError, KeyError, ValueError):
        return 0, 0


def tree_io_calls(root: int) -> dict[int, tuple[int, int]]:
    """`_io_calls` of each process of the tree."""
    return {pid: _io_calls(pid) for pid in tree_pids(root)}


def io_calls_delta(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """(read, write) system calls the tree made between two samples."""
    r = sum(a[0] - before.get(pid, (0, 0))[0] for pid, a in after.items())
    w = sum(a[1] - before.get(pid, (0, 0))[1] for pid, a in after.items())
    return r, w


def tree_rss(root: int) -> int:
    return sum(_rss_bytes(pid) for pid in tree_pids(root))


def _pss_bytes(pid: int) -> int:
    """Proportional set size: each resident page divided by the number of processes mapping it,
    so pages that forked workers share with their parent are counted once over the tree (RSS
    counts them once per process)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_pss(root: int) -> int:
    return sum(_pss_bytes(pid) for pid in tree_pids(root))


def tree_pss_by_pid(root: int) -> dict[int, int]:
    return {pid: _pss_bytes(pid) for pid in tree_pids(root)}


class RssPeak:
    """Samples the tree's summed RSS every `interval` seconds in a thread; `.peak` is the max.
    With `pss=True` also the tree's summed PSS (`.peak_pss`), from smaps_rollup."""

    def __init__(self, root: int, interval: float = 0.5, pss: bool = False) -> None:
        self.root = root
        self.interval = interval
        self.pss = pss
        self.peak = 0
        self.peak_pss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def _sample(self) -> None:
        self.peak = max(self.peak, tree_rss(self.root))
        if self.pss:
            self.peak_pss = max(self.peak_pss, tree_pss(self.root))

    def __enter__(self) -> "RssPeak":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sample()


def machine_busy() -> tuple[float, float]:
    """(busy seconds summed over all CPUs, wall seconds) from /proc/stat, for the share of the
    machine in use by anything during a run (the machine is shared; this says how much)."""
    import time

    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    return (sum(vals[:8]) - idle) / _TICK, time.monotonic()


def busy_cores(before: tuple[float, float], after: tuple[float, float]) -> float:
    """Average number of CPUs busy between two `machine_busy()` samples."""
    return (after[0] - before[0]) / max(after[1] - before[1], 1e-9)


def listen_overflows() -> int:
    """Machine-wide TcpExtListenOverflows: SYNs dropped because a listen queue was full. A
    frontend whose accept backlog is smaller than the burst of new connections shows up here
    (and as TTFT in whole seconds: the client's SYN retransmits after 1 s, 3 s, 7 s...)."""
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for head, vals in zip(lines[::2], lines[1::2]):
        if head.startswith("TcpExt:"):
            table = dict(zip(head.split()[1:], vals.split()[1:]))
            return int(table.get("ListenOverflows", 0))
    return 0
