"""Aborting a request by its answered id, whichever worker runs it.

vLLM's `/inference/v1/abort_requests` (and the dev-mode `/abort_requests`) take the ids its
generate route answered with. Here the HTTP request can land on any worker (one shared port),
while only the worker that owns an engine request may end it: the engine sends nothing back for
an abort, so its owner must finish the response itself. So each worker listens on a Unix datagram
socket in the deployment's runtime directory, and the worker that receives an abort sends the ids
to every worker (itself included); each ends the requests it owns with finish reason `abort`, as
vLLM's engine reports an abort.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend.engine.types import FINISH_ABORT, EngineOutput
from vllm_pyfrontend.serving.state import STATE

log = logging.getLogger(__name__)
_MAX_DATAGRAM = 60_000
ALL = "*"  # in a datagram: every request in flight on the worker


def socket_path(runtime_dir: str, worker_index: int) -> str:
    return os.path.join(runtime_dir, f"abort-{worker_index}.sock")


class PeerAbort:
    def __init__(self, runtime_dir: str, worker_index: int, num_workers: int, engine):
        self.runtime_dir = runtime_dir
        self.worker_index = worker_index
        self.num_workers = num_workers
        self.engine = engine
        self._runs: dict[str, list[Any]] = {}  # answered id -> its Submissions on this worker
        self._receiver: socket.socket | None = None
        self._sender: socket.socket | None = None

    async def start(self) -> None:
        path = socket_path(self.runtime_dir, self.worker_index)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        sock.bind(path)
        self._receiver = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._on_readable)
        self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sender.setblocking(False)

    def _on_readable(self) -> None:
        assert self._receiver is not None
        while True:
            try:
                data = self._receiver.recv(_MAX_DATAGRAM + 1024)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                ids = msgspec.json.decode(data, type=list[str])
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            try:
                self.abort_local(ids)
            except Exception:  # noqa: BLE001 - a bad datagram never stops the worker
                log.exception("abort from a peer worker failed")

    def close(self) -> None:
        if self._receiver is not None:
            try:
                asyncio.get_running_loop().remove_reader(self._receiver.fileno())
            except RuntimeError:
                pass
            self._receiver.close()
        if self._sender is not None:
            self._sender.close()
        try:
            os.unlink(socket_path(self.runtime_dir, self.worker_index))
        except OSError:
            pass

    # -- this worker's requests -------------------------------------------------------------
    def track(self, answered_id: str, submission) -> None:
        self._runs.setdefault(answered_id, []).append(submission)

    def untrack(self, answered_id: str, submission) -> None:
        subs = self._runs.get(answered_id)
        if subs is not None:
            if submission in subs:
                subs.remove(submission)
            if not subs:
                del self._runs[answered_id]

    def abort_local(self, ids: list[str]) -> int:
        """End this worker's requests answered under `ids` ("*": all of them, whatever route
        started them): abort them in the engine and finish each choice with `abort` (the engine
        reports nothing for a client's abort)."""
        if ALL in ids:
            sinks = self.engine.in_flight_sinks()
            self.engine.abort([rid for rid, _ in sinks])
            for rid, sink in sinks:
                sink.on_output(EngineOutput(rid, [], finish_reason=FINISH_ABORT))
            return len(sinks)
        count = 0
        for answered in ids:
            for sub in list(self._runs.get(answered, ())):
                for req, gen in sub.requests:
                    if gen.finished:
                        continue
                    # (a request moved to another engine is in flight under its Generation's new id)
                    rid = getattr(gen, "request_id", req.request_id)
                    self.engine.abort((rid,))
                    gen.on_output(EngineOutput(rid, [], finish_reason=FINISH_ABORT))
                    count += 1
        return count

    # -- the deployment ---------------------------------------------------------------------
    def abort_all_everywhere(self) -> int:
        """Abort every request in flight in the deployment; returns this worker's count."""
        count = self.abort_local([ALL])
        self._send_peers([msgspec.json.encode([ALL])])
        return count

    def abort_everywhere(self, ids: list[str]) -> None:
        if not ids:
            return
        self.abort_local(ids)
        payload = msgspec.json.encode(list(ids))
        chunks = [payload] if len(payload) <= _MAX_DATAGRAM else [
            msgspec.json.encode(ids[i:i + 200]) for i in range(0, len(ids), 200)]
        self._send_peers(chunks)

    def _send_peers(self, chunks: list[bytes]) -> None:
        assert self._sender is not None
        for k in range(self.num_workers):
            if k == self.worker_index:
                continue
            for chunk in chunks:
                try:
                    self._sender.sendto(chunk, socket_path(self.runtime_dir, k))
                except OSError as e:  # a worker restarting: its requests ended with it
                    log.debug("abort to worker %d not sent: %s", k, e)


PEER_ABORT = web.AppKey("peer_abort", PeerAbort)
"""Where the application keeps its `PeerAbort` once installed."""


def install(app) -> PeerAbort:
    """The worker's PeerAbort, created once and started with the app (routes that abort by
    answered id call this when they register)."""
    peer = app.get(PEER_ABORT)
    if peer is None:
        state = app[STATE]
        peer = app[PEER_ABORT] = PeerAbort(state.config.runtime_dir, state.worker_index,
                                           state.config.num_workers, state.engine)

        async def _start(_app) -> None:
            await peer.start()

        async def _stop(_app) -> None:
            peer.close()

        app.on_startup.append(_start)
        app.on_cleanup.append(_stop)
    return peer
