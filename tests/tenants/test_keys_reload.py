"""The keys file reloaded on SIGHUP under load: the supervisor checks the file, publishes it and
forwards the signal; each worker swaps its key table. Streams in flight (of the removed key
too) finish untouched, a steady client sees no failure, the new key works and the removed one
gets 401 on every worker; a bad file on reload changes nothing and says why; a worker that
restarts afterwards serves the new table."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from tests.reliability.helpers import (
    chat_body, open_stream, read_all, request, sim_args, sse_events, wait_all_serving, wait_for, workers_of,
)
from tests.stack import Stack

WORKERS = 2
BEFORE = """
- {name: stay, key: key-stay}
- {name: old, key: key-old, max_concurrency: 10}
"""
AFTER = """
- {name: new, key: key-new, requests_per_second: 1000}
- {name: stay, key: key-stay, max_concurrency: 50}
"""


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _status(stack: Stack, key: str) -> int:
    return request(stack, "/v1/chat/completions", chat_body(), headers=_auth(key)).status


def _reloads(stack: Stack) -> set[str]:
    return {line.split("]", 1)[0] for line in list(stack.log) if "API keys reloaded" in line}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.yaml"
    path.write_text(BEFORE)
    with Stack(sim_args("--api-keys-file", str(path), workers=WORKERS, step=0.01)) as s:
        wait_all_serving(s)
        s.keys_path = path  # type: ignore[attr-defined]
        yield s


def test_sighup_reload_under_load(stack):
    path = stack.keys_path
    assert _status(stack, "key-old") == 200 and _status(stack, "key-new") == 401
    streams = [open_stream(stack, chat_body(stream=True, max_tokens=400, ignore_eos=True,
                                            stream_options={"include_usage": True}), headers=_auth(key))
               for key in ("key-old", "key-stay", "key-old", "key-stay")]
    firsts = [s.recv(65536) for s in streams]  # each admitted and streaming
    assert all(b" 200 " in f.split(b"\r\n", 1)[0] for f in firsts), firsts
    statuses: list[int] = []
    stop = threading.Event()

    def steady() -> None:
        while not stop.is_set():
            statuses.append(_status(stack, "key-stay"))

    client = threading.Thread(target=steady, daemon=True)
    client.start()
    try:
        path.write_text(AFTER)
        stack.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: len(_reloads(stack)) == WORKERS, 30, "every worker's reload", stack)
        for _ in range(6):  # new connections: every worker
            assert _status(stack, "key-new") == 200
            assert _status(stack, "key-old") == 401
    finally:
        stop.set()
        client.join(30)
    assert statuses and set(statuses) == {200}, statuses
    # The streams admitted before the reload, the removed key's included, ran to their end.
    for first, s in zip(firsts, streams):
        events = sse_events(first + read_all(s))
        s.close()
        assert events[-1] == "[DONE]", events[-3:]
        usage = [json.loads(e)["usage"] for e in events[:-1] if json.loads(e).get("usage")]
        assert usage and usage[-1]["completion_tokens"] == 400
    assert not any("Traceback" in line for line in stack.log), stack.logs()


def test_bad_file_on_reload_keeps_the_keys(stack):
    path = stack.keys_path
    reloads = len([l for l in stack.log if "API keys reloaded" in l])
    path.write_text(AFTER + "- {name: stay, key: other}\n")  # a duplicate name
    stack.proc.send_signal(signal.SIGHUP)
    line = wait_for(lambda: next((l for l in list(stack.log) if "API keys not reloaded" in l), None), 30,
                    "the refused reload", stack)
    assert "duplicate name" in line and "[supervisor]" in line
    path.write_text("- name: [unclosed\n")
    stack.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: sum("API keys not reloaded" in l for l in list(stack.log)) == 2, 30, "the second refusal", stack)
    assert len([l for l in stack.log if "API keys reloaded" in l]) == reloads
    for _ in range(4):
        assert _status(stack, "key-new") == 200 and _status(stack, "key-old") == 401


def test_restarted_worker_serves_the_reloaded_table(stack):
    victim = workers_of(stack)[0]
    before = sum("ready again" in l for l in list(stack.log))
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: sum("ready again" in l for l in list(stack.log)) > before, 60, "the restarted worker", stack)
    for _ in range(8):
        assert _status(stack, "key-new") == 200 and _status(stack, "key-old") == 401
