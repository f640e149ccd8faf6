"""Engine request ids: unique per process and carrying the worker index.

A duplicate in-flight id kills vLLM's engine, so every id gets a random part; the worker
index lets a router (drop-in path) send outputs back to the owning worker without a table.
"""

from __future__ import annotations

import os
import itertools

_counter = itertools.count()
_process_tag = os.urandom(4).hex()


def _new_process() -> None:
    """A forked process (a worker forked from the worker template, server/preload.py) makes
    its own tag: with its parent's, a restarted worker would reuse its predecessor's ids, and
    a duplicate of a request the engine still runs kills the engine."""
    global _counter, _process_tag
    _counter = itertools.count()
    _process_tag = os.urandom(4).hex()


os.register_at_fork(after_in_child=_new_process)


def make_request_id(prefix: str, worker_index: int) -> str:
    return f"{prefix}-w{worker_index}-{_process_tag}{next(_counter):x}"


def worker_of(request_id: str) -> int | None:
    """The worker index stamped into an id made by make_request_id (None if not ours)."""
    try:
        part = request_id.split("-", 2)[1]
    except IndexError:
        return None
    if not part.startswith("w") or not part[1:].isdigit():
        return None
    return int(part[1:])
