"""The worker's gRPC server: `grpc.aio` on the worker's own (uvloop) event loop, every worker
bound to the same port with SO_REUSEPORT (the kernel spreads connections over them, as for
HTTP), serving VllmEngine, grpc.health.v1 and server reflection."""

from __future__ import annotations

import logging
from typing import Any

import grpc
from grpc_health.v1 import health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from smg_grpc_proto import vllm_engine_pb2_grpc as pb_grpc

from vllm_pyfrontend.api.grpc.servicer import (
    SERVICE_NAME, HealthServicer, VllmEngineServicer, key_entry, metadata_of,
)

log = logging.getLogger(__name__)

# vLLM's own server options (vllm/entrypoints/launchers/grpc_server.py): no message size
# limits, and pings from a gateway's keepalive are never counted as abuse while a
# non-streaming Generate writes nothing.
SERVER_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", 10000),
    ("grpc.keepalive_permit_without_calls", True),
    ("grpc.so_reuseport", 1),
]


class KeyCheck(grpc.aio.ServerInterceptor):
    """With API keys (`--api-key` or `--api-keys-file`), every call of the engine service
    presents one as HTTP does (`authorization: Bearer <key>` or `x-api-key` metadata);
    without one it is refused UNAUTHENTICATED before its handler runs. Health and reflection
    stay open, as /health does."""

    def __init__(self, keys: Any):
        self.keys = keys

    async def intercept_service(self, continuation, details):
        if not details.method.startswith(f"/{SERVICE_NAME}/"):
            return await continuation(details)
        if key_entry(self.keys, metadata_of(details.invocation_metadata)) is None:
            return _DENIED
        return await continuation(details)


async def _deny(request, context):
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "Unauthorized: a valid API key is required.")


_DENIED = grpc.unary_unary_rpc_method_handler(_deny)


class GrpcFrontend:
    def __init__(self, state: Any, host: str, port: int):
        self.state = state
        interceptors = [KeyCheck(state.keys)] if state.keys is not None else []
        self.server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=interceptors)
        self.servicer = VllmEngineServicer(state)
        pb_grpc.add_VllmEngineServicer_to_server(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(state), self.server)
        reflection.enable_server_reflection((SERVICE_NAME, "grpc.health.v1.Health", reflection.SERVICE_NAME),
                                            self.server)
        address = f"{host}:{port}" if host and host not in ("::",) else f"[::]:{port}"
        if host and ":" in host and not host.startswith("["):
            address = f"[{host}]:{port}"
        self.address = address
        self.port = self.server.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"gRPC: cannot bind {address}")

    async def start(self) -> None:
        await self.server.start()
        log.info("gRPC (vllm.grpc.engine.VllmEngine) on %s", self.address)

    async def stop(self, grace: float) -> None:
        await self.server.stop(grace)
