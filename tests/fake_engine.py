"""Test helper: the two sockets an engine opens to a frontend's listeners, as vLLM's
EngineCoreProc does (DEALER in with its 2-byte identity, PUSH out)."""

from __future__ import annotations

import zmq


def engine_sockets(ctx: zmq.Context, index: int, input_address: str, output_address: str) -> tuple[zmq.Socket, zmq.Socket]:
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, index.to_bytes(2, "little"))
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(input_address)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(output_address)
    return dealer, push
