"""What one request's send to the engine costs the sending thread, alone and in a batch.

    .venv/bin/python bench/zmq_send.py [--sends 1000] [--gap-ms 2]

The engine client's input socket is a ZMQ ROUTER; the engine's DEALER is another process
(here a reader that only receives). A send hands the message to ZMQ's I/O thread; when that
thread is asleep (nothing sent for a while: the usual case between requests) the send wakes
it, and the sending thread pays for the wake-up. Measured here, in the sending thread's CPU
time (`time.thread_time`), per message of three frames (identity, kind, a 2 KB payload):

- `alone`: one send after a busy gap of `--gap-ms` (the CPU stays hot, the I/O thread sleeps);
- `batch`: sends back to back (the I/O thread is awake for all but the first).

The engine client sends the requests of one event-loop iteration together for this reason
(`frontend/engine/sending.py`, `Outbox.flush`).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import zmq


def _engine(address: str, count: int) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, b"\x00\x00")
    sock.connect(address)
    sock.send(b"ready")
    for _ in range(count):
        sock.recv_multipart()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sends", type=int, default=1000)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    args = ap.parse_args()
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    router.setsockopt(zmq.SNDHWM, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    reader = mp.Process(target=_engine, args=(f"tcp://127.0.0.1:{port}", 2 * args.sends))
    reader.start()
    identity, _ = router.recv_multipart()
    payload = os.urandom(2000)
    more, last = int(zmq.SNDMORE | zmq.NOBLOCK), int(zmq.NOBLOCK)
    send = router.send
    for name, gap in (("alone", args.gap_ms / 1000), ("batch", 0.0)):
        spent = 0.0
        for _ in range(args.sends):
            if gap:
                end = time.perf_counter() + gap
                while time.perf_counter() < end:
                    pass
            t0 = time.thread_time()
            send(identity, more)
            send(b"\x00", more)
            send(payload, last)
            spent += time.thread_time() - t0
        print(f"{name}: {spent / args.sends * 1e6:.1f} µs of the sending thread's CPU per send")
    reader.join()


if __name__ == "__main__":
    main()
