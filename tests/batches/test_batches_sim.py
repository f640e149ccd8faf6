"""The Files and Batch APIs through the whole stack on the simulated engine (2 workers, two API
keys), with the official `openai` SDK: chat, completions and Responses batches answered as the
same requests online; malformed lines in the error file with their custom_id; OpenAI's list
pagination; file limits and purposes; cancel and expiry mid-batch; the deployment-wide
concurrency bound; admission control refusing lines, which run later; owner scoping (another key's ids are 404); the batch metrics."""

from __future__ import annotations

import io
import time

import httpx
import openai
import pytest

from tests.batches.helpers import by_custom_id, client, entries, line, submit, upload, wait
from tests.stack import Stack

MODEL = "demo:deepseek-v4"
CONCURRENCY = 4


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    files_dir = tmp_path_factory.mktemp("files")
    s = Stack(["--engine", "sim", "--workers", "2", "--sim-step-time", "0.01", "--shutdown-timeout", "3",
               "--api-key", "key-a", "key-b", "--batch-max-concurrency", str(CONCURRENCY),
               "--batch-lease-timeout", "2", "--files-max-bytes", "100000", "--files-dir", str(files_dir),
               # fewer admission slots than batch lines: some lines are refused (503) and run later
               "--max-num-queued-reqs", str(CONCURRENCY - 1), MODEL])
    yield s
    s.terminate()


@pytest.fixture(scope="module")
def a(stack):
    return client(stack.base_url, "key-a")


@pytest.fixture(scope="module")
def b(stack):
    return client(stack.base_url, "key-b")


def _text(n: int) -> dict:
    return {"vllm_xargs": {"sim_text": f"Answer number {n} is here."}}


def test_chat_batch_answers_as_online(a):
    bodies = {f"chat-{i}": {"model": MODEL, "messages": [{"role": "user", "content": f"Question {i}?"}],
                            "max_tokens": 20, "temperature": 0, **_text(i)} for i in range(6)}
    batch = submit(a, "/v1/chat/completions", [line(k, "/v1/chat/completions", v) for k, v in bodies.items()],
                   metadata={"job": "eval"})
    assert batch.status == "validating" and batch.metadata == {"job": "eval"}
    done = wait(a, batch.id)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (6, 6, 0)
    assert done.error_file_id is None and done.in_progress_at and done.finalizing_at and done.completed_at
    out = by_custom_id(entries(a, done.output_file_id))
    assert set(out) == set(bodies)
    for cid, body in bodies.items():
        e = out[cid]
        assert e["id"].startswith("batch_req_") and e["error"] is None
        assert e["response"]["status_code"] == 200 and e["response"]["request_id"] == e["response"]["body"]["id"]
        online = a.chat.completions.create(**{k: v for k, v in body.items() if k != "vllm_xargs"},
                                           extra_body={"vllm_xargs": body["vllm_xargs"]})
        got = e["response"]["body"]
        assert got["object"] == "chat.completion"
        assert got["choices"][0]["message"]["content"] == online.choices[0].message.content
        assert got["choices"][0]["finish_reason"] == online.choices[0].finish_reason
        assert got["usage"]["prompt_tokens"] == online.usage.prompt_tokens
        assert got["usage"]["completion_tokens"] == online.usage.completion_tokens
    output = a.files.retrieve(done.output_file_id)
    assert output.purpose == "batch_output" and output.bytes > 0


def test_completions_and_responses_batches(a):
    comp = submit(a, "/v1/completions", [line(f"c{i}", "/v1/completions", {
        "model": MODEL, "prompt": f"Once upon {i}", "max_tokens": 8, **_text(i)}) for i in range(3)])
    resp = submit(a, "/v1/responses", [line(f"r{i}", "/v1/responses", {
        "model": MODEL, "input": f"Tell me {i}", "max_output_tokens": 16, **_text(i)}) for i in range(3)])
    comp, resp = wait(a, comp.id), wait(a, resp.id)
    assert comp.status == resp.status == "completed"
    for i, (cid, e) in enumerate(sorted(by_custom_id(entries(a, comp.output_file_id)).items())):
        online = a.completions.create(model=MODEL, prompt=f"Once upon {i}", max_tokens=8, extra_body=_text(i))
        assert e["response"]["body"]["choices"][0]["text"] == online.choices[0].text
    for i, (cid, e) in enumerate(sorted(by_custom_id(entries(a, resp.output_file_id)).items())):
        online = a.responses.create(model=MODEL, input=f"Tell me {i}", max_output_tokens=16, extra_body=_text(i))
        body = e["response"]["body"]
        assert body["object"] == "response" and body["status"] == "completed"
        text = "".join(c["text"] for o in body["output"] if o["type"] == "message" for c in o["content"])
        assert text == online.output_text


def test_malformed_lines_go_to_the_error_file(a):
    good = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    lines = [
        line("ok-1", "/v1/chat/completions", good),
        "this is not json",
        {"method": "POST", "url": "/v1/chat/completions", "body": good},  # no custom_id
        line("ok-1", "/v1/chat/completions", good),  # repeated custom_id
        line("wrong-url", "/v1/completions", good),
        line("streams", "/v1/chat/completions", {**good, "stream": True}),
        line("bad-value", "/v1/chat/completions", {**good, "max_tokens": -3}),  # the route's own 400
        line("no-model", "/v1/chat/completions", {**good, "model": "nope"}),  # the route's 404
        line("ok-2", "/v1/chat/completions", good),
    ]
    done = wait(a, submit(a, "/v1/chat/completions", lines).id)
    assert done.status == "completed"
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (9, 2, 7)
    assert set(by_custom_id(entries(a, done.output_file_id))) == {"ok-1", "ok-2"}
    errors = entries(a, done.error_file_id)
    assert len(errors) == 7
    codes = {(e["custom_id"], (e["error"] or {}).get("code")) for e in errors}
    assert (None, "invalid_json") in codes and (None, "missing_custom_id") in codes
    assert ("ok-1", "duplicate_custom_id") in codes and ("wrong-url", "mismatched_endpoint") in codes
    assert ("streams", "invalid_body") in codes
    routed = {e["custom_id"]: e for e in errors if e["response"] is not None}
    assert routed["bad-value"]["response"]["status_code"] == 400 and routed["bad-value"]["error"] is None
    assert "max_tokens" in routed["bad-value"]["response"]["body"]["error"]["message"]
    assert routed["no-model"]["response"]["status_code"] == 404


def test_input_file_that_cannot_run_fails_the_batch(a):
    f = a.files.create(file=("empty.jsonl", io.BytesIO(b"\n\n")), purpose="batch")
    done = wait(a, a.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h").id)
    assert done.status == "failed" and done.failed_at
    assert done.errors.data[0].code == "empty_file"


def test_create_checks(a):
    f = upload(a, [line("x", "/v1/completions", {"model": MODEL, "prompt": "x"})])
    with pytest.raises(openai.BadRequestError, match="endpoint"):
        a.batches.create(input_file_id=f.id, endpoint="/v1/moderations", completion_window="24h")
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        a.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="tomorrow")
    with pytest.raises(openai.NotFoundError):
        a.batches.create(input_file_id="file-doesnotexist", endpoint="/v1/completions", completion_window="24h")


def test_files_routes_limits_and_pagination(a, stack):
    with pytest.raises(openai.BadRequestError, match="purpose"):
        a.files.create(file=("x.jsonl", io.BytesIO(b"{}\n")), purpose="fine-tune")
    with pytest.raises(openai.APIStatusError) as e:
        a.files.create(file=("big.jsonl", io.BytesIO(b"x" * 100001)), purpose="batch")
    assert e.value.status_code == 413
    r = httpx.post(stack.base_url + "/v1/files", headers={"Authorization": "Bearer key-a"}, json={"purpose": "batch"})
    assert r.status_code == 400 and r.json()["error"]["message"]
    ids = [a.files.create(file=(f"p{i}.jsonl", io.BytesIO(b"{}\n")), purpose="batch").id for i in range(3)]
    page = a.files.list(limit=2, purpose="batch")
    assert [f.id for f in page.data] == ids[::-1][:2] and page.has_more
    rest = a.files.list(limit=2, purpose="batch", after=page.data[-1].id)
    assert rest.data[0].id == ids[0]
    assert [f.id for f in a.files.list(order="asc", purpose="batch").data][-3:] == ids
    got = a.files.retrieve(ids[0])
    assert got.filename == "p0.jsonl" and got.bytes == 3 and got.purpose == "batch"
    assert a.files.content(ids[0]).content == b"{}\n"
    assert a.files.delete(ids[0]).deleted
    with pytest.raises(openai.NotFoundError):
        a.files.retrieve(ids[0])


def test_batches_list_pagination(a):
    made = [submit(a, "/v1/completions", [line("x", "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1})]).id
            for _ in range(3)]
    page = a.batches.list(limit=2)
    assert [x.id for x in page.data] == made[::-1][:2] and page.has_more
    assert a.batches.list(limit=1, after=page.data[-1].id).data[0].id == made[0]
    for bid in made:
        wait(a, bid)


def test_another_keys_ids_are_not_found(a, b, stack):
    f = upload(a, [line("x", "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1})])
    batch = a.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h")
    for call in (lambda: b.files.retrieve(f.id), lambda: b.files.content(f.id), lambda: b.files.delete(f.id),
                 lambda: b.batches.retrieve(batch.id), lambda: b.batches.cancel(batch.id),
                 lambda: b.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            call()
    assert all(x.id != batch.id for x in b.batches.list().data)
    assert all(x.id != f.id for x in b.files.list().data)
    done = wait(a, batch.id)
    with pytest.raises(openai.NotFoundError):
        b.files.content(done.output_file_id)
    assert a.files.retrieve(f.id).id == f.id
    with pytest.raises(openai.AuthenticationError):
        client(stack.base_url, "wrong").files.list()


def _slow(n: int) -> list:
    """`n` chat lines of ~0.3 s each on the simulated engine (30 steps of 10 ms)."""
    return [line(f"s{i}", "/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 30,
        "vllm_xargs": {"sim_text": "word " * 40}}) for i in range(n)]


def test_cancel_mid_batch_keeps_the_lines_done(a, stack):
    batch = submit(a, "/v1/chat/completions", _slow(40))
    running = wait(a, batch.id, until=("in_progress",), pred=lambda x: x.request_counts.completed >= 4)
    most = 0
    for _ in range(5):  # the deployment-wide bound holds while it runs
        engines = httpx.get(stack.base_url + "/load").json()["engines"]
        most = max([most] + [e["num_running_reqs"] for e in engines.values()])
        time.sleep(0.05)
    assert most <= CONCURRENCY
    assert a.batches.cancel(running.id).status == "cancelling"
    done = wait(a, batch.id)
    assert done.status == "cancelled" and done.cancelling_at and done.cancelled_at
    out = by_custom_id(entries(a, done.output_file_id))
    assert 4 <= len(out) < 40 and len(out) == done.request_counts.completed
    assert all(e["response"]["status_code"] == 200 for e in out.values())
    assert done.error_file_id is None


def test_completion_window_expiry(a):
    batch = submit(a, "/v1/chat/completions", _slow(40), window="2s")
    done = wait(a, batch.id, timeout=30)
    assert done.status == "expired" and done.expired_at
    out = by_custom_id(entries(a, done.output_file_id))
    errors = by_custom_id(entries(a, done.error_file_id))
    assert set(out) | set(errors) == {f"s{i}" for i in range(40)} and not set(out) & set(errors)
    assert errors and all(e["error"]["code"] == "batch_expired" for e in errors.values())
    assert done.request_counts.failed == len(errors) and done.request_counts.completed == len(out)


def test_metrics(stack, a):
    """The batch families; and the lines went through admission control like online requests
    (refused past `--max-num-queued-reqs` and run again later: every batch above completed)."""
    text = httpx.get(stack.base_url + "/metrics").text
    refused = [x for x in text.splitlines() if x.startswith("vllm:admission_rejections_total")]
    assert refused and sum(float(x.split()[-1]) for x in refused) > 0
    assert 'vllm_frontend_batch_lines_total{result="completed"}' in text
    assert 'vllm_frontend_batches_ended_total{status="completed"}' in text
    assert 'vllm_frontend_batches{status="completed"}' in text
