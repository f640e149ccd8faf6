"""The worker's requests in flight: what a graceful drain waits for and what `/load` reports.

A request counts from the moment its scope opens (`serving/scope.py`) until it is released,
whatever ended it; a background response counts until its run ends, not until its HTTP answer
went out. With several workers each one publishes its count in its own slot of a shared file,
so `/load` reports the deployment's total from any worker.
"""

from __future__ import annotations

import asyncio

from vllm_pyfrontend.serving.worker_slots import WorkerSlots


class InFlight:
    def __init__(self, runtime_dir: str, worker_index: int, num_workers: int):
        self.count = 0
        self._slots = (WorkerSlots(runtime_dir, "server_load", worker_index, num_workers)
                       if num_workers > 1 else None)
        self._idle = asyncio.Event()
        self._idle.set()

    def started(self) -> None:
        self.count += 1
        self._idle.clear()
        if self._slots is not None:
            self._slots.set(self.count)

    def finished(self) -> None:
        self.count -= 1
        if self._slots is not None:
            self._slots.set(self.count)
        if self.count == 0:
            self._idle.set()

    def total(self) -> int:
        """In-flight requests of the whole deployment (every worker's)."""
        return self._slots.total() if self._slots is not None else self.count

    async def wait_idle(self, timeout: float) -> bool:
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
            return True
        except TimeoutError:
            return False
