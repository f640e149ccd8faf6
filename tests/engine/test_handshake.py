"""HandshakeServer against engines that run vLLM's own handshake code."""

from __future__ import annotations

import threading
import time

import msgspec
import pytest
import zmq
from vllm.config import ParallelConfig
from vllm.v1.engine.core import EngineCoreProc

from vllm_pyfrontend.engine.handshake import HandshakeError, HandshakeServer, init_message

INPUTS = ["ipc:///tmp/fe-test-in-0", "ipc:///tmp/fe-test-in-1"]
OUTPUTS = ["ipc:///tmp/fe-test-out-0", "ipc:///tmp/fe-test-out-1"]


class FakeEngine(threading.Thread):
    """Runs `EngineCoreProc.startup_handshake` (vLLM's code), then sends READY."""

    def __init__(self, address: str, index: int, *, delay_ready: float = 0.0,
                 hello_delay: float = 0.0, parallel_config: ParallelConfig | None = None):
        super().__init__(daemon=True)
        self.address, self.index = address, index
        self.delay_ready, self.hello_delay = delay_ready, hello_delay
        self.parallel_config = parallel_config
        self.addresses = None
        self.error: BaseException | None = None

    def run(self) -> None:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, self.index.to_bytes(2, "little"))
        sock.setsockopt(zmq.LINGER, 1000)
        try:
            time.sleep(self.hello_delay)
            sock.connect(self.address)
            self.addresses = EngineCoreProc.startup_handshake(
                sock, local_client=True, headless=False, parallel_config=self.parallel_config)
            time.sleep(self.delay_ready)
            sock.send(msgspec.msgpack.encode({"status": "READY", "local": True, "headless": False}))
        except BaseException as e:  # pragma: no cover - surfaced by the test
            self.error = e
        finally:
            sock.close()
            ctx.term()


def test_two_engines_interleaved():
    with HandshakeServer("tcp://127.0.0.1:0") as server:
        assert server.address.startswith("tcp://127.0.0.1:") and not server.address.endswith(":0")
        # Engine 1 says HELLO late; engine 0 finishes in between.
        e0 = FakeEngine(server.address, 0, delay_ready=0.05)
        e1 = FakeEngine(server.address, 1, hello_delay=0.2)
        e0.start(), e1.start()
        ready = server.run(engine_indices=[0, 1], inputs=INPUTS, outputs=OUTPUTS, timeout=10)
        e0.join(5), e1.join(5)
    assert e0.error is None and e1.error is None
    assert sorted(ready) == [0, 1]
    assert ready[0]["status"] == "READY" and ready[0]["local"] is True
    for e in (e0, e1):
        assert e.addresses.inputs == INPUTS and e.addresses.outputs == OUTPUTS
        assert e.addresses.coordinator_input is None and e.addresses.coordinator_output is None
        assert e.addresses.frontend_stats_publish_address is None


def test_parallel_config_reaches_engine(tmp_path):
    pc = ParallelConfig()
    with HandshakeServer(f"ipc://{tmp_path}/hs") as server:
        e = FakeEngine(server.address, 3, parallel_config=pc)
        e.start()
        server.run(engine_indices=[3], inputs=INPUTS[:1], outputs=OUTPUTS[:1], timeout=10,
                   parallel_config={"data_parallel_master_port": 31234})
        e.join(5)
    assert e.error is None
    assert pc.data_parallel_master_port == 31234


def test_init_message_matches_vllm_metadata():
    from vllm.v1.engine.utils import EngineHandshakeMetadata, EngineZmqAddresses

    ours = init_message(INPUTS, OUTPUTS)
    theirs = msgspec.msgpack.encode(EngineHandshakeMetadata(
        addresses=EngineZmqAddresses(inputs=INPUTS, outputs=OUTPUTS), parallel_config={}))
    assert msgspec.msgpack.decode(ours) == msgspec.msgpack.decode(theirs)


def test_timeout_names_missing_engines():
    with HandshakeServer("tcp://127.0.0.1:0") as server:
        e = FakeEngine(server.address, 0)
        e.start()
        with pytest.raises(TimeoutError, match=r"no HELLO from engine\(s\) \[1\]"):
            server.run(engine_indices=[0, 1], inputs=INPUTS, outputs=OUTPUTS, timeout=0.5)
        e.join(5)


def test_dead_engine_aborts_wait():
    with HandshakeServer("tcp://127.0.0.1:0") as server:
        t = time.monotonic()
        with pytest.raises(HandshakeError, match="exited"):
            server.run(engine_indices=[0], inputs=INPUTS, outputs=OUTPUTS, timeout=30,
                       is_alive=lambda: time.monotonic() - t < 0.3)
        assert time.monotonic() - t < 2


def test_unexpected_engine_is_an_error():
    with HandshakeServer("tcp://127.0.0.1:0") as server:
        e = FakeEngine(server.address, 7)
        e.start()
        with pytest.raises(HandshakeError, match="unexpected engine 7"):
            server.run(engine_indices=[0], inputs=INPUTS, outputs=OUTPUTS, timeout=5)
