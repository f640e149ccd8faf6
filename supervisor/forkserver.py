"""Workers forked from a preloaded worker template, so they share its read-only memory.

    WorkerPool.spawn ──► WorkerTemplate.fork(config) ──(control socket: config + fds)──► template
                                                     ◄── pid + pidfd ──────────────────  forks worker
    ForkedChild: the worker as the pool sees it (Child's interface: pid, wait, returncode,
    send_signal, kill_group, ...): output read from a pipe and prefixed `[worker i]`, exit seen
    on the pidfd, exit status reported by the template (which reaps it).

The template (frontend/server/preload.py) is itself an ordinary `Child` (own process group,
SIGTERM when the supervisor dies, output prefixed `[worker template]`) started on the first worker
start, with the workers' environment. Its workers die with it (SIGTERM: they drain). When it
cannot start or has died, the pool logs it and spawns workers as separate interpreters; the next
worker start tries a fresh template.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence

from vllm_pyfrontend import environment
from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.supervisor.process import Child, GroupedProcess, keep_pump, pump_lines

# The template loads the tokenizer before it answers: as long as a worker's own startup may take.
TEMPLATE_READY_TIMEOUT_S = 120.0
FORK_REPLY_TIMEOUT_S = 30.0
# The template reaps a worker right after it exits; past this its exit status is unknown.
EXIT_STATUS_WAIT_S = 2.0
UNKNOWN_EXIT = 255


class TemplateError(Exception):
    """The template could not start or fork (the pool falls back to spawning)."""


class ForkedChild(GroupedProcess):
    """A worker forked by the template, with the interface of `process.Child`."""

    def __init__(self, name: str, pid: int, pidfd: int, out_fd: int, template: "WorkerTemplate"):
        self.name = name
        self.pid = pid
        self.started_at = time.monotonic()
        self._pidfd: int | None = pidfd
        self._template = template
        self._returncode: int | None = None
        self._exited = asyncio.Event()
        self._status = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().add_reader(pidfd, self._on_exit)
        self._prefix = f"[{name}] ".encode()
        self._pump = asyncio.ensure_future(self._pump_output(out_fd))
        keep_pump(self._pump)

    async def _pump_output(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
        )
        try:
            await pump_lines(reader, self._prefix)
        finally:
            transport.close()

    def _on_exit(self) -> None:
        if self._pidfd is not None:
            asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self._exited.set()

    def set_status(self, code: int) -> None:
        if not self._status.done():
            self._status.set_result(code)

    def template_gone(self) -> None:
        """No exit status will come any more."""
        if not self._status.done():
            self._status.set_result(None)

    @property
    def returncode(self) -> int | None:
        return self._returncode

    @property
    def alive(self) -> bool:
        return self._returncode is None

    async def wait(self) -> int:
        await self._exited.wait()
        if self._returncode is None:
            try:
                code = await asyncio.wait_for(asyncio.shield(self._status), EXIT_STATUS_WAIT_S)
            except asyncio.TimeoutError:
                code = None
            if self._returncode is None:
                if code is None:
                    logging.getLogger("vllm_pyfrontend.supervisor").warning(
                        "%s (pid %d): exit status unknown (the worker template is gone)", self.name, self.pid)
                    code = UNKNOWN_EXIT
                self._returncode = code
                self._template.forget(self.pid)
        return self._returncode

    def send_signal(self, sig: int) -> None:
        # Through the pidfd: the template reaps this process, so its pid may be reused.
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass


class WorkerTemplate:
    """The supervisor's end of the worker template process."""

    def __init__(self, logger: logging.Logger | None = None):
        self._log = logger or logging.getLogger("vllm_pyfrontend.supervisor")
        self.child: Child | None = None
        self._sock: socket.socket | None = None
        self._pass_fds: tuple[int, ...] = ()
        self._ready: asyncio.Future | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._workers: dict[int, ForkedChild] = {}
        self._exit_codes: dict[int, int] = {}
        self._ids = itertools.count()
        self._starting: asyncio.Future | None = None

    @property
    def running(self) -> bool:
        return self._sock is not None and self.child is not None and self.child.alive

    async def ensure(self, config: WorkerConfig, env: dict[str, str], pass_fds: Sequence[int]) -> None:
        """Start the template unless one runs (with these inherited fds). Raises TemplateError."""
        if self.running and self._pass_fds == tuple(pass_fds):
            return
        if self._starting is not None:  # another spawn is starting it: share that start
            await asyncio.shield(self._starting)
            if self.running:
                return
        await self.close()
        self._starting = asyncio.get_running_loop().create_future()
        try:
            await self._start(config, env, tuple(pass_fds))
        finally:
            self._starting.set_result(None)
            self._starting = None

    async def _start(self, config: WorkerConfig, env: dict[str, str], pass_fds: tuple[int, ...]) -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-m", "vllm_pyfrontend.server.preload",
                "--control-fd", str(theirs.fileno()), "--config-json", config.to_json()]
        try:
            self.child = await Child.spawn("worker template", argv, pass_fds=(*pass_fds, theirs.fileno()), env=env)
        except OSError as e:
            ours.close()
            raise TemplateError(f"cannot start the worker template: {e}") from None
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock, self._pass_fds = ours, pass_fds
        self._ready = loop.create_future()
        loop.add_reader(ours.fileno(), self._on_readable)
        t0 = time.monotonic()
        try:
            info = await asyncio.wait_for(asyncio.shield(self._ready), TEMPLATE_READY_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self.close()
            raise TemplateError("the worker template did not get ready in time") from None
        if info is None:
            code = await self.child.wait()
            await self.child.flush_output(0.5)
            self._drop()
            raise TemplateError(f"the worker template exited before it was ready ({code})")
        self._log.info("worker template ready (pid %d, loaded in %.1fs): workers are forked from it",
                       info["pid"], time.monotonic() - t0)

    def _on_readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(sock, 65536, 4)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, fds = b"", []
            if not data:
                self._log.warning("the worker template is gone")
                self._drop()
                return
            try:
                self._message(json.loads(data), fds)
            except Exception:  # a bad message must not break the supervisor's loop
                self._log.exception("bad message from the worker template")
                for fd in fds:
                    os.close(fd)

    def _message(self, msg: dict, fds: list[int]) -> None:
        op = msg.get("op")
        if op == "ready":
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(msg)
        elif op in ("forked", "fork_failed"):
            fut = self._pending.pop(msg.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result((msg, fds))
            else:
                for fd in fds:
                    os.close(fd)
        elif op == "exit":
            pid, code = msg["pid"], msg["code"]
            worker = self._workers.get(pid)
            if worker is not None:
                worker.set_status(code)
            else:  # the exit came before the fork's reply was handled
                self._exit_codes[pid] = code

    def _drop(self) -> None:
        """The template is gone (or being closed): fail what waits on it."""
        if self._sock is not None:
            try:
                asyncio.get_running_loop().remove_reader(self._sock.fileno())
            except (ValueError, OSError):
                pass
            self._sock.close()
            self._sock = None
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_result(({"op": "fork_failed", "error": "the worker template is gone"}, []))
        self._pending.clear()
        for w in self._workers.values():
            w.template_gone()

    def forget(self, pid: int) -> None:
        self._workers.pop(pid, None)
        self._exit_codes.pop(pid, None)

    async def fork(self, name: str, config: WorkerConfig, status_fd: int) -> ForkedChild:
        """Fork one worker (status pipe write end `status_fd`, which the caller still closes)."""
        if not self.running:
            raise TemplateError("the worker template is not running")
        assert self._sock is not None
        out_r, out_w = os.pipe()
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            msg = json.dumps({"op": "fork", "id": rid, "name": name, "config": config.to_json()}).encode()
            socket.send_fds(self._sock, [msg], [out_w, status_fd])
        except OSError as e:
            self._pending.pop(rid, None)
            os.close(out_r)
            raise TemplateError(f"cannot reach the worker template: {e}") from None
        finally:
            os.close(out_w)
        try:
            reply, fds = await asyncio.wait_for(fut, FORK_REPLY_TIMEOUT_S)
        except asyncio.TimeoutError:
            self._pending.pop(rid, None)
            os.close(out_r)
            raise TemplateError("the worker template did not answer") from None
        if reply.get("op") != "forked" or len(fds) != 1:
            os.close(out_r)
            for fd in fds:
                os.close(fd)
            raise TemplateError(f"the worker template could not fork: {reply.get('error')}")
        pid = reply["pid"]
        child = ForkedChild(name, pid, fds[0], out_r, self)
        self._workers[pid] = child
        if pid in self._exit_codes:
            child.set_status(self._exit_codes.pop(pid))
        return child

    async def close(self, timeout: float = 5.0) -> None:
        """Stop the template (its remaining workers get SIGTERM from the kernel)."""
        child = self.child
        self._drop()
        self.child = None
        if child is None:
            return
        if child.alive:
            child.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(child.wait(), timeout)
            except asyncio.TimeoutError:
                child.kill_group(signal.SIGKILL)
                await child.wait()
        await child.flush_output(0.5)


def preload_enabled(flag: bool | None = None) -> bool:
    """--no-worker-preload (flag False) or VLLM_PYFRONTEND_WORKER_PRELOAD=0 turn it off."""
    if flag is False:
        return False
    return environment.worker_preload()



