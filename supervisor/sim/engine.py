"""Sockets, handshake and step loop of the simulated EngineCore.

Startup follows `EngineCoreProc` as a headless engine: a DEALER (identity =
`engine_index` as 2 little-endian bytes) connects to the frontend's handshake ROUTER and
sends HELLO; the init message names one input and one output address per frontend client;
the engine connects a DEALER to every input and a PUSH to every output, sends its ready
response on each input, then READY on the handshake socket.

After that one thread does everything: it polls the input sockets until the next step
deadline, handles what arrived, and at the deadline runs one step and sends one
`EngineCoreOutputs` per client that has outputs. Deadlines are fixed multiples of
`step_time` from the first step, so the step rate does not drift with the work done. With a
prefill cost (`prefill_time_per_token`) a step that computes prompt tokens lasts that much
longer: its outputs go out, and every later deadline moves, once that time has passed (inputs
are still read meanwhile, as vLLM's input thread reads them while a step runs).

Failures behave as in vLLM: a request that vLLM's input thread cannot decode, or one that
kills vLLM's busy loop, ends the engine with `ENGINE_CORE_DEAD` on every output socket
(`on_bad_request="deaf"` instead reproduces vLLM's dead input thread: the engine stops
reading, keeps stepping, sends nothing). Fault injection: `die_after_steps`,
`hang_after_steps`.
"""

from __future__ import annotations

import logging
import math
import signal
import time
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec
import zmq

from vllm_pyfrontend.supervisor.sim import wire
from vllm_pyfrontend.supervisor.sim.kv_transfer import KvConnector, KvTransferConfig
from vllm_pyfrontend.supervisor.sim.scheduler import FatalEngineError, Scheduler
from vllm_pyfrontend.supervisor.sim.tokens import TokenSource

logger = logging.getLogger(__name__)

_IDLE_POLL_MS = 100  # how often an idle engine looks at its stop flag


@dataclass
class SimEngineConfig:
    handshake_address: str
    engine_index: int = 0
    model: str | None = None
    step_time: float = 0.01
    max_num_seqs: int = 256
    max_model_len: int = 16384
    vllm_version: str = "0.32.0"
    num_gpu_blocks: int | None = None  # default: room for max_num_seqs full-length requests
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    dtype: str = "bfloat16"
    seed: int = 0
    log_stats: bool = True
    include_finished_set: bool = False
    on_bad_request: str = "dead"  # "dead" | "deaf"
    die_after_steps: int | None = None
    hang_after_steps: int | None = None
    handshake_timeout_s: float = 300.0  # vLLM's HANDSHAKE_TIMEOUT_MINS = 5
    # "pooling": an embedding model (tasks embed, token_embed; one pooled vector per request
    # after its first step, `pooling_dim` floats), as vLLM's `--runner pooling --convert embed`.
    runner: str = "generate"
    pooling_dim: int = 1024
    # Seconds each prompt token computed adds to its step (0: prefill is free).
    prefill_time_per_token: float = 0.0
    # vLLM's --kv-transfer-config: prefill/decode disaggregation (kv_transfer.py); None: none.
    kv_transfer_config: KvTransferConfig | None = None


class EngineDied(Exception):
    """Raised inside the loop to end the engine with ENGINE_CORE_DEAD."""


class SimEngine:
    def __init__(self, config: SimEngineConfig):
        self.config = config
        self.identity = config.engine_index.to_bytes(2, "little")
        self.layout = wire.Layout(config.vllm_version)
        blocks_per_seq = math.ceil(config.max_model_len / config.block_size)
        self.num_gpu_blocks = config.num_gpu_blocks or config.max_num_seqs * blocks_per_seq
        kv_transfer = config.kv_transfer_config
        connector = (
            KvConnector(kv_transfer, config.engine_index, config.block_size, self.num_gpu_blocks)
            if kv_transfer is not None else None
        )
        self.scheduler = Scheduler(
            TokenSource(config.model, seed=config.seed),
            self.layout,
            max_num_seqs=config.max_num_seqs,
            max_model_len=config.max_model_len,
            block_size=config.block_size,
            num_gpu_blocks=self.num_gpu_blocks,
            log_stats=config.log_stats,
            include_finished_set=config.include_finished_set,
            pooling_dim=config.pooling_dim if config.runner == "pooling" else None,
            max_num_batched_tokens=config.max_num_batched_tokens,
            prefill_time_per_token=config.prefill_time_per_token,
            connector=connector,
        )
        self.ctx = zmq.Context()
        self.inputs: list[zmq.Socket] = []
        self.outputs: list[zmq.Socket] = []
        self.deaf = False
        self._poller: zmq.Poller | None = None
        self.weight_version = "default"  # EngineCore._weight_version
        self._stop = False
        self._owed_on_close = True  # unless a shutdown finds nothing in flight

    # ------------------------------------------------------------------ lifecycle

    def run(self) -> int:
        """Handshake, then serve until stopped. Returns the process exit code."""
        self._install_signal_handlers()
        try:
            if not self._handshake():
                return 1
            try:
                return self._loop()
            except EngineDied as exc:
                logger.error("EngineCore encountered a fatal error: %s", exc)
                self._send_dead()
                return 1
        finally:
            for sock in self.inputs:
                sock.close(linger=0)
            # What must reach the clients (the aborts of a shutdown, ENGINE_CORE_DEAD) gets up to
            # 4 s to leave; a shutdown with nothing in flight only leaves stats behind, for
            # clients that may be gone already (a supervisor stops its workers first).
            linger = 4000 if self._owed_on_close else 100
            for sock in self.outputs:
                sock.close(linger=linger)
            self.ctx.term()

    def request_stop(self) -> None:
        self._stop = True

    def _install_signal_handlers(self) -> None:
        try:
            signal.signal(signal.SIGTERM, lambda *_: self.request_stop())
            signal.signal(signal.SIGINT, lambda *_: self.request_stop())
        except ValueError:  # not the main thread (tests may run the engine in a thread)
            pass

    # ------------------------------------------------------------------ handshake

    def _handshake(self) -> bool:
        cfg = self.config
        hs = self.ctx.socket(zmq.DEALER)
        hs.setsockopt(zmq.IDENTITY, self.identity)
        hs.setsockopt(zmq.LINGER, 5000)
        try:
            hs.connect(cfg.handshake_address)
            hs.send(wire.hello(headless=True))
            deadline = time.monotonic() + cfg.handshake_timeout_s
            while not hs.poll(_IDLE_POLL_MS):
                if self._stop:
                    return False
                if time.monotonic() > deadline:
                    logger.error(
                        "Did not receive response from front-end process within %.0f s",
                        cfg.handshake_timeout_s,
                    )
                    return False
            init = msgspec.msgpack.decode(hs.recv())
            addresses = init["addresses"]
            input_addresses: list[str] = list(addresses["inputs"])
            output_addresses: list[str] = list(addresses["outputs"])
            logger.info(
                "engine %d: %d input(s), %d output(s)",
                cfg.engine_index,
                len(input_addresses),
                len(output_addresses),
            )
            for address in output_addresses:
                out = self.ctx.socket(zmq.PUSH)
                out.setsockopt(zmq.SNDHWM, 0)
                out.setsockopt(zmq.LINGER, 4000)
                out.connect(address)
                self.outputs.append(out)
            ready_payload = wire.ready_response(
                max_model_len=cfg.max_model_len,
                num_gpu_blocks=self.num_gpu_blocks,
                block_size=cfg.block_size,
                dtype=cfg.dtype,
                vllm_version=cfg.vllm_version,
                engine_index=cfg.engine_index,
                max_num_seqs=cfg.max_num_seqs,
                max_num_batched_tokens=cfg.max_num_batched_tokens,
                instance_id=f"sim-{uuid.uuid4().hex[:12]}",
            )
            for address in input_addresses:
                sock = self.ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.IDENTITY, self.identity)
                sock.setsockopt(zmq.RCVHWM, 0)
                sock.setsockopt(zmq.SNDHWM, 0)
                sock.connect(address)
                sock.send(ready_payload)
                self.inputs.append(sock)
            hs.send(wire.ready(headless=True))
            return True
        finally:
            hs.close()

    # ------------------------------------------------------------------ loop

    def _loop(self) -> int:
        cfg = self.config
        sched = self.scheduler
        poller = self._poller = zmq.Poller()
        for sock in self.inputs:
            poller.register(sock, zmq.POLLIN)
        step_time = cfg.step_time
        next_step: float | None = None
        steps = 0
        while not self._stop:
            if sched.has_work():
                now = time.monotonic()
                if next_step is None:
                    next_step = now + step_time
                timeout = max(0, math.ceil((next_step - now) * 1000))
            else:
                next_step = None
                timeout = _IDLE_POLL_MS
            if self.deaf:
                time.sleep(timeout / 1000)
            else:
                for sock, _ in poller.poll(timeout):
                    self._drain(sock)
            if next_step is None:
                continue
            now = time.monotonic()
            if now < next_step or not sched.has_work():
                continue
            busy = self._step(now)
            steps += 1
            next_step += step_time + busy
            if busy:
                now = time.monotonic()
            if next_step < now:  # fell behind by over a step: restart the grid, no burst
                next_step = now + step_time
            if cfg.die_after_steps is not None and steps >= cfg.die_after_steps:
                raise EngineDied(f"fault injection: --die-after-steps {cfg.die_after_steps}")
            if cfg.hang_after_steps is not None and steps >= cfg.hang_after_steps:
                logger.warning("fault injection: hanging after %d steps", steps)
                while not self._stop:
                    time.sleep(0.1)
        self._shutdown_aborts()
        return 0

    def _step(self, now: float) -> float:
        """One step at `now`; its outputs go out once its prefill time has passed. Returns
        that time (0 without a prefill cost)."""
        result = self.scheduler.step(now)
        busy = self.config.prefill_time_per_token * result.prefill_tokens
        if busy > 0:
            self._read_inputs_until(now + busy)
            now = time.monotonic()
        idx = self.config.engine_index
        outputs = result.outputs
        finished = result.finished
        stats = result.stats
        clients = set(outputs) | set(finished)
        if stats is not None:
            clients.add(result.stats_client)
        for client in clients:
            payload = wire.pack_outputs(
                idx,
                outputs.get(client, []),
                now,
                scheduler_stats=stats if client == result.stats_client else None,
                finished_requests=finished.get(client),
                weight_version=self.weight_version,
            )
            self._send(client, payload)
        return busy

    def _read_inputs_until(self, deadline: float) -> None:
        while not self._stop and (left := deadline - time.monotonic()) > 0:
            if self.deaf:
                time.sleep(left)
                return
            for sock, _ in self._poller.poll(max(1, math.ceil(left * 1000))):
                self._drain(sock)

    def _shutdown_aborts(self) -> None:
        """On SIGTERM, finish every in-flight request with `abort`, as vLLM does."""
        now = time.monotonic()
        aborted = self.scheduler.abort_all()
        self._owed_on_close = bool(aborted)
        for client, items in aborted.items():
            self._send(client, wire.pack_outputs(self.config.engine_index, items, now))

    def _send(self, client: int, payload: bytes) -> None:
        if not 0 <= client < len(self.outputs):
            raise EngineDied(f"client_index {client} has no output socket")
        self.outputs[client].send(payload, copy=len(payload) < 65536)

    def _send_dead(self) -> None:
        for sock in self.outputs:
            try:
                sock.send(wire.ENGINE_CORE_DEAD)
            except zmq.ZMQError:
                pass

    # ------------------------------------------------------------------ inputs

    def _drain(self, sock: zmq.Socket) -> None:
        while not self.deaf:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._handle(frames)

    def _handle(self, frames: list[bytes]) -> None:
        if len(frames) < 2:
            return self._bad_input(f"input message with {len(frames)} frame(s)")
        kind, payload = frames[0], frames[1]
        if kind == wire.ADD:
            try:
                req = wire.decode_add(payload)
            except Exception as exc:  # msgspec.ValidationError / DecodeError, as in vLLM
                return self._bad_input(f"undecodable ADD request: {exc}")
            if not 0 <= req.client_index < len(self.outputs):
                raise EngineDied(f"request {req.request_id!r}: client_index {req.client_index}")
            try:
                error_item = self.scheduler.add(req, time.monotonic())
            except FatalEngineError as exc:
                raise EngineDied(str(exc)) from exc
            except Exception:  # e.g. a malformed sim_* script: a request-scoped error
                logger.exception("Unexpected error pre-processing request %s", req.request_id)
                error_item = wire.output_item(self.layout, req.request_id, [], wire.FINISH_ERROR)
            if error_item is not None:
                self._send(
                    req.client_index,
                    wire.pack_outputs(self.config.engine_index, [error_item], time.monotonic()),
                )
        elif kind == wire.ABORT:
            try:
                ids = wire.decode_generic(payload)
            except Exception as exc:
                return self._bad_input(f"undecodable ABORT: {exc}")
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise EngineDied(f"ABORT payload is not a list of request ids: {ids!r}")
            self.scheduler.abort(ids)
        elif kind == wire.UTILITY:
            try:
                client, call_id, method, args = wire.decode_generic(payload)
            except Exception as exc:
                return self._bad_input(f"malformed UTILITY message: {exc}")
            self._utility(client, call_id, method, args)
        elif kind == wire.START_DP_WAVE:
            logger.error("Unrecognized input request type encountered: START_DP_WAVE")
        else:
            self._bad_input(f"{kind!r} is not a valid EngineCoreRequestType")

    def _bad_input(self, reason: str) -> None:
        """A message vLLM's input thread would die on."""
        if self.config.on_bad_request == "deaf":
            logger.error("input thread failed (%s): no longer reading requests", reason)
            self.deaf = True
            return
        raise EngineDied(reason)

    # ------------------------------------------------------------------ utilities

    def _utility(self, client: Any, call_id: Any, method: Any, args: Any) -> None:
        if not isinstance(client, int) or not 0 <= client < len(self.outputs):
            raise EngineDied(f"utility call for client {client!r}")
        handler = _UTILITIES.get(method) if isinstance(method, str) else None
        failure: str | None = None
        result: Any = None
        if handler is None:
            failure = (
                f"Call to {method} method failed: "
                f"'EngineCoreProc' object has no attribute '{method}'"
            )
        else:
            try:
                result = handler(self, *(args or ()))
            except Exception as exc:
                failure = f"Call to {method} method failed: {exc}"
        out = wire.utility_output(call_id, failure, result)
        self._send(
            client,
            wire.pack_outputs(self.config.engine_index, [], time.monotonic(), utility_output=out),
        )


def _set_weight_version(engine: SimEngine, version: str) -> None:
    engine.weight_version = version


def _unsupported(name: str):
    def handler(engine: SimEngine, *args: Any) -> Any:
        raise NotImplementedError(f"{name} is not supported by the simulated engine")

    return handler


# Utility methods the simulated engine answers; their results match EngineCore's.
_UTILITIES: dict[str, Any] = {
    "get_supported_tasks": lambda e: ["embed", "token_embed"] if e.config.runner == "pooling" else ["generate"],
    "is_sleeping": lambda e: False,
    "is_scheduler_paused": lambda e: False,
    "reset_prefix_cache": lambda e, reset_running_requests=False, reset_connector=False: (
        e.scheduler.reset_prefix_cache()
    ),
    "reset_mm_cache": lambda e: None,
    "reset_encoder_cache": lambda e: None,
    "list_loras": lambda e: [],
    "execute_dummy_batch": lambda e: None,
    "profile": lambda e, *args: None,
    "get_weight_version": lambda e: e.weight_version,
    "set_weight_version": _set_weight_version,
    "collective_rpc": _unsupported("collective_rpc"),
}
