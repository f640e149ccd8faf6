"""The Responses API's work in one worker beside its routes: the response store (None: storing
is off), the background runs this worker owns and their cancel flags in the store, and the
store's upkeep (a probe at start, this worker's heartbeat while it holds records in progress,
and sweeps that fail the in-progress records of workers gone)."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from typing import Any

from aiohttp import web

from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.request_pipeline import RequestRun
from vllm_pyfrontend.store import HEARTBEAT_S, ResponseStore, StoreUnavailable

log = logging.getLogger(__name__)
CANCEL_POLL_S = 0.2
ORPHAN_SWEEP_EVERY = 2  # heartbeat periods between two sweeps for records of workers gone
ORPHAN_MESSAGE = ("The worker running this response is gone (it exited or stopped answering); "
                  "the response did not finish.")


def mark_orphan(record: dict[str, Any]) -> dict[str, Any]:
    """An in-progress record whose worker is gone, as it is stored from then on."""
    response = record.get("response") or {}
    return {**record, "response": {**response, "status": "failed",
                                   "error": {"code": "server_error", "message": ORPHAN_MESSAGE}}}


def store_error(e: StoreUnavailable) -> APIError:
    return APIError(503, f"The response store is unavailable: {e}", None, "ServiceUnavailableError")


def store_key(owner: str, response_id: str) -> str:
    """Where a response is kept: its id in its owner's namespace, so two tenants may use the
    same client `request_id` and neither learns the other's exists (an owner "", a deployment
    without keys: the id itself)."""
    return f"{owner}\x1f{response_id}" if owner else response_id


class Responses:
    """Per worker: the store (None: storing is off), the background runs this worker owns (for
    cancels), and the records it holds in progress in the store (for its heartbeat), all by
    store key (`store_key`)."""

    def __init__(self, store: ResponseStore | None):
        self.store = store
        self.worker_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self.background: dict[str, RequestRun] = {}
        self.cancelled: set[str] = set()
        self.running: set[str] = set()  # ids stored in progress by this worker
        self.tasks: set[asyncio.Task] = set()
        self._watcher: asyncio.Task | None = None
        self._keeper: asyncio.Task | None = None

    def start(self) -> None:
        if self.store is not None:
            self._keeper = asyncio.get_running_loop().create_task(self._keep())

    def own(self, response_id: str, run: RequestRun) -> None:
        self.background[response_id] = run
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    def cancel_local(self, response_id: str) -> bool:
        run = self.background.get(response_id)
        if run is None:
            return False
        self.cancelled.add(response_id)
        run.cancel()
        return True

    async def _watch(self) -> None:
        """Poll the store's cancel flags of the background runs this worker owns."""
        assert self.store is not None
        while self.background:
            await asyncio.sleep(CANCEL_POLL_S)
            try:
                flagged = await self.store.cancel_requested(list(self.background))
            except Exception:  # noqa: BLE001 - a store hiccup delays a cancel, never fails a run
                log.warning("could not read cancel flags: %s", self.store.degraded)
                continue
            for rid in flagged:
                self.cancel_local(rid)

    async def _keep(self) -> None:
        """The store's upkeep in this worker: at once a probe (so /health tells a broken store
        right after a start), then every HEARTBEAT_S this worker's heartbeat while it holds
        records in progress (a probe while the store is degraded), and now and then a sweep
        that fails the in-progress records of workers gone."""
        store = self.store
        assert store is not None
        beats = 0
        try:
            await store.probe()
        except StoreUnavailable as e:
            log.error("the response store is unavailable: %s (stored responses answer 503; "
                      "everything else serves)", e)
        except Exception:  # noqa: BLE001 - upkeep never ends the worker
            log.exception("response store probe failed")
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            beats += 1
            try:
                if self.running:
                    await store.heartbeat(self.worker_id)
                elif store.degraded is not None:
                    await store.probe()
                if beats % ORPHAN_SWEEP_EVERY == 0:
                    failed = await store.fail_orphans(mark_orphan)
                    if failed:
                        log.warning("marked %d response(s) of workers gone as failed: %s", len(failed),
                                    ", ".join(failed))
            except StoreUnavailable:
                pass  # (store.degraded says why; /health shows it)
            except Exception:  # noqa: BLE001
                log.exception("response store upkeep failed")

    async def close(self) -> None:
        for task in (self._watcher, self._keeper):
            if task is not None:
                task.cancel()
        for task in list(self.tasks):
            task.cancel()
        if self.store is not None:
            await self.store.close()


RESPONSES = web.AppKey("responses", Responses)
"""The worker's stored responses and the background runs it owns."""


def store_degraded(app: web.Application) -> str | None:
    """Why the response store's last operation failed (None: fine, or storing is off)."""
    responses = app.get(RESPONSES)
    store = responses.store if responses is not None else None
    return store.degraded if store is not None else None
