"""Child processes of the supervisor: spawn, prefix their output, signal, wait.

Every child runs in its own process group, so a Ctrl-C on the terminal reaches only the
supervisor, which then stops the children in the right order (workers drain first, the engine
goes last). Each child also asks the kernel for SIGTERM when the supervisor dies
(PR_SET_PDEATHSIG), so a SIGKILLed supervisor does not leave an engine holding the GPU.
Output is read from a pipe and re-emitted line by line with a `[name]` prefix, so every line of
the combined log says which process wrote it.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence

from vllm_pyfrontend.server.log_lines import LogLineFormatter, escape_line

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True) if sys.platform == "linux" else None


def _die_with_parent(parent_pid: int) -> None:
    """preexec_fn: SIGTERM this child when the supervisor exits (Linux only)."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)


def write_line(prefix: bytes, line: bytes) -> None:
    """One log line on stderr, prefixed with the speaker's name."""
    out = getattr(sys.stderr, "buffer", None)
    if out is not None:
        out.write(prefix + line + b"\n")
    else:  # stderr replaced by a text stream (e.g. under a test runner)
        sys.stderr.write((prefix + line).decode("utf-8", "replace") + "\n")
    sys.stderr.flush()


def log_as(name: str, level: str) -> None:
    """This process's own log lines say `[name]`, like its children's (see `Child`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogLineFormatter(f"[{name}] %(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


_pumps: set[asyncio.Future] = set()


def keep_pump(pump: asyncio.Future) -> None:
    """The loop holds tasks weakly; a dead child's last lines must still be pumped."""
    _pumps.add(pump)
    pump.add_done_callback(_pumps.discard)


async def pump_lines(reader: asyncio.StreamReader, prefix: bytes) -> None:
    """Re-emit what a child writes, line by line, with `prefix`: control characters in a line
    escaped (a carriage return or a terminal escape could otherwise hide the prefix)."""
    pending = b""
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            write_line(prefix, escape_line(line.rstrip(b"\r")))
    if pending:
        write_line(prefix, escape_line(pending))


class GroupedProcess:
    """What a supervised process in its own process group offers besides its own exit: signal
    or wait for its whole group, and let its last output lines through. Needs `pid` (the group's
    id) and `_pump` (the task copying its output into our log)."""

    pid: int
    _pump: asyncio.Future

    def kill_group(self, sig: int = signal.SIGKILL) -> None:
        """Signal the child's whole process group (its own subprocesses too)."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def group_alive(self) -> bool:
        """Whether any process of the child's group still exists (zombies included)."""
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    async def wait_group(self, timeout: float) -> bool:
        """Wait (polling) until the child's whole process group is gone; True if it is."""
        deadline = time.monotonic() + timeout
        while self.group_alive():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.1)
        return True

    async def flush_output(self, timeout: float = 1.0) -> None:
        """Let the last lines reach the log (a grandchild may hold the pipe: bounded)."""
        try:
            await asyncio.wait_for(asyncio.shield(self._pump), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass


class Child(GroupedProcess):
    """One child process whose stdout+stderr are pumped into our log with a prefix."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process):
        self.name = name
        self.proc = proc
        self.pid = proc.pid
        self.started_at = time.monotonic()
        self._prefix = f"[{name}] ".encode()
        self._pump = asyncio.ensure_future(self._pump_output())
        keep_pump(self._pump)

    @classmethod
    async def spawn(
        cls,
        name: str,
        argv: Sequence[str],
        *,
        pass_fds: Sequence[int] = (),
        env: dict[str, str] | None = None,
    ) -> "Child":
        parent = os.getpid()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            pass_fds=tuple(pass_fds),
            env=env,
            process_group=0,
            preexec_fn=lambda: _die_with_parent(parent),
        )
        return cls(name, proc)

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def _pump_output(self) -> None:
        assert self.proc.stdout is not None
        await pump_lines(self.proc.stdout, self._prefix)

    def send_signal(self, sig: int) -> None:
        if self.alive:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    async def wait(self) -> int:
        return await self.proc.wait()


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


async def wait_all(children: Sequence[Child], timeout: float, hurry: asyncio.Event | None = None) -> bool:
    """Wait until every child has exited, `timeout` passed or `hurry` is set; True if all exited."""
    alive = [c for c in children if c.alive]
    if not alive:
        return True
    waiters: set[asyncio.Future] = {asyncio.ensure_future(asyncio.gather(*(c.wait() for c in alive)))}
    if hurry is not None:
        waiters.add(asyncio.ensure_future(hurry.wait()))
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)  # retrieve the cancellations
    return all(not c.alive for c in children)
