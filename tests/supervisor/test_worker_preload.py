"""Workers forked from a preloaded worker template (supervisor/forkserver.py, server/preload.py).

`frontend-supervisor --engine sim --workers 2`: the workers are children of the template, which is
the supervisor's child; they serve through the openai SDK; a SIGKILLed worker is forked again;
killing the template takes its workers down (SIGTERM from the kernel) and both come back from a
fresh template; SIGTERM of the supervisor exits 0 with every process gone. With
--no-worker-preload the workers are spawned interpreters, as before, and a template that cannot
start makes the pool spawn the worker instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import openai

from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.supervisor.forkserver import ForkedChild
from vllm_pyfrontend.supervisor.process import Child
from vllm_pyfrontend.supervisor.runtime import ClientAddresses
from vllm_pyfrontend.supervisor.workers import WorkerPool, child_env

from tests.stack import (Stack, proc_alive, proc_children, proc_cmdline, worker_index, worker_pids,
                         worker_template_pids)

ARGS = ["--engine", "sim", "--workers", "2", "--sim-step-time", "0.005", "--max-model-len", "4096",
        "--shutdown-timeout", "5", "demo:deepseek-v4"]


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(") ", 1)[1].split()[1])


def _serve_twice(stack: Stack) -> None:
    """Two chat completions on fresh connections (either worker may take each)."""
    for _ in range(2):
        client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="x", max_retries=0, timeout=30)
        try:
            r = client.chat.completions.create(
                model="demo:deepseek-v4", messages=[{"role": "user", "content": "Hello!"}], max_tokens=4)
        finally:
            client.close()
        assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 4


def _forked_workers(stack: Stack) -> tuple[int, list[int]]:
    """(template pid, its two serving workers) once both are there and ready."""
    def ready():
        templates = worker_template_pids(stack.proc.pid)
        if len(templates) != 1:
            return None
        workers = [p for p in proc_children(templates[0]) if proc_alive(p)]
        return (templates[0], sorted(workers)) if len(workers) == 2 else None

    return stack.wait_for(ready, 90, "two forked workers")


def _ready_count(stack: Stack, n: int) -> None:
    stack.wait_for(lambda: sum("ready again" in l for l in list(stack.log)) >= n, 90, f"{n} worker restart(s)")


def test_forked_workers_restart_and_template_death():
    stack = Stack(ARGS, ready_timeout=120)
    seen: set[int] = set()
    try:
        stack.wait_for(lambda: any("serving on http://127.0.0.1:" in l and "(2 workers)" in l
                                   for l in list(stack.log)), 90, "serving line")
        template, workers = _forked_workers(stack)
        seen.update([template, *workers])
        assert _ppid(template) == stack.proc.pid
        assert all(_ppid(w) == template for w in workers)
        assert worker_pids(stack.proc.pid) == workers  # none spawned beside them
        assert all("vllm_pyfrontend.server.worker" in proc_cmdline(w) for w in workers)
        assert sorted(worker_index(w) for w in workers) == [0, 1]
        assert all(os.getpgid(w) == w for w in workers)  # own process group, as spawned workers
        assert "workers are forked from it" in stack.logs()
        _serve_twice(stack)

        # A SIGKILLed worker is forked again from the same template.
        os.kill(workers[0], signal.SIGKILL)
        _ready_count(stack, 1)
        template2, workers2 = _forked_workers(stack)
        assert template2 == template and workers[0] not in workers2 and workers[1] in workers2
        seen.update(workers2)
        _serve_twice(stack)

        # The template dies: its workers get SIGTERM, drain and exit; both come back, forked from
        # a fresh template.
        os.kill(template, signal.SIGKILL)
        stack.wait_for(lambda: not any(proc_alive(w) for w in workers2), 30, "the template's workers to exit")
        _ready_count(stack, 3)
        template3, workers3 = _forked_workers(stack)
        assert template3 != template and not set(workers3) & set(workers2)
        assert all(_ppid(w) == template3 for w in workers3)
        seen.update([template3, *workers3])
        _serve_twice(stack)
        engines = [p for p in proc_children(stack.proc.pid) if "vllm_pyfrontend.supervisor.sim" in proc_cmdline(p)]
        seen.update(engines)
    except BaseException:
        stack.stop()
        raise
    assert stack.terminate(timeout=60) == 0, stack.logs()
    assert not [p for p in seen if proc_alive(p)], stack.logs()
    lines = list(stack.log)
    assert all(l.startswith(("[supervisor]", "[engine]", "[worker 0]", "[worker 1]", "[worker template]"))
               for l in lines), lines


def test_no_worker_preload_spawns_workers():
    stack = Stack(["--no-worker-preload", *ARGS], ready_timeout=120)
    try:
        stack.wait_for(lambda: any("(2 workers)" in l for l in list(stack.log)), 90, "serving line")
        workers = worker_pids(stack.proc.pid)
        assert len(workers) == 2 and all(_ppid(w) == stack.proc.pid for w in workers)
        assert all("-m vllm_pyfrontend.server.worker --config-json" in proc_cmdline(w) for w in workers)
        assert not worker_template_pids(stack.proc.pid)
        _serve_twice(stack)
    except BaseException:
        stack.stop()
        raise
    assert stack.terminate(timeout=60) == 0, stack.logs()
    assert not [p for p in workers if proc_alive(p)]
    assert "worker template" not in stack.logs()


async def test_a_template_that_cannot_start_falls_back_to_spawning(tmp_path, caplog):
    """The template exits before it is ready (here: no tokenizer in the model directory): the pool
    logs it and spawns the worker as its own interpreter (which fails the same way here)."""
    caplog.set_level(logging.INFO)
    missing = str(tmp_path / "no-model")
    config = WorkerConfig(worker_index=0, num_workers=1, host="127.0.0.1", port=0, model=missing,
                          served_model_names=["m"], input_address="ipc:///nonexistent-in",
                          output_address="ipc:///nonexistent-out", runtime_dir=str(tmp_path))
    events: asyncio.Queue = asyncio.Queue()
    pool = WorkerPool(events, lambda kind, slot, child: (kind, slot, child), build_config=lambda slot: config,
                      runtime_dir=str(tmp_path), env=child_env(), api_keys=[])
    assert pool.preload
    pool.reset([ClientAddresses("ipc:///nonexistent-in", "ipc:///nonexistent-out")])
    await pool.spawn(pool.slots[0])
    child = pool.slots[0].child
    assert isinstance(child, Child) and not isinstance(child, ForkedChild)
    assert "the worker template exited before it was ready" in caplog.text
    assert "starting worker 0 as its own process" in caplog.text
    kind, _, exited = await asyncio.wait_for(events.get(), 60)
    assert kind == "worker_exit" and exited is child and child.returncode == 1
    await child.flush_output(1.0)
    await pool.stop(0, 1)
    assert pool.template.child is None
