"""Batches on the real vLLM CPU engine (the tiny chat model, greedy; one engine for the module,
this frontend with 2 workers): the official `openai` SDK uploads a file, creates a batch, polls
and downloads the output, for chat completions, completions and Responses lines; every answer
equals the same request sent online. The engine runs `--scheduling-policy priority`: the lines go
at the batch priority (1), the online requests at the default (0), and greedy answers do not
depend on the order the engine takes them in."""

from __future__ import annotations

import pytest

from tests.batches.helpers import by_custom_id, client, entries, line, submit, wait
from tests.e2e.tiny_model import ENGINE_ARGS, build_tiny_model
from tests.e2e.vllm_pair import MODEL
from tests.stack import Stack

pytestmark = [pytest.mark.real_engine, pytest.mark.on_demand]  # several engine starts: see tests/conftest.py

PROMPTS = ["Write a haiku about the sea.", "What is 2 + 2?", "Name three colours."]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(["--workers", "2", "--shutdown-timeout", "5", "--served-model-name", MODEL, *ENGINE_ARGS,
               "--scheduling-policy", "priority",
               "--files-dir", str(tmp_path_factory.mktemp("files")), build_tiny_model()], ready_timeout=600)
    yield s
    assert s.terminate(120) == 0, s.logs()


def _run(c, endpoint: str, bodies: dict[str, dict]) -> dict[str, dict]:
    batch = submit(c, endpoint, [line(k, endpoint, v) for k, v in bodies.items()])
    done = wait(c, batch.id, timeout=300)
    assert done.status == "completed", (done, entries(c, done.error_file_id))
    assert done.request_counts.completed == len(bodies) and done.request_counts.failed == 0
    out = by_custom_id(entries(c, done.output_file_id))
    assert set(out) == set(bodies) and all(e["response"]["status_code"] == 200 for e in out.values())
    return {k: e["response"]["body"] for k, e in out.items()}


def test_chat_batch_equals_online(stack):
    c = client(stack.base_url)
    bodies = {f"chat-{i}": {"model": MODEL, "messages": [{"role": "user", "content": p}], "max_tokens": 24,
                            "temperature": 0} for i, p in enumerate(PROMPTS)}
    got = _run(c, "/v1/chat/completions", bodies)
    for cid, body in bodies.items():
        online = c.chat.completions.create(**body)
        assert got[cid]["choices"][0]["message"]["content"] == online.choices[0].message.content
        assert got[cid]["choices"][0]["finish_reason"] == online.choices[0].finish_reason
        assert got[cid]["usage"]["completion_tokens"] == online.usage.completion_tokens


def test_completions_batch_equals_online(stack):
    c = client(stack.base_url)
    bodies = {f"comp-{i}": {"model": MODEL, "prompt": p, "max_tokens": 24, "temperature": 0}
              for i, p in enumerate(PROMPTS)}
    got = _run(c, "/v1/completions", bodies)
    for cid, body in bodies.items():
        online = c.completions.create(**body)
        assert got[cid]["choices"][0]["text"] == online.choices[0].text
        assert got[cid]["usage"]["completion_tokens"] == online.usage.completion_tokens


def test_responses_batch_equals_online(stack):
    c = client(stack.base_url)
    bodies = {f"resp-{i}": {"model": MODEL, "input": p, "max_output_tokens": 24, "temperature": 0}
              for i, p in enumerate(PROMPTS)}
    got = _run(c, "/v1/responses", bodies)
    for cid, body in bodies.items():
        online = c.responses.create(**body)
        text = "".join(x["text"] for o in got[cid]["output"] if o["type"] == "message" for x in o["content"])
        assert got[cid]["status"] == online.status
        assert got[cid]["incomplete_details"] == (online.incomplete_details and online.incomplete_details.model_dump())
        assert text == online.output_text
        assert got[cid]["usage"]["output_tokens"] == online.usage.output_tokens
