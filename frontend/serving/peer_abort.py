"""Aborting a request by its answered id, whichever worker runs it.

vLLM's `/inference/v1/abort_requests` (and the dev-mode `/abort_requests`) take the ids its
generate route answered with. Here the HTTP request can land on any worker (one shared port),
while only the worker that owns an engine request may end it: the engine sends nothing back for
an abort, so its owner must finish the response itself. So each worker listens on a Unix datagram
socket in the deployment's runtime directory, and the worker that receives an abort sends the ids
to every worker (itself included); each ends the requests it owns with finish reason `abort`, as
vLLM's engine reports an abort.

An abort is scoped by owner (frontend/tenants): with a keys file, a tenant's abort reaches only
the requests its owner started, and its wildcard `*` only all of those; an admin key's reaches
every request, as any abort does in a deployment without a keys file (vLLM's behaviour).
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
from vllm_pyfrontend.tenants import tenant_of

log = logging.getLogger(__name__)
_MAX_DATAGRAM = 60_000
ALL = "*"  # an id that stands for every request (of the owner, where the abort has one)


class AbortMessage(msgspec.Struct, frozen=True):
    """What one worker sends the others: the answered ids, and the owner whose requests they
    may end (None: anyone's)."""

    ids: list[str]
    owner: str | None = None


def socket_path(runtime_dir: str, worker_index: int) -> str:
    return os.path.join(runtime_dir, f"abort-{worker_index}.sock")


class PeerAbort:
    def __init__(self, runtime_dir: str, worker_index: int, num_workers: int, engine):
        self.runtime_dir = runtime_dir
        self.worker_index = worker_index
        self.num_workers = num_workers
        self.engine = engine
        self._runs: dict[str, list[tuple[Any, str]]] = {}  # answered id -> its (Submission, owner)s here
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
                msg = msgspec.json.decode(data, type=AbortMessage)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            try:
                self.abort_local(msg.ids, msg.owner)
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
    def track(self, answered_id: str, submission, owner: str) -> None:
        self._runs.setdefault(answered_id, []).append((submission, owner))

    def untrack(self, answered_id: str, submission) -> None:
        runs = self._runs.get(answered_id)
        if runs is not None:
            runs[:] = [r for r in runs if r[0] is not submission]
            if not runs:
                del self._runs[answered_id]

    def abort_local(self, ids: list[str], owner: str | None = None) -> int:
        """End this worker's requests answered under `ids`, of `owner` (None: anyone's): abort
        them in the engine and finish each choice with `abort` (the engine reports nothing for
        a client's abort). "*" stands for all of them: with no owner every request in flight,
        whatever route started it; with one, every request the owner started here by id."""
        if ALL in ids and owner is None:
            sinks = self.engine.in_flight_sinks()
            self.engine.abort([rid for rid, _ in sinks])
            for rid, sink in sinks:
                sink.on_output(EngineOutput(rid, [], finish_reason=FINISH_ABORT))
            return len(sinks)
        answered = list(self._runs) if ALL in ids else ids
        count = 0
        for rid_answered in answered:
            for sub, of in list(self._runs.get(rid_answered, ())):
                if owner is not None and of != owner:
                    continue  # another owner's request: as if the id did not exist
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
    def abort_everywhere(self, ids: list[str], owner: str | None = None) -> int:
        """Abort `ids` ("*": all) of `owner` (None: anyone's) on every worker; returns this
        worker's count."""
        if not ids:
            return 0
        count = self.abort_local(ids, owner)
        self._send_peers(_datagrams(ids, owner))
        return count

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


MAX_ID_LENGTH = 512  # longer than any id a route answers with: it names no request


def _datagrams(ids: list[str], owner: str | None) -> list[bytes]:
    """`ids` (those that can name a request) in messages of at most `_MAX_DATAGRAM` bytes."""
    out: list[bytes] = []
    chunk: list[str] = []
    size = 0
    for rid in ids:
        if len(rid) > MAX_ID_LENGTH:
            continue
        cost = len(rid.encode()) * 6 + 3  # JSON escapes at most 6 bytes a byte, quotes and comma
        if chunk and size + cost > _MAX_DATAGRAM - 1024:
            out.append(msgspec.json.encode(AbortMessage(chunk, owner)))
            chunk, size = [], 0
        chunk.append(rid)
        size += cost
    if chunk:
        out.append(msgspec.json.encode(AbortMessage(chunk, owner)))
    return out


PEER_ABORT = web.AppKey("peer_abort", PeerAbort)
"""Where the application keeps its `PeerAbort` once installed."""


def abort_owner(request: web.Request) -> str | None:
    """Whose requests an abort route's caller may end: with a keys file its owner's, or
    anyone's for an admin key; anyone's without a keys file (vLLM's behaviour)."""
    if request.app[STATE].tenants is None:
        return None
    tenant = tenant_of(request)
    return None if tenant.admin else tenant.owner


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
