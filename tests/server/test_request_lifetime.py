"""An answered request is freed by reference counting, not left for the cyclic collector.

A request's run holds its generations and each generation holds the run (its consumer): a
reference cycle that, left alone, keeps everything the request built (detokenizer, SSE writer,
parsers, token lists) alive until a full collection. Under 1024 streams that was ~900 ended
requests per worker at a time. With the collector off, every route must leave no RequestRun or
Generation behind once its answer is out, whatever ended it.
"""

from __future__ import annotations

import gc
import time

import httpx
import pytest

from tests.reliability.test_fault_injection import MODEL, Worker
from vllm_pyfrontend.llm.generation import Generation
from vllm_pyfrontend.serving.request_pipeline import RequestRun

CHAT = [{"role": "user", "content": "Hello there"}]
REQUESTS = [
    ("chat", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 8}),
    ("chat-stream", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "stream": True,
                                             "stream_options": {"include_usage": True}}),
    ("chat-n2", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "n": 2, "stream": True}),
    ("chat-stop", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 64, "stop": [" "], "stream": True}),
    ("completions", "/v1/completions", {"prompt": "Hello", "max_tokens": 8}),
    ("completions-stream", "/v1/completions", {"prompt": "Hello", "max_tokens": 8, "stream": True}),
    ("responses", "/v1/responses", {"input": "Hello", "max_output_tokens": 8}),
    ("responses-stream", "/v1/responses", {"input": "Hello", "max_output_tokens": 8, "stream": True}),
    ("messages", "/v1/messages", {"messages": CHAT, "max_tokens": 8}),
    ("messages-stream", "/v1/messages", {"messages": CHAT, "max_tokens": 8, "stream": True}),
]


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = Worker(tmp_path_factory.mktemp("lifetime"))
    yield w
    w.close()


def _alive(worker: Worker) -> dict[str, int]:
    def count():
        objs = gc.get_objects()
        return {"runs": sum(type(o) is RequestRun for o in objs),
                "generations": sum(type(o) is Generation for o in objs)}
    return worker.call(count)


def _wait_alive_zero(worker: Worker) -> dict[str, int]:
    # (returns as soon as nothing is left: the deadline only bounds a loaded machine's slowness)
    deadline = time.monotonic() + 30
    while True:
        alive = _alive(worker)
        if alive == {"runs": 0, "generations": 0} or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


@pytest.mark.parametrize("name,path,body", REQUESTS, ids=[r[0] for r in REQUESTS])
def test_an_answered_request_leaves_nothing_for_the_collector(worker, name, path, body):
    gc.collect()
    gc.disable()
    try:
        assert _wait_alive_zero(worker) == {"runs": 0, "generations": 0}
        r = httpx.post(worker.base + path, json={"model": MODEL, **body}, timeout=20)
        assert r.status_code == 200, r.text
        assert _wait_alive_zero(worker) == {"runs": 0, "generations": 0}
    finally:
        gc.enable()


def test_a_request_whose_client_left_leaves_nothing_for_the_collector(worker):
    gc.collect()
    gc.disable()
    try:
        body = {"model": MODEL, "messages": CHAT, "max_tokens": 400, "stream": True}
        with httpx.stream("POST", worker.base + "/v1/chat/completions", json=body, timeout=20) as r:
            for line in r.iter_lines():
                if line.startswith("data: {") and '"content"' in line:
                    break  # the client leaves mid-stream
        assert _wait_alive_zero(worker) == {"runs": 0, "generations": 0}
    finally:
        gc.enable()
