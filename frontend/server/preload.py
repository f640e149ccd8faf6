"""The worker template: a process that loads what every worker shares, then forks the workers.

Started by the supervisor's WorkerPool (supervisor/forkserver.py) as an ordinary child:
`python -m vllm_pyfrontend.server.preload --control-fd N --config-json '<worker 0's config>'`,
with the workers' environment (metrics directory, API keys). It imports the worker's modules and
builds the parts that are the same in every worker (tokenizer, chat template, generation
defaults, model config: `SharedParts`), collects and freezes the Python heap, trims the C heap and
takes its free chunks (server/malloc_heap.py), then waits on the control socket (AF_UNIX
SOCK_SEQPACKET). It runs no event loop and keeps no thread, so forking it is safe; the forked
workers share those pages copy-on-write (the tokenizer tables are most of a worker's memory).

Control messages (JSON, one per datagram):

    template -> supervisor  {"op": "ready", "pid": P, "threads": T}
    supervisor -> template  {"op": "fork", "id": I, "name": "worker 0", "config": "<json>"}
                            + fds [output pipe write end, status pipe write end]
    template -> supervisor  {"op": "forked", "id": I, "pid": P} + fds [pidfd of P]
                            {"op": "fork_failed", "id": I, "error": "..."}
                            {"op": "exit", "pid": P, "code": C}  (C as Popen.returncode)

A forked worker: own process group, SIGTERM when the template dies (which dies with the
supervisor), stdout+stderr on the pipe it was given, default signal handlers, then
`run_worker(config, shared)` on a fresh event loop. The template exits when the control socket
closes or on SIGTERM; its workers then get SIGTERM and drain.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import select
import signal
import socket
import sys
import traceback

from vllm_pyfrontend import environment
from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.server import worker as worker_module
from vllm_pyfrontend.server.malloc_heap import release_free_heap, seal_free_heap
from vllm_pyfrontend.server.worker import SharedParts

log = logging.getLogger("vllm_pyfrontend.server.preload")

_PR_SET_PDEATHSIG = 1
MAX_MESSAGE = 1 << 20


def _prctl_pdeathsig(sig: int) -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig))
    except (OSError, AttributeError):
        pass


def thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _send(sock: socket.socket, msg: dict, fds: list[int] = ()) -> None:
    data = json.dumps(msg).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


#: Modules every worker imports after it starts (lazily, on its first requests, or while building its
#: app), loaded here once so that the workers share them: a module a worker imports itself is that
#: worker's own memory.
WORKER_MODULES = (
    "vllm_pyfrontend.parsers.tool", "vllm_pyfrontend.parsers.reasoning", "uvloop",
    "vllm_pyfrontend.api.speech.routes",  # add_speech_routes imports it when the app is built
    "vllm_pyfrontend.store.sqlite",  # the default --response-store, opened by every worker
    "encodings.idna",  # the listening socket's host name, encoded by socket.getaddrinfo
    "setproctitle",  # the forked worker's title
)


def _import_worker_modules() -> None:
    """Modules a worker imports lazily on its first requests: load them here, once."""
    for name in WORKER_MODULES:
        try:
            __import__(name)
        except ImportError:
            pass


class Template:
    def __init__(self, sock: socket.socket, shared: SharedParts, api_keys: list[str]):
        self.sock = sock
        self.shared = shared
        self.api_keys = api_keys
        self.pid = os.getpid()
        self.children: set[int] = set()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def serve(self) -> int:
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self._wake_w)
        _send(self.sock, {"op": "ready", "pid": self.pid, "threads": thread_count()})
        while True:
            try:
                ready, _, _ = select.select([self.sock, self._wake_r], [], [])
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
            if self._wake_r in ready:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            self._reap()
            if self.sock in ready:
                try:
                    data, fds, _, _ = socket.recv_fds(self.sock, MAX_MESSAGE, 4)
                except ConnectionError:
                    data, fds = b"", []
                if not data:
                    for fd in fds:
                        os.close(fd)
                    log.debug("supervisor closed the control socket: exiting")
                    return 0
                self._handle(json.loads(data), fds)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            self.children.discard(pid)
            try:
                _send(self.sock, {"op": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass

    def _handle(self, msg: dict, fds: list[int]) -> None:
        if msg.get("op") != "fork" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            _send(self.sock, {"op": "fork_failed", "id": msg.get("id"), "error": "bad request"})
            return
        out_fd, status_fd = fds
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as e:
            os.close(out_fd)
            os.close(status_fd)
            _send(self.sock, {"op": "fork_failed", "id": msg["id"], "error": str(e)})
            return
        if pid == 0:
            self._child(msg, out_fd, status_fd)  # never returns
        self.children.add(pid)
        os.close(out_fd)
        os.close(status_fd)
        # The pidfd is opened before this process can reap `pid`: it names that process, even
        # if it already exited (a zombie), and the supervisor polls it for the exit.
        pidfd = os.pidfd_open(pid)
        try:
            _send(self.sock, {"op": "forked", "id": msg["id"], "pid": pid}, [pidfd])
        finally:
            os.close(pidfd)

    def _child(self, msg: dict, out_fd: int, status_fd: int) -> None:
        code = 1
        try:
            os.setpgid(0, 0)  # own process group, as a spawned worker
            _prctl_pdeathsig(signal.SIGTERM)
            if os.getppid() != self.pid:  # the template died before prctl took effect
                os._exit(1)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.close(self._wake_r)
            os.close(self._wake_w)
            self.sock.close()
            os.dup2(out_fd, 1)
            os.dup2(out_fd, 2)
            os.close(out_fd)
            config = WorkerConfig.from_json(msg["config"])
            config.status_fd = status_fd
            config.api_keys = list(self.api_keys)
            _set_title(msg.get("name", "worker"), config)
            code = _run(config, self.shared)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            try:
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)


def _set_title(name: str, config: WorkerConfig) -> None:
    """`ps` shows the forked process as a worker (the template's argv otherwise)."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(
        f"{sys.executable} -m vllm_pyfrontend.server.worker --worker-index {config.worker_index} (forked)"
    )


def _run(config: WorkerConfig, shared: SharedParts) -> int:
    import asyncio

    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        pass
    return asyncio.run(worker_module.run_worker(config, shared))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm_pyfrontend.server.preload")
    parser.add_argument("--config-json", required=True)
    parser.add_argument("--control-fd", type=int, required=True)
    args = parser.parse_args(argv)
    config = WorkerConfig.from_json(args.config_json)
    api_keys = environment.take_api_keys() or []
    worker_module._setup_logging(config)
    sock = socket.socket(fileno=args.control_fd)
    sock.setblocking(True)
    _import_worker_modules()
    shared = SharedParts.load(config)
    # Freeze what is loaded: the workers' collectors never touch (and so never copy) its pages.
    gc.collect()
    gc.freeze()
    release_free_heap()
    log.debug("worker template took %d free heap chunks", seal_free_heap())
    threads = thread_count()
    if threads > 1:
        log.debug("worker template runs %d threads before forking workers", threads)
    return Template(sock, shared, api_keys).serve()


if __name__ == "__main__":
    sys.exit(main())
