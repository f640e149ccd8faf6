"""Two replicas (two supervisors on the simulated engine, one worker each) sharing one Redis
store and one files directory: a batch created on one is run by both (the concurrency bound counts the running
leases of both, each replica runs its fair part), every line answered exactly once; either replica answers for it; a
cancel sent to the other replica stops it; another key's ids are 404 on both."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.batches.helpers import by_custom_id, client, entries, line, submit, wait
from tests.stack import Stack

MODEL = "demo:deepseek-v4"


@pytest.fixture(scope="module")
def replicas(redis_url, tmp_path_factory):
    files_dir = tmp_path_factory.mktemp("shared-files")
    args = ["--engine", "sim", "--workers", "1", "--sim-step-time", "0.01", "--shutdown-timeout", "2",
            "--api-key", "key-a", "key-b", "--response-store", redis_url, "--files-dir", str(files_dir),
            "--batch-max-concurrency", "4", "--batch-lease-timeout", "2", MODEL]
    one = Stack(args)
    try:
        two = Stack(args)
    except BaseException:
        one.terminate()
        raise
    yield one, two
    one.terminate()
    two.terminate()


def _lines(n: int, tokens: int = 10) -> list:
    return [line(f"s{i}", "/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": tokens,
        "vllm_xargs": {"sim_text": "word " * 40}}) for i in range(n)]


def test_replicas_share_a_batch(replicas):
    one, two = (client(s.base_url, "key-a") for s in replicas)
    batch = submit(one, "/v1/chat/completions", _lines(24))
    done = wait(two, batch.id)
    assert done.status == "completed" and done.request_counts.completed == 24
    out = by_custom_id(entries(two, done.output_file_id))
    assert set(out) == {f"s{i}" for i in range(24)}
    # both replicas ran lines (each its fair part of the bound), each line counted once, by the
    # replica whose answer was recorded
    counts = [sum(float(x.split()[-1]) for x in httpx.get(s.base_url + "/metrics").text.splitlines()
                  if x.startswith('vllm_frontend_batch_lines_total{result="completed"}')) for s in replicas]
    assert all(c > 0 for c in counts) and sum(counts) == 24, counts
    assert one.batches.retrieve(batch.id).status == "completed"


def test_cancel_on_the_other_replica(replicas):
    one, two = (client(s.base_url, "key-a") for s in replicas)
    batch = submit(one, "/v1/chat/completions", _lines(40, tokens=30))
    wait(one, batch.id, until=("in_progress",), pred=lambda b: b.request_counts.completed >= 4)
    assert two.batches.cancel(batch.id).status == "cancelling"
    done = wait(one, batch.id)
    assert done.status == "cancelled"
    out = by_custom_id(entries(one, done.output_file_id))
    assert 4 <= len(out) < 40 and len(out) == done.request_counts.completed


def test_owner_scoping_across_replicas(replicas):
    a = client(replicas[0].base_url, "key-a")
    b = client(replicas[1].base_url, "key-b")
    batch = submit(a, "/v1/chat/completions", _lines(1))
    with pytest.raises(openai.NotFoundError):
        b.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        b.files.retrieve(batch.input_file_id)
    wait(a, batch.id)
