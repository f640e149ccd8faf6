"""Aborts owed to the engines, and the request ids aborted here lately.

An abort is queued and goes out with the other messages of its loop iteration (`Outbox.flush`):
one ABORT message per engine, whatever the number of requests. The engine sends nothing back
for it, but outputs it had already sent still arrive: the ids aborted lately are remembered
so that those are dropped quietly instead of being taken for orphans (outputs nobody here
waits for, which are aborted in turn, see `Delivery`).
"""

from __future__ import annotations

import logging

from .connection import Connection
from .types import EngineDeadError
from .wire import REQUEST_ABORT, encode_abort

log = logging.getLogger(__name__)

# Ids aborted here are remembered for this many aborts at least (two generations of sets).
_RECENT_ABORTS = 8192


class Aborts:
    """`pending`: engine -> request ids to abort there at the next flush."""

    def __init__(self, connection: Connection):
        self._connection = connection
        self.pending: dict[int, list[str]] = {}
        self._recent: set[str] = set()
        self._old: set[str] = set()

    def queue(self, engine: int, rid: str) -> None:
        self.pending.setdefault(engine, []).append(rid)
        recent = self._recent
        recent.add(rid)
        if len(recent) >= _RECENT_ABORTS:
            self._old = recent
            self._recent = set()

    def was_aborted(self, rid: str) -> bool:
        """Aborted here lately: a late output of it is expected, and dropped."""
        return rid in self._recent or rid in self._old

    def flush(self, send: bool) -> None:
        """Send the pending aborts (`send`), or forget them: engines that are dead have nothing
        to abort."""
        pending, self.pending = self.pending, {}
        if not send:
            return
        for engine, ids in pending.items():
            try:
                self._connection.send(engine, REQUEST_ABORT, encode_abort(ids))
            except EngineDeadError as e:
                log.warning("could not abort %d request(s) on engine %d: %s", len(ids), engine, e)
