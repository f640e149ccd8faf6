"""`vllm serve` with the real vLLM EngineCore on CPU, this frontend as its drop-in frontend.

    VLLM_USE_RUST_FRONTEND=1 VLLM_RUST_FRONTEND_PATH=.venv/bin/vllm-pyfrontend \\
        VLLM_PYFRONTEND_WORKERS=2 vllm serve <tiny model> <ENGINE_ARGS> --port P

vLLM loads the model, runs the engine and its handshake, and hands our executable the HTTP
listener and its single engine client slot; two workers serve behind our router.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.dropin.harness import DropinServer, worker_of_response_id
from tests.e2e.tiny_model import ENGINE_ARGS, build_tiny_model, free_port

pytestmark = pytest.mark.real_engine

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Count to five."}]


@pytest.fixture(scope="module")
def dropin(tmp_path_factory):
    model = build_tiny_model()
    logs = tmp_path_factory.mktemp("dropin-real")
    server = DropinServer([model, *ENGINE_ARGS, "--served-model-name", "tiny"], free_port(), logs,
                          workers=2)
    try:
        server.wait_ready(600)
        yield server
    finally:
        server.kill()


def new_client(server: DropinServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0, timeout=120)


def test_greedy_stream_equals_non_stream(dropin):
    with new_client(dropin) as client:
        full = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=16,
                                              temperature=0)
        assert full.choices[0].finish_reason in ("length", "stop")
        assert full.usage.completion_tokens >= 1
        chunks = list(client.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=16, temperature=0, stream=True,
            stream_options={"include_usage": True},
        ))  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_both_workers_serve_through_the_router(dropin):
    """Both workers serve chat through the router, and /load names the worker that answers it.
    (The workers share vLLM's one listening socket: an idle worker can win every accept, so
    /load is asked on the connection a chat request just used, whose worker is known.)"""
    served_by: set[int] = set()
    for _ in range(60):  # a fresh connection each time; the kernel picks the accepting worker
        with httpx.Client(base_url=dropin.base_url, timeout=60) as h:
            r = h.post("/v1/chat/completions", json={"model": "tiny", "messages": MESSAGES, "max_tokens": 2})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["usage"]["completion_tokens"] >= 1
            worker = worker_of_response_id(body["id"])
            assert h.get("/load").json()["worker"] == worker  # same keep-alive connection, same worker
        served_by.add(worker)
        if served_by == {0, 1}:
            break
    assert served_by == {0, 1}


def test_sigterm_stops_the_whole_tree(dropin):
    # Last in this module: the server is gone afterwards.
    code = dropin.terminate(timeout=120)
    left = dropin.wait_tree_gone(15)
    log = dropin.log()
    assert code == 0, log[-3000:]
    assert not left, [p.cmdline()[:3] for p in left]
    # Our tree exited by itself: vLLM's frontend manager did not have to kill it. (With the
    # default --shutdown-timeout 0 vLLM's engine manager does kill its own EngineCore.)
    assert "[pyfrontend]" in log and "INFO stopped" in log, log[-3000:]
    assert "Subprocess manager: force killing" not in log, log[-3000:]
