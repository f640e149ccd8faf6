"""An OTLP/gRPC trace receiver on loopback, for the tests that check the spans a stack exports."""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Iterator
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.stack import free_port


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self):
        self.spans: queue.Queue = queue.Queue()

    def Export(self, request, context):  # noqa: N802 - the gRPC method name
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    self.spans.put(span)
        return trace_service_pb2.ExportTraceServiceResponse()

    def drain(self) -> None:
        """Forget the spans received so far."""
        while True:
            try:
                self.spans.get_nowait()
            except queue.Empty:
                return


@contextlib.contextmanager
def otlp_receiver() -> Iterator[tuple[str, Receiver]]:
    """(the endpoint to give `--otlp-traces-endpoint`, the receiver), while the block runs."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = Receiver()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", servicer
    finally:
        server.stop(0)
