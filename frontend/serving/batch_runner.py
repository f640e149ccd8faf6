"""Running batches inside the deployment: every worker takes its part of the pending work.

Each worker runs one `BatchRunner`. It claims work from the shared store (`store/batches.py`):
batch-level steps (validate a new batch's input file, finalize one that is done, cancelled or
past its window) and request lines: the store bounds the lines running in the whole deployment
by `--batch-max-concurrency`, and each runner's by its fair part of it (the bound over the
runners alive, every worker of every replica), so the lines spread over the deployment. A line runs through the
same route handler as an online request (`call`, given by the API layer: the handler the app
registers for the line's url, with the batch owner's tenant), at the batch's engine priority,
so it is lowered, validated, admitted and answered exactly as online. Its answer is recorded in
the store (only by the holder of the line's lease, once) before anything is written to a file;
the output and error files are assembled from those records when the batch finalizes.

Leases: a worker renews the leases of its running lines every third of `lease_s`; a worker that
dies stops renewing and its lines are claimed again once their lease expires. A stopping worker
(drain) claims nothing new; what is still running when it closes is aborted and given back at
once. Cancel (or expiry) is noticed within `poll_s`: the worker aborts its lines of that batch
(cancelling the handler aborts the engine requests, as a client leaving does) and gives them back
unanswered.

The runner also sweeps the files that expired (`expires_after`, `output_expires_after`) out of
the store and the files' directory every `expire_every_s`: every worker does, a file goes once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from vllm_pyfrontend.errors import APIError

from vllm_pyfrontend.serving.batch_lines import (
    RETRY_STATUSES, InputError, answer_entry, expired_entry, output_too_large_entry, parse_input)
from vllm_pyfrontend.store.batches import BatchStore, Line, Task
from vllm_pyfrontend.store.files import EXPIRE_CHUNK, FileContents, FileRecord, FileStore, expire_files
from vllm_pyfrontend.tenants import Tenant

log = logging.getLogger(__name__)

# call(url, body, tenant) -> (HTTP status, the answer's body object, request id or None)
LineCall = Callable[[str, bytes, Tenant], Awaitable[tuple[int, Any, "str | None"]]]


@dataclass(frozen=True)
class RunnerSettings:
    max_concurrency: int = 32  # lines running in the whole deployment
    lease_s: float = 30.0
    poll_s: float = 0.5
    priority: int = 1
    max_lines: int = 50000
    max_body_bytes: int = 32 * 1024 * 1024
    max_output_bytes: int = 1024 * 1024 * 1024  # one batch's output file at most
    expire_every_s: float = 60.0  # expired files removed this often


class BatchMetricsSink:
    """What the runner reports (the worker's Prometheus families; nothing in tests)."""

    def line_done(self, failed: bool) -> None: ...

    def batch_ended(self, status: str) -> None: ...

    def batches_by_status(self, counts: dict[str, int]) -> None: ...

    def lines_running(self, n: int) -> None: ...


def output_file_ids(batch_id: str) -> tuple[str, str]:
    """The output and error files' ids of a batch: fixed by the batch, so a finalize that is
    redone (its worker died) replaces, never duplicates, them."""
    tail = batch_id.removeprefix("batch_")
    return f"file-{tail}out", f"file-{tail}err"


class BatchRunner:
    def __init__(self, *, batches: BatchStore, files: FileStore, contents: FileContents, call: LineCall,
                 settings: RunnerSettings, draining: Callable[[], bool] = lambda: False,
                 metrics: BatchMetricsSink | None = None,
                 storage_limit: Callable[[str], int | None] = lambda owner: None):
        self.batches = batches
        self.files = files
        self.contents = contents
        self.call = call
        self.settings = settings
        self.draining = draining
        self.metrics = metrics or BatchMetricsSink()
        self.storage_limit = storage_limit  # owner -> the bytes its files may take (None: no bound)
        # Who holds a lease: unique per process and start, so a restarted worker never renews
        # its predecessor's leases.
        self.me = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.running: dict[tuple[str, int], asyncio.Task] = {}
        self._wake = asyncio.Event()
        self._main: asyncio.Task | None = None
        self._closing = False
        # After a line is refused for now (429: the deployment's queue is full; 503): no claims
        # until then, so a full deployment is not asked again at once, line after line.
        self._backoff_until = 0.0

    def start(self) -> None:
        self._main = asyncio.get_running_loop().create_task(self._loop())

    def wake(self) -> None:
        """Look for work now (a batch was created on this worker)."""
        self._wake.set()

    async def close(self) -> None:
        """Stop: abort the lines still running and give them back for another worker."""
        self._closing = True
        if self._main is not None:
            self._main.cancel()
            try:
                await self._main
            except asyncio.CancelledError:
                pass
        keys = list(self.running)
        await self._abort(keys)

    # -- the loop ------------------------------------------------------------------------------
    async def _loop(self) -> None:
        s = self.settings
        last_steps = last_renew = last_expire = 0.0
        # (`_closing` as well as the cancel: redis-py's asyncio client can swallow a cancel that
        # lands while it waits for a reply, and the loop would go on after `close`.)
        while not self._closing:
            now = time.monotonic()
            try:
                if now - last_expire >= s.expire_every_s:
                    last_expire = now
                    await self.expire_files()
                if now - last_renew >= s.lease_s / 3:
                    last_renew = now
                    if self.running:
                        await self.batches.renew(self.me, s.lease_s)
                if now - last_steps >= s.poll_s:
                    last_steps = now
                    await self._check_running_batches()
                    await self._batch_steps()
                if not self.draining():
                    await self._claim_lines()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a store hiccup delays work, never stops the runner
                log.exception("batch runner step failed")
            self.metrics.lines_running(len(self.running))
            try:
                # (Not `asyncio.wait_for`: on Python 3.11 `close`'s cancel is lost there when it
                # lands as a wake comes, and `close` would wait for this loop for ever.)
                async with asyncio.timeout(s.poll_s):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()

    async def expire_files(self, now: float | None = None) -> int:
        """Remove every file expired at `now` (default: the time of the call); how many."""
        n = 0
        while True:
            gone = await expire_files(self.files, self.contents, now=now)
            n += len(gone)
            if len(gone) < EXPIRE_CHUNK:
                return n

    async def _batch_steps(self) -> None:
        for _ in range(8):  # a few per pass: a burst of ended batches does not stall the lines
            task = await self.batches.claim_task(self.me, self.settings.lease_s)
            if task is None:
                break
            if task.kind == "validate":
                await self._validate(task)
            else:
                await self._finalize(task)
        self.metrics.batches_by_status(await self.batches.counts_by_status())

    async def _check_running_batches(self) -> None:
        """Abort this worker's lines of batches that stopped running (cancelled, expired)."""
        ids = sorted({b for b, _ in self.running})
        if not ids:
            return
        statuses = await self.batches.statuses(ids)
        stopped = {b for b in ids if statuses.get(b) != "in_progress"}
        if stopped:
            await self._abort([k for k in self.running if k[0] in stopped])

    async def _abort(self, keys: list[tuple[str, int]]) -> None:
        tasks = [self.running[k] for k in keys if k in self.running]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.batches.release(self.me, keys)

    async def _claim_lines(self) -> None:
        free = self.settings.max_concurrency - len(self.running)
        if free <= 0 or time.monotonic() < self._backoff_until:
            return
        lines = await self.batches.claim_lines(self.me, free, self.settings.max_concurrency, self.settings.lease_s)
        loop = asyncio.get_running_loop()
        for line in lines:
            key = (line.batch_id, line.idx)
            self.running[key] = loop.create_task(self._run_line(line))

    async def _run_line(self, line: Line) -> None:
        key = (line.batch_id, line.idx)
        try:
            try:
                status, body, request_id = await self.call(line.url, line.body, Tenant(line.tenant, line.owner))
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the line is answered with the failure
                log.exception("batch %s line %d failed", line.batch_id, line.idx)
                status, body, request_id = 500, APIError(500, "Internal server error.").body(), None
            if status in RETRY_STATUSES:  # full or unavailable for now: run it again later
                self._backoff_until = time.monotonic() + self.settings.poll_s
                await self.batches.release(self.me, [key])
                return
            answer, failed = answer_entry(line.custom_id, status, body, request_id)
            if await self.batches.complete(self.me, line.batch_id, line.idx, answer, failed):
                self.metrics.line_done(failed)
        finally:
            if self.running.get(key) is asyncio.current_task():
                del self.running[key]
            if not self._closing:
                self._wake.set()

    # -- batch-level steps -----------------------------------------------------------------------
    async def _validate(self, task: Task) -> None:
        b = task.batch
        rec = await self.files.get(b["input_file_id"], task.owner)
        try:
            if rec is None:
                raise InputError("invalid_file", f"The input file `{b['input_file_id']}` does not exist.")
            s = self.settings
            # (off the event loop, read line by line: a large file takes a while to check,
            # interactive requests wait for nothing, and memory follows the requests kept)
            lines = await asyncio.to_thread(_parse_file, self.contents.path(rec.id), b["endpoint"],
                                            max_lines=s.max_lines, max_body_bytes=s.max_body_bytes,
                                            priority=s.priority)
        except InputError as e:
            if await self.batches.fail(b["id"], self.me, [e.entry]):
                self.metrics.batch_ended("failed")
            return
        except OSError as e:
            log.error("batch %s: cannot read its input file: %s", b["id"], e)
            if await self.batches.fail(b["id"], self.me, [InputError("invalid_file", "The input file cannot be read.").entry]):
                self.metrics.batch_ended("failed")
            return
        if await self.batches.start_run(b["id"], self.me, lines):
            for ln in lines:
                if ln.error is not None:
                    self.metrics.line_done(True)
            self._wake.set()

    async def _finalize(self, task: Task) -> None:
        b = task.batch
        batch_id, final = b["id"], task.final_status or "completed"
        if not await self.batches.begin_finalize(batch_id, self.me, final, expired_entry):
            return
        out_id, err_id = output_file_ids(batch_id)
        out = OutputFile(self.contents, out_id)
        err = OutputFile(self.contents, err_id)
        cap = await self._output_cap(task.owner, (out_id, err_id))
        try:
            # The answers a page at a time, each written as it is read: the output is never
            # held whole in memory. Past the output cap an answer becomes an error entry.
            after = -1
            while page := await self.batches.answers(batch_id, after, _PAGE):
                after = page[-1][0]
                await asyncio.to_thread(_write_page, page, out, err, *cap)
            await asyncio.to_thread(out.close)
            await asyncio.to_thread(err.close)
        except BaseException:
            out.discard()
            err.discard()
            raise
        now = time.time()
        expires_at = None if task.output_expires_s is None else int(now) + task.output_expires_s
        ids: list[str | None] = []
        for f, kind in ((out, "output"), (err, "error")):
            if not f.size:
                ids.append(None)
                continue
            await self.files.add(FileRecord(f.file_id, task.owner, "batch_output", f"{batch_id}_{kind}.jsonl",
                                            f.size, now, expires_at))
            ids.append(f.file_id)
        if await self.batches.end_finalize(batch_id, self.me, ids[0], ids[1]):
            self.metrics.batch_ended(final)


    async def _output_cap(self, owner: str, own_files: tuple[str, ...]) -> tuple[int, str]:
        """The bytes the batch's output file may take, and what sets that: the per-batch cap, or
        what is left of the owner's `max_storage_bytes` (its other files counted, not this
        batch's own output of a finalize that is redone)."""
        cap = self.settings.max_output_bytes
        limit = self.storage_limit(owner)
        if limit is not None:
            room = max(0, limit - await self.files.stored_bytes(owner, own_files))
            if room < cap:
                return room, "what is left of this API key's max_storage_bytes"
        return cap, "--batch-max-output-bytes"


_PAGE = 32  # answers read from the store at a time while a batch's output is written (each may be large)


class OutputFile:
    """A batch output file written line by line to a temporary file, published whole on
    `close` (readers see all of it or nothing; nothing when no line was written)."""

    def __init__(self, contents: FileContents, file_id: str):
        self.contents = contents
        self.file_id = file_id
        self.size = 0
        self._temp = contents.temp_path(file_id)
        self._f = None

    def write(self, line: bytes) -> None:
        if self._f is None:
            self._f = open(self._temp, "wb")
        self._f.write(line)
        self._f.write(b"\n")
        self.size += len(line) + 1

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
            self.contents.publish(self._temp, self.file_id)

    def discard(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
        try:
            os.unlink(self._temp)
        except OSError:
            pass


def _write_page(page: list[tuple[int, bool, bytes]], out: OutputFile, err: OutputFile, cap: int,
                limit: str) -> None:
    for _, failed, answer in page:
        if failed:
            err.write(answer)
        elif out.size + len(answer) + 1 <= cap:
            out.write(answer)
        else:
            err.write(output_too_large_entry(answer, cap, limit))


def _parse_file(path: str, endpoint: str, **bounds: int) -> list:
    with open(path, "rb") as f:
        return parse_input(f, endpoint, **bounds)
