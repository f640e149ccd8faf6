"""A worker's batch runner stops when it is closed, whatever its loop is doing: here the one
moment where a cancel could be lost, a wake arriving in the loop iteration `close` cancels in.
The runner works on the real SQLite stores, with no batch in them."""

from __future__ import annotations

import asyncio

from vllm_pyfrontend.serving.batch_runner import BatchRunner, RunnerSettings
from vllm_pyfrontend.store.batches import open_batch_store
from vllm_pyfrontend.store.files import FileContents, open_file_store


async def _never_called(url, body, tenant):
    raise AssertionError("no line to run")


def test_close_stops_the_loop_when_a_wake_comes_with_the_cancel(tmp_path):
    async def main():
        files_dir = str(tmp_path)
        runner = BatchRunner(batches=open_batch_store(None, files_dir), files=open_file_store(None, files_dir),
                             contents=FileContents(files_dir), call=_never_called,
                             settings=RunnerSettings(poll_s=30.0))
        runner.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not runner._wake._waiters:  # its first pass over the stores done, it waits
            assert loop.time() < deadline, "the runner never came to wait for work"
            await asyncio.sleep(0.01)
        runner.wake()  # the wait ends in the same iteration as close()'s cancel lands
        closing = asyncio.ensure_future(runner.close())
        done, _ = await asyncio.wait({closing}, timeout=5)
        if not done:  # (cancel the loop again so that the test itself ends)
            runner._main.cancel()
            await asyncio.wait({closing}, timeout=5)
        assert done, "close() did not stop the runner's loop"
        assert runner._main.cancelled()

    asyncio.run(main())


class _SwallowingStore:
    """The SQLite batch store, but its status counts swallow the first cancel that lands while
    they wait (as redis-py's asyncio client can, for a cancel that lands while it reads a reply)."""

    def __init__(self, inner):
        self.inner = inner
        self.waiting = asyncio.Event()
        self.swallowed = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def counts_by_status(self):
        self.waiting.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if self.swallowed:
                raise
            self.swallowed = True
        return {}


def test_close_stops_the_loop_when_the_store_swallows_the_cancel(tmp_path):
    async def main():
        files_dir = str(tmp_path)
        store = _SwallowingStore(open_batch_store(None, files_dir))
        runner = BatchRunner(batches=store, files=open_file_store(None, files_dir),
                             contents=FileContents(files_dir), call=_never_called,
                             settings=RunnerSettings(poll_s=0.05))
        runner.start()
        await asyncio.wait_for(store.waiting.wait(), 10)
        closing = asyncio.ensure_future(runner.close())
        done, _ = await asyncio.wait({closing}, timeout=5)
        assert store.swallowed and done, "close() did not stop the runner's loop"
        assert runner._main.done()

    asyncio.run(main())
