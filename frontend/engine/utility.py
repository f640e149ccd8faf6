"""Utility calls: `EngineCore.<method>(*args)` run in one engine, answered in an output batch.

Each call carries an id; the engine's reply (`utility_output` of a later output batch) names it,
and the output reader hands it to `resolve`. The ids start at a random point: a worker restarted
in the same client slot does not reuse its predecessor's ids, whose replies may still arrive.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

from .connection import Connection
from .wire import REQUEST_UTILITY, encode_utility

log = logging.getLogger(__name__)


class UtilityError(RuntimeError):
    """A utility call that the engine ran and reported as failed."""


class UtilityCalls:
    """The calls sent and not answered yet (`pending`: call id -> future)."""

    def __init__(self, client_index: int, connection: Connection):
        self._client_index = client_index
        self._connection = connection
        self.pending: dict[int, asyncio.Future] = {}
        self._next_id = secrets.randbits(62)

    async def call(self, engine: int, method: str, args: tuple, timeout: float) -> Any:
        """Send the call and wait for its reply (UtilityError when the engine reports a
        failure, TimeoutError after `timeout` seconds)."""
        call_id = self._next_id
        self._next_id = (call_id + 1) & (2**64 - 1)
        fut = asyncio.get_running_loop().create_future()
        self.pending[call_id] = fut
        try:
            self._connection.send(engine, REQUEST_UTILITY,
                                  encode_utility(self._client_index, call_id, method, args))
            return await asyncio.wait_for(fut, timeout)
        finally:
            self.pending.pop(call_id, None)

    def post(self, engine: int, method: str) -> None:
        """Send a call without arguments whose reply nobody waits for: the reply only counts as
        hearing from the engine (the watchdog's probe). Raises EngineDeadError."""
        self._connection.send(engine, REQUEST_UTILITY,
                              encode_utility(self._client_index, self._next_id, method, ()))
        self._next_id = (self._next_id + 1) & (2**64 - 1)

    def resolve(self, utility: tuple[int, str | None, Any]) -> None:
        """An engine's reply: (call id, failure message or None, result)."""
        call_id, failure, result = utility
        fut = self.pending.pop(call_id, None)
        if fut is None or fut.done():
            if failure is not None:
                log.warning("utility call %s failed after its caller left: %s", call_id, failure)
            return
        if failure is not None:
            fut.set_exception(UtilityError(failure))
        else:
            fut.set_result(result)

    def fail_all(self, exc: Exception) -> None:
        futures, self.pending = self.pending, {}
        for fut in futures.values():
            if not fut.done():
                fut.set_exception(exc)
