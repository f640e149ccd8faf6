"""vLLM's own Python server and this frontend, each in front of its own real EngineCore on CPU
with the same tiny model and flags: the two sides of every differential test.

`tiny_pair` (tests/conftest.py) starts one such pair per test session for the plain chat model
(`start_session_pair`), with the route families that are off by default turned on and this
frontend's gRPC service; modules that need other engine flags (LoRA, pooling models), another
model, or engines of their own (tests/e2e/test_scale_out_and_admin.py, whose route walk sleeps,
pauses and aborts everything) start their own with `start_pair`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from tests.e2e.tiny_model import ENGINE_ARGS, build_tiny_model
from tests.stack import REPO, Stack, free_port, stop_process_group

MODEL = "tiny"

# The session pair's route flags, on both sides: vLLM's scale-out routes (generate, render,
# derender), /tokenizer_info, and the development routes (sleep, pause, collective_rpc, ...). They
# add routes and change no answer of the routes that are on by default. The one pair started
# without them is tests/e2e/test_lora.py's, which checks that they are off by default.
SESSION_FLAGS = ["--enable-scale-out", "--enable-tokenizer-info-endpoint"]
SESSION_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


class VLLMServer:
    """vLLM's own `vllm serve` (its Python frontend + its own EngineCore) as a subprocess."""

    def __init__(self, model: str, args: list[str] | None = None, env: dict | None = None):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # `--grpc`: vLLM's gRPC server (VllmEngine) on --port instead of HTTP.
        self.grpc = "--grpc" in (args or [])
        self.grpc_target = f"127.0.0.1:{self.port}"
        argv = ["serve", model, "--port", str(self.port), "--host", "127.0.0.1", *(args or [])]
        code = f"from vllm_pyfrontend.supervisor.vllm_headless import run_vllm_cli; run_vllm_cli({argv!r})"
        self.log_path = os.path.join(REPO, ".cache", f"vllm-frontend-{self.port}.log")
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **(env or {})})

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited: see {self.log_path}")
            if self.grpc:
                if _grpc_serving(self.grpc_target):
                    return
            else:
                try:
                    if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.5)
        raise TimeoutError(f"vllm serve not healthy after {timeout}s: see {self.log_path}")

    def stop(self) -> None:
        stop_process_group(self.proc, 30)
        self.log.close()


def _grpc_serving(target: str) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as ch:
        try:
            r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2)
        except grpc.RpcError:
            return False
    return r.status == health_pb2.HealthCheckResponse.SERVING


@dataclass
class Pair:
    ours: str  # base URL of this frontend
    vllm: str  # base URL of vLLM's Python server
    stack: Stack
    vllm_server: VLLMServer
    exit_code: int | None = None  # our supervisor's exit code after the graceful stop at the end
    grpc_target: str | None = None  # host:port of this frontend's gRPC service (--grpc-port), if on


@contextlib.contextmanager
def start_pair(model: str | None = None, *, args: list[str] | None = None, our_args: list[str] | None = None,
               vllm_args: list[str] | None = None, env: dict | None = None,
               workers: int = 2) -> Iterator[Pair]:
    """Both servers on `model` (default: the tiny chat model) with the same engine flags
    (`args`, default ENGINE_ARGS + --served-model-name tiny); `our_args` / `vllm_args` are
    flags for one side only. Both engines start at once; each is stopped on exit."""
    model = model or build_tiny_model()
    common = args if args is not None else ["--served-model-name", MODEL, *ENGINE_ARGS]
    vllm = VLLMServer(model, [*common, *(vllm_args or [])], env=env)
    ours = None
    try:
        ours = Stack(["--workers", str(workers), "--shutdown-timeout", "5", *common, *(our_args or []), model],
                     ready_timeout=600, env=env)
        vllm.wait(600)
        pair = Pair(ours.base_url, vllm.base_url, ours, vllm)
        yield pair
    finally:
        if ours is not None:
            code = ours.terminate(120)
            if "pair" in locals():
                pair.exit_code = code
        vllm.stop()


@contextlib.contextmanager
def start_session_pair() -> Iterator[Pair]:
    """The session's pair (`tiny_pair`): the tiny chat model as `tiny` with SESSION_FLAGS and
    SESSION_ENV on both sides, and this frontend's gRPC service on a port of its own
    (`pair.grpc_target`; tests/e2e/test_grpc_differential.py compares it with vLLM's)."""
    grpc_port = free_port()
    with start_pair(our_args=[*SESSION_FLAGS, "--grpc-port", str(grpc_port)], vllm_args=SESSION_FLAGS,
                    env=SESSION_ENV) as pair:
        pair.grpc_target = f"127.0.0.1:{grpc_port}"
        yield pair
