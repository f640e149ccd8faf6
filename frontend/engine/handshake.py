"""The engine startup handshake, frontend side (used by the supervisor).

vLLM's engines (local children or headless engines on other hosts) connect a
DEALER, identity `engine_index.to_bytes(2, "little")`, to the frontend's
handshake ROUTER and:

1. send `{"status": "HELLO", "local": bool, "headless": bool}`;
2. receive the init message: the input/output address of every frontend client
   slot (`inputs[i]`/`outputs[i]` belong to client `i`), coordinator addresses
   (none here) and `parallel_config` overrides (empty unless the frontend runs
   vLLM's coordinated data parallelism, i.e. MoE with DP > 1);
3. connect to those addresses, send their ready response on every input socket;
4. send `{"status": "READY", ...}` here (+ `parallel_config_hash` when DP > 1).

Engines go through these steps independently, so HELLOs and READYs of
different engines interleave. This mirrors vLLM's `wait_for_engine_startup`.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import ormsgpack
import zmq

log = logging.getLogger(__name__)

_POLL_MS = 100


class HandshakeError(RuntimeError):
    """An engine broke the handshake (or died during it)."""


def init_message(
    inputs: list[str], outputs: list[str], parallel_config: dict[str, Any] | None = None
) -> bytes:
    """vLLM's `EngineHandshakeMetadata`, msgpack-encoded as its frontend does."""
    return ormsgpack.packb(
        {
            "addresses": {
                "inputs": list(inputs),
                "outputs": list(outputs),
                "coordinator_input": None,
                "coordinator_output": None,
                "frontend_stats_publish_address": None,
            },
            "parallel_config": dict(parallel_config or {}),
        }
    )


class HandshakeServer:
    """The handshake ROUTER. Bind at construction; `run()` once per engine start."""

    def __init__(self, address: str):
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 2000)  # let init messages leave on close
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # libzmq spells "any port" as "*"; accept the familiar ":0" too.
        if address.startswith("tcp://") and address.endswith(":0"):
            address = address[:-2] + ":*"
        try:
            self._sock.bind(address)
        except zmq.ZMQError:
            self._sock.close(linger=0)
            self._ctx.term()
            raise
        self.address: str = self._sock.getsockopt(zmq.LAST_ENDPOINT).decode()

    def run(
        self,
        *,
        engine_indices: list[int],
        inputs: list[str],
        outputs: list[str],
        timeout: float,
        is_alive: Callable[[], bool] | None = None,
        parallel_config: dict[str, Any] | None = None,
    ) -> dict[int, dict]:
        """Handshake with every engine in `engine_indices`; return READY messages by index.

        Raises TimeoutError when some engine has not finished within `timeout`
        seconds, HandshakeError when an engine misbehaves or `is_alive()` turns
        False (the launched engine process exited).
        """
        if len(inputs) != len(outputs) or not inputs:
            raise ValueError("need one input and one output address per client slot")
        init = init_message(inputs, outputs, parallel_config)
        identities = {i.to_bytes(2, "little"): i for i in engine_indices}
        state = {i: "NEW" for i in engine_indices}
        ready: dict[int, dict] = {}
        deadline = time.monotonic() + timeout
        while len(ready) < len(engine_indices):
            if is_alive is not None and not is_alive():
                raise HandshakeError(
                    f"the engine process exited during startup ({self._waiting(state)})")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"engine handshake on {self.address} timed out after {timeout:.0f}s "
                    f"({self._waiting(state)})")
            if not self._sock.poll(min(_POLL_MS, max(1, int(remaining * 1000)))):
                continue
            frames = self._sock.recv_multipart()
            if len(frames) != 2:
                raise HandshakeError(f"malformed handshake message ({len(frames)} frames)")
            identity, payload = frames
            index = identities.get(identity)
            if index is None:
                raise HandshakeError(
                    f"handshake message from unexpected engine "
                    f"{int.from_bytes(identity, 'little') if len(identity) == 2 else identity!r}; "
                    f"expected engines {sorted(engine_indices)}")
            try:
                msg = ormsgpack.unpackb(payload)
                status = msg["status"]
            except Exception as e:
                raise HandshakeError(f"undecodable handshake message from engine {index}: {e}") from e
            if status == "HELLO" and state[index] == "NEW":
                self._sock.send_multipart((identity, init))
                state[index] = "CONNECTED"
                log.info("engine %d connected (local=%s, headless=%s)", index,
                         msg.get("local"), msg.get("headless"))
            elif status == "READY" and state[index] == "CONNECTED":
                state[index] = "READY"
                ready[index] = msg
                log.info("engine %d finished the handshake", index)
            else:
                raise HandshakeError(
                    f"unexpected {status!r} message from engine {index} in state {state[index]}")
        return ready

    @staticmethod
    def _waiting(state: dict[int, str]) -> str:
        hello = sorted(i for i, s in state.items() if s == "NEW")
        ready = sorted(i for i, s in state.items() if s == "CONNECTED")
        parts = []
        if hello:
            parts.append(f"no HELLO from engine(s) {hello}")
        if ready:
            parts.append(f"no READY from engine(s) {ready}")
        return "; ".join(parts) or "done"

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None  # type: ignore[assignment]
            self._ctx.term()

    def __enter__(self) -> "HandshakeServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
