"""One client slot's two sockets: binding them, the engines' hello, sending, closing.

A worker binds a ROUTER for requests (the engines' DEALERs connect to it) and a PULL for
outputs (the engines' PUSHes connect to it). At the first start every engine sends one ready
response on the ROUTER (its `EngineInfo`); a restarted worker gets none (the engines sent
theirs once, to its predecessor), so it is given the infos and waits only for the engines'
DEALERs to reconnect. Reading the PULL socket is `OutputReader`'s job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

import zmq

from .types import EngineDeadError, EngineInfo
from .wire import LATEST_LAYOUT, decode_ready, engine_identity, layout_for_version

log = logging.getLogger(__name__)

# Send flags as ints (see `Connection.send`).
_MORE = int(zmq.SNDMORE | zmq.NOBLOCK)
_LAST = int(zmq.NOBLOCK)


class Connection:
    """The sockets of one client slot, and the wire layout its engines speak.

    `unavailable` makes the error a send raises while there is no socket (not started yet,
    closed): why requests cannot be served now, as the client's health words it."""

    def __init__(self, *, input_address: str, output_address: str, engine_indices: list[int],
                 unavailable: Callable[[], EngineDeadError]):
        self.input_address = input_address
        self.output_address = output_address
        self.engine_indices = engine_indices
        self.identities = {i: engine_identity(i) for i in engine_indices}
        self._unavailable = unavailable
        # The field layout of the engines' vLLM version (set from their ready responses).
        self.layout = LATEST_LAYOUT
        self._ctx: zmq.Context | None = None
        self.input: zmq.Socket | None = None
        self.output: zmq.Socket | None = None

    async def open(self, engine_infos: list[EngineInfo] | None, timeout: float) -> list[EngineInfo]:
        """Bind both sockets and wait for the engines: their ready responses, or (given their
        infos) their reconnection. The engines' infos, in `engine_indices` order. On any
        failure the sockets are closed again."""
        self._ctx = zmq.Context()
        inp = self._ctx.socket(zmq.ROUTER)
        inp.setsockopt(zmq.SNDHWM, 0)
        inp.setsockopt(zmq.RCVHWM, 0)
        # A ROUTER silently drops frames for an unknown peer; make that an error.
        inp.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # A restarted engine connects with the identity of the one that died: it takes over.
        inp.setsockopt(zmq.ROUTER_HANDOVER, 1)
        out = self._ctx.socket(zmq.PULL)
        out.setsockopt(zmq.RCVHWM, 0)
        self.input, self.output = inp, out
        try:
            if engine_infos is None:
                # Monitor is only needed for restarts; bind first, then wait.
                inp.bind(self.input_address)
                out.bind(self.output_address)
                infos = await self._wait_ready(timeout)
            else:
                infos = self._trust_infos(engine_infos)
                monitor = inp.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
                inp.bind(self.input_address)
                out.bind(self.output_address)
                await self._wait_connected(monitor, min(timeout, 30.0))
        except BaseException:
            self.close(linger=0)
            raise
        self.layout = layout_for_version(infos[0].vllm_version)
        return infos

    def _trust_infos(self, engine_infos: list[EngineInfo]) -> list[EngineInfo]:
        by_index = {i.engine_index: i for i in engine_infos}
        missing = [i for i in self.engine_indices if i not in by_index]
        if missing:
            raise ValueError(f"no engine info for engine(s) {missing}")
        return [by_index[i] for i in self.engine_indices]

    async def _wait_ready(self, timeout: float) -> list[EngineInfo]:
        assert self.input is not None
        deadline = time.monotonic() + timeout
        pending = set(self.engine_indices)
        infos: dict[int, EngineInfo] = {}
        by_identity = {v: k for k, v in self.identities.items()}
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"no ready response from engine(s) {sorted(pending)} on "
                    f"{self.input_address} within {timeout:.0f}s"
                )
            # Startup only: short blocking polls, then let the loop run.
            if not self.input.poll(timeout=min(20, max(1, int(remaining * 1000)))):
                await asyncio.sleep(0.005)
                continue
            frames = self.input.recv_multipart()
            if len(frames) != 2:
                log.warning("ignoring %d-frame message on the input socket", len(frames))
                continue
            identity, payload = frames
            index = by_identity.get(identity)
            if index is None:
                log.warning("ready response from unexpected engine identity %r", identity)
                continue
            infos[index] = decode_ready(payload, engine_index=index)
            pending.discard(index)
            log.info("engine %d ready: vLLM %s, max_model_len %d", index,
                     infos[index].vllm_version, infos[index].max_model_len)
        return [infos[i] for i in self.engine_indices]

    async def _wait_connected(self, monitor: zmq.Socket, timeout: float) -> None:
        """Wait until every engine's DEALER has (re)connected to the input ROUTER.

        Until then a send to its identity fails (ROUTER_MANDATORY). Not fatal on
        timeout: the engine may be slow to notice the new socket; sends report it.
        """
        from zmq.utils.monitor import recv_monitor_message

        assert self.input is not None
        deadline = time.monotonic() + timeout
        connected = 0
        try:
            while connected < len(self.engine_indices):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning("only %d of %d engine(s) reconnected to %s within %.0fs",
                                connected, len(self.engine_indices), self.input_address, timeout)
                    return
                if monitor.poll(timeout=min(20, max(1, int(remaining * 1000)))):
                    event = recv_monitor_message(monitor)
                    if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                        connected += 1
                else:
                    await asyncio.sleep(0.005)
        finally:
            self.input.disable_monitor()
            monitor.close(linger=0)

    def send(self, engine: int, kind: bytes, payload: bytes, aux: list | None = None) -> None:
        """One request message to `engine`: [identity, kind, payload, *aux]. Raises
        EngineDeadError when there is no socket or the engine is not connected to it."""
        sock = self.input
        if sock is None:
            raise self._unavailable()
        # Frame by frame with int flags: pyzmq's send_multipart combines its flag enums per
        # frame, ~10 µs per message in enum arithmetic.
        send = sock.send
        try:
            send(self.identities[engine], _MORE)  # (the ROUTER refuses an unknown peer here)
            send(kind, _MORE)
            if not aux:
                send(payload, _LAST)
                return
            send(payload, _MORE, copy=False)
            for frame in aux[:-1]:
                send(frame, _MORE, copy=False)
            send(aux[-1], _LAST, copy=False)
        except zmq.ZMQError as e:
            if e.errno == zmq.EHOSTUNREACH:
                raise EngineDeadError(f"engine {engine} is not connected") from None
            raise EngineDeadError(f"cannot send to engine {engine}: {e}") from None

    def close(self, linger: int) -> None:
        for sock in (self.input, self.output):
            if sock is not None:
                sock.close(linger=linger)
        self.input = self.output = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None
