"""Batches survive what a deployment goes through (simulated engine, a real supervisor with 2
workers): a worker SIGKILLed mid-batch (its lines run again once their lease expires, on the
other worker or its restarted successor) and the whole supervisor restarted mid-batch on the same
`--files-dir` (the draining workers give their lines back; the new deployment finishes the
batch). Either way every line is answered exactly once in the output file."""

from __future__ import annotations

import os
import signal

from tests.batches.helpers import by_custom_id, client, entries, line, submit, wait
from tests.reliability.helpers import workers_of
from tests.stack import Stack

MODEL = "demo:deepseek-v4"
N = 40


def _args(files_dir) -> list[str]:
    return ["--engine", "sim", "--workers", "2", "--sim-step-time", "0.01", "--shutdown-timeout", "2",
            "--batch-max-concurrency", "4", "--batch-lease-timeout", "1.5", "--files-dir", str(files_dir), MODEL]


def _lines() -> list:
    """N chat lines of ~0.3 s each (30 engine steps of 10 ms)."""
    return [line(f"s{i}", "/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 30,
        "vllm_xargs": {"sim_text": "word " * 40}}) for i in range(N)]


def _check_exactly_once(c, batch_id: str) -> None:
    done = wait(c, batch_id, timeout=120)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (N, N, 0)
    out = by_custom_id(entries(c, done.output_file_id))  # (fails on a line answered twice)
    assert set(out) == {f"s{i}" for i in range(N)}
    assert all(e["response"]["status_code"] == 200 for e in out.values())
    assert done.error_file_id is None


def test_worker_sigkilled_mid_batch(tmp_path):
    with Stack(_args(tmp_path)) as stack:
        c = client(stack.base_url)
        batch = submit(c, "/v1/chat/completions", _lines())
        wait(c, batch.id, until=("in_progress",), pred=lambda b: b.request_counts.completed >= 6)
        workers = workers_of(stack)
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        # The supervisor restarts it; meanwhile its lines' leases expire and run again.
        stack.wait_for(lambda: len(workers_of(stack)) == 2 and workers[0] not in workers_of(stack), 60,
                       "the killed worker's successor")
        _check_exactly_once(c, batch.id)


def test_supervisor_restarted_mid_batch(tmp_path):
    first = Stack(_args(tmp_path))
    try:
        c = client(first.base_url)
        batch = submit(c, "/v1/chat/completions", _lines())
        mid = wait(c, batch.id, until=("in_progress",), pred=lambda b: b.request_counts.completed >= 6)
        assert mid.request_counts.completed < N
    finally:
        assert first.terminate() == 0
    with Stack(_args(tmp_path)) as second:
        c = client(second.base_url)
        was = c.batches.retrieve(batch.id)
        assert was.status == "in_progress" and was.request_counts.completed < N
        _check_exactly_once(c, batch.id)


def test_supervisor_killed_mid_batch(tmp_path):
    """The whole process group SIGKILLed (no drain): the next deployment takes the lines over
    once their leases expire."""
    first = Stack(_args(tmp_path))
    try:
        c = client(first.base_url)
        batch = submit(c, "/v1/chat/completions", _lines())
        wait(c, batch.id, until=("in_progress",), pred=lambda b: b.request_counts.completed >= 6)
    finally:
        first.stop()
    with Stack(_args(tmp_path)) as second:
        _check_exactly_once(client(second.base_url), batch.id)
