"""The real supervisor with the simulated engine and real workers: lifecycle end to end.

`frontend-supervisor --engine sim --workers 2 demo:deepseek-v4`: health, a chat completion,
a killed worker is replaced and the service keeps answering, SIGTERM exits 0 leaving no
process behind; the engine dying makes the supervisor exit 1.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request

import pytest

from tests.stack import Stack, proc_alive, proc_cmdline, worker_pids, worker_template_pids

ARGS = ["--engine", "sim", "--workers", "2", "--sim-step-time", "0.005", "--max-model-len", "4096",
        "--shutdown-timeout", "5", "demo:deepseek-v4"]


def _children(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read().rsplit(") ", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid and stat[0] != "Z":
                out.append(int(entry))
    return out


def _chat(stack: Stack) -> dict:
    body = json.dumps({"model": "demo:deepseek-v4", "max_tokens": 8,
                       "messages": [{"role": "user", "content": "Hello!"}]}).encode()
    req = urllib.request.Request(stack.base_url + "/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def _kinds(stack: Stack) -> tuple[list[int], list[int]]:
    kids = _children(stack.proc.pid)
    workers = worker_pids(stack.proc.pid)
    engines = [p for p in kids if "vllm_pyfrontend.supervisor.sim" in proc_cmdline(p)]
    return workers, engines


def test_serve_restart_and_sigterm():
    stack = Stack(ARGS, ready_timeout=120)
    try:
        # /health answers as soon as one worker serves; the supervisor waits for all.
        stack.wait_for(lambda: any("[supervisor]" in l and "serving on http://127.0.0.1:" in l
                                   and "(2 workers)" in l for l in list(stack.log)), 60, "serving line")
        assert stack.health() == 200
        reply = _chat(stack)
        assert reply["choices"][0]["finish_reason"] == "length"
        assert reply["usage"]["completion_tokens"] == 8

        workers, engines = _kinds(stack)
        assert len(workers) == 2 and len(engines) == 1
        os.kill(workers[0], signal.SIGKILL)
        stack.wait_for(lambda: any("ready again" in l for l in list(stack.log)), 60, "worker restart")
        for _ in range(4):  # both workers (either may take the connection) answer
            assert _chat(stack)["usage"]["completion_tokens"] == 8
        workers2, _ = _kinds(stack)
        assert len(workers2) == 2 and workers[0] not in workers2
        everyone = workers2 + engines + worker_template_pids(stack.proc.pid)
    except BaseException:
        stack.stop()
        raise
    assert stack.terminate(timeout=60) == 0, stack.logs()
    assert not [p for p in everyone if proc_alive(p)]
    lines = list(stack.log)
    assert all(l.startswith(("[supervisor]", "[engine]", "[worker 0]", "[worker 1]", "[worker template]"))
               for l in lines), lines


def test_engine_death_exits_1():
    stack = Stack(ARGS, ready_timeout=120)
    try:
        stack.wait_for(lambda: any("serving on" in l for l in list(stack.log)), 60, "serving line")
        workers, engines = _kinds(stack)
        os.kill(engines[0], signal.SIGKILL)
        code = stack.proc.wait(60)
    except BaseException:
        stack.stop()
        raise
    assert code == 1, stack.logs()
    assert "engine exited (killed by SIGKILL)" in stack.logs()
    assert not [p for p in workers if proc_alive(p)]
