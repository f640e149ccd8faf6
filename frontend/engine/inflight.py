"""The requests in flight on one engine client: each one's sink and engine, and a count per engine.

One table, because several parts change it together: a new request is tracked when it is
queued (`EngineClient.add_request`), its final output forgets it (`Delivery`), an abort forgets
it (`Outbox.abort`), an engine that goes down fails every request it holds (`Health`). The
dicts are plain attributes: the output path looks a sink up once per output, without a call.
"""

from __future__ import annotations

import logging
from typing import Iterable

from .types import EngineRequest, Failure, OutputSink

log = logging.getLogger(__name__)


class InFlight:
    """request id -> sink (`sinks`), request id -> engine (`owner`), engine -> count (`count`),
    and, when requests may move to another engine (engine/migration.py), request id -> the
    engine request as sent (`requests`)."""

    __slots__ = ("sinks", "owner", "count", "requests")

    def __init__(self, engine_indices: Iterable[int]):
        self.sinks: dict[str, OutputSink] = {}
        self.owner: dict[str, int] = {}
        self.count: dict[int, int] = {i: 0 for i in engine_indices}
        self.requests: dict[str, EngineRequest] = {}

    def track(self, rid: str, sink: OutputSink, engine: int) -> None:
        """`rid` is in flight on `engine`: its outputs go to `sink`."""
        self.sinks[rid] = sink
        self.owner[rid] = engine
        self.count[engine] += 1

    def untrack(self, rid: str) -> tuple[int | None, OutputSink | None]:
        """Forget `rid` (its engine and sink, None for what it no longer had)."""
        sink = self.sinks.pop(rid, None)
        engine = self.owner.pop(rid, None)
        self.requests.pop(rid, None)
        if engine is not None:
            self.count[engine] -= 1
        return engine, sink

    def held_by(self, engine: int) -> list[str]:
        """The ids of the requests in flight on `engine`."""
        return [rid for rid, owner in self.owner.items() if owner == engine]

    def drop_engine(self, engine: int) -> list[OutputSink]:
        """Forget every request `engine` holds; their sinks, to be failed."""
        ids = self.held_by(engine)
        sinks = [self.sinks.pop(rid) for rid in ids if rid in self.sinks]
        for rid in ids:
            self.owner.pop(rid, None)
            self.requests.pop(rid, None)
        self.count[engine] = 0
        return sinks

    def drop_all(self) -> list[OutputSink]:
        """Forget every request; their sinks, to be failed."""
        sinks = list(self.sinks.values())
        self.sinks.clear()
        self.owner.clear()
        self.requests.clear()
        for engine in self.count:
            self.count[engine] = 0
        return sinks


def fail_sink(sink: OutputSink, failure: Failure) -> None:
    """End a request without a result. A sink that raises here is logged: the caller goes on to
    the next one."""
    try:
        sink.on_failure(failure)
    except Exception:
        log.exception("output sink failed in on_failure")
