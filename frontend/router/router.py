"""The drop-in router: owns vLLM's one engine client slot and serves N workers from it.

When `vllm serve` launches this frontend (VLLM_USE_RUST_FRONTEND=1), vLLM binds one input
ROUTER listener and one output PULL listener for a single client (client_index 0) and hands
both over as file descriptors. The router adopts them and, towards each worker, plays the
engine: for worker i and engine e it connects a DEALER whose identity is engine e's
(`e.to_bytes(2, "little")`) to the worker's input ROUTER, and a PUSH to the worker's output
PULL. A worker therefore runs exactly the code it runs under `frontend-supervisor` (it binds
its own ROUTER/PULL pair and receives the engines' ready responses, which the router replays);
only the `client_index` it stamps is 0.

    worker i ROUTER --[type, payload]--> router DEALER(i, e) --[e, type, payload]--> engine e
    engine  PUSH --[batch]--> router PULL --BatchSplitter--> PUSH(i) --> worker i PULL

The loop is synchronous (zmq.Poller, non-blocking drains with a budget per socket): the router
process does nothing else, and one blocking poll per wake-up is cheaper than an event loop.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import time
from collections.abc import Sequence
from typing import Any

import zmq

from vllm_pyfrontend.engine.types import EngineInfo
from vllm_pyfrontend.engine.wire import REQUEST_UTILITY, decode_ready, engine_identity

from .demux import BatchSplitter

log = logging.getLogger(__name__)

_DRAIN_BUDGET = 256  # messages taken from one socket before looking at the others
_IDLE_POLL_MS = 200  # how often an idle router notices a stop request


def adopt_listener(ctx: zmq.Context, fd: int, socket_type: int) -> zmq.Socket:
    """A ZMQ socket that listens on an inherited, already bound and listening socket.

    libzmq's ZMQ_USE_FD makes the next bind() use the given fd instead of creating one; the
    endpoint passed to bind() must name the same address, so it is read back from the socket.
    The Python socket object is detached, so closing it does not close the fd libzmq now owns.
    """
    sock = socket.socket(fileno=fd)
    try:
        endpoint = _endpoint_of(sock)
        family = sock.family
    except BaseException:
        sock.detach()
        raise
    raw_fd = sock.detach()
    zsock = ctx.socket(socket_type)
    _tune(zsock)
    if family == socket.AF_INET6:
        zsock.setsockopt(zmq.IPV6, 1)
    zsock.setsockopt(zmq.USE_FD, raw_fd)
    zsock.bind(endpoint)
    return zsock


def _endpoint_of(sock: socket.socket) -> str:
    name = sock.getsockname()
    if sock.family == socket.AF_UNIX:
        path = name.decode() if isinstance(name, bytes) else name
        if not path:
            raise ValueError(f"fd {sock.fileno()} is an unnamed unix socket")
        return f"ipc://{path}"
    if sock.family == socket.AF_INET:
        return f"tcp://{name[0]}:{name[1]}"
    if sock.family == socket.AF_INET6:
        return f"tcp://[{name[0]}]:{name[1]}"
    raise ValueError(f"fd {sock.fileno()} is not a unix or TCP socket (family {sock.family})")


def _tune(sock: zmq.Socket) -> None:
    """No high-water marks: the engine and workers bound their own queues (vLLM does the same)."""
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.LINGER, 0)


class Router:
    """One engine client slot shared by `len(worker_inputs)` workers."""

    def __init__(
        self,
        ctx: zmq.Context,
        engine_input: zmq.Socket,
        engine_output: zmq.Socket,
        engine_indices: Sequence[int],
        worker_inputs: Sequence[str],
        worker_outputs: Sequence[str],
    ):
        if len(worker_inputs) != len(worker_outputs) or not worker_inputs:
            raise ValueError("need one input and one output address per worker")
        self.ctx = ctx
        self.engine_input = engine_input  # ROUTER, adopted from vLLM
        self.engine_output = engine_output  # PULL, adopted from vLLM
        self.engine_indices = list(engine_indices)
        self.worker_inputs = list(worker_inputs)
        self.worker_outputs = list(worker_outputs)
        self.num_workers = len(worker_inputs)
        self.splitter = BatchSplitter(self.num_workers)
        self.ready_payloads: dict[int, bytes] = {}
        self.engine_infos: dict[int, EngineInfo] = {}
        self._pushes: list[zmq.Socket] = []
        # socket -> (worker index, engine identity) for requests coming from the workers.
        self._dealers: dict[zmq.Socket, tuple[int, bytes]] = {}
        self._stop = False
        # A ROUTER drops frames for an unknown peer silently; make that an error we can log.
        self.engine_input.setsockopt(zmq.ROUTER_MANDATORY, 1)

    # ---------------------------------------------------------------- startup

    def wait_engines_ready(self, timeout: float) -> dict[int, bytes]:
        """Receive each engine's ready response (sent on the input socket once it connects)."""
        by_identity = {engine_identity(e): e for e in self.engine_indices}
        pending = set(self.engine_indices)
        deadline = time.monotonic() + timeout
        while pending:
            if self._stop:
                raise InterruptedError("stopped while waiting for the engines")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no ready response from engine(s) {sorted(pending)} "
                                   f"within {timeout:.0f}s")
            if not self.engine_input.poll(min(_IDLE_POLL_MS, max(1, int(remaining * 1000)))):
                continue
            frames = self.engine_input.recv_multipart()
            engine = by_identity.get(frames[0]) if len(frames) == 2 else None
            if engine is None:
                log.warning("ignoring a %d-frame message from %r while waiting for ready",
                            len(frames), frames[0])
                continue
            info = decode_ready(frames[1], engine_index=engine)  # validates the payload
            self.ready_payloads[engine] = frames[1]
            self.engine_infos[engine] = info
            pending.discard(engine)
            log.info("engine %d ready: vLLM %s, max_model_len %d", engine, info.vllm_version,
                     info.max_model_len)
        return dict(self.ready_payloads)

    def connect_workers(self) -> None:
        """Sockets towards every worker; each (worker, engine) DEALER first says "ready".

        Connecting never waits for the worker: libzmq queues the ready message and delivers
        it once the worker has bound its sockets, and reconnects after a worker restart.
        """
        for i in range(self.num_workers):
            push = self.ctx.socket(zmq.PUSH)
            _tune(push)
            push.connect(self.worker_outputs[i])
            self._pushes.append(push)
            for e in self.engine_indices:
                identity = engine_identity(e)
                dealer = self.ctx.socket(zmq.DEALER)
                _tune(dealer)
                dealer.setsockopt(zmq.IDENTITY, identity)
                dealer.connect(self.worker_inputs[i])
                dealer.send(self.ready_payloads[e])
                self._dealers[dealer] = (i, identity)

    # ---------------------------------------------------------------- the loop

    def stop(self) -> None:
        self._stop = True

    def run(self) -> None:
        """Forward until `stop()`; requests and outputs are drained in turns."""
        poller = zmq.Poller()
        poller.register(self.engine_output, zmq.POLLIN)
        for dealer in self._dealers:
            poller.register(dealer, zmq.POLLIN)
        engine_output = self.engine_output
        while not self._stop:
            try:
                ready = poller.poll(_IDLE_POLL_MS)
            except zmq.ZMQError as e:
                if e.errno == zmq.ETERM:
                    return
                raise
            for sock, _ in ready:
                if sock is engine_output:
                    self._drain_outputs()
                else:
                    self._drain_requests(sock)

    def _drain_outputs(self) -> None:
        recv = self.engine_output.recv_multipart
        for _ in range(_DRAIN_BUDGET):
            try:
                frames = recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                messages = self.splitter.split(frames)
            except Exception:  # one bad batch must not stop every worker's outputs
                log.exception("cannot split an engine output message; dropped")
                continue
            for worker, out in messages:
                self._send_to_worker(worker, out)

    def _send_to_worker(self, worker: int, frames: list[Any]) -> None:
        try:
            self._pushes[worker].send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            log.warning("worker %d cannot take outputs (not connected); dropped a message", worker)

    def _drain_requests(self, dealer: zmq.Socket) -> None:
        worker, identity = self._dealers[dealer]
        send = self.engine_input.send_multipart
        for _ in range(_DRAIN_BUDGET):
            try:
                frames = dealer.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            if len(frames) >= 2 and frames[0].bytes == REQUEST_UTILITY:
                self.splitter.note_utility_call(worker, frames[1])
            try:
                send([identity, *frames], flags=zmq.NOBLOCK, copy=False)
            except zmq.ZMQError as e:
                log.error("cannot forward worker %d's request to engine %d: %s", worker,
                          int.from_bytes(identity, "little"), e)

    # ---------------------------------------------------------------- shutdown

    def close(self) -> None:
        for sock in [*self._pushes, *self._dealers, self.engine_input, self.engine_output]:
            sock.close(linger=0)
        self._pushes.clear()
        self._dealers.clear()


def write_engine_infos(path: str, infos: Sequence[EngineInfo]) -> None:
    """The ready responses, where a restarted worker is told to find them (it gets no replay:
    the router's DEALERs say "ready" once per connection, to the first worker instance)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump([i.to_json() for i in infos], f)
    os.replace(tmp, path)


def run_router(
    *,
    input_fd: int,
    output_fd: int,
    engine_indices: Sequence[int],
    worker_inputs: Sequence[str],
    worker_outputs: Sequence[str],
    ready_timeout: float,
    status_fd: int | None = None,
    engine_info_path: str | None = None,
) -> int:
    """The router process: adopt vLLM's listeners, wait for the engines, forward until SIGTERM."""
    ctx = zmq.Context()
    router: Router | None = None
    try:
        engine_input = adopt_listener(ctx, input_fd, zmq.ROUTER)
        engine_output = adopt_listener(ctx, output_fd, zmq.PULL)
        router = Router(ctx, engine_input, engine_output, engine_indices, worker_inputs,
                        worker_outputs)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: router.stop())
        router.wait_engines_ready(ready_timeout)
        if engine_info_path:
            write_engine_infos(engine_info_path, [router.engine_infos[e] for e in router.engine_indices])
        router.connect_workers()
        if status_fd is not None:
            try:
                os.write(status_fd, b"ready\n")
                os.close(status_fd)
            except OSError:
                pass
        log.info("routing engine(s) %s for %d worker(s)", router.engine_indices, router.num_workers)
        router.run()
        log.info("stopped")
        return 0
    except InterruptedError:
        return 0
    finally:
        if router is not None:
            router.close()
        ctx.destroy(linger=0)  # also closes sockets made before a failure
