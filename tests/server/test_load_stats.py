"""/load across workers: which worker's sample of an engine's scheduler stats is the newest.

The engine sends each step's stats to one worker. A worker that reads an older step's batch
a few milliseconds after another worker read a newer one must not win: once the engine is idle
it sends nothing more, and "newest by receipt time" then reports requests that were aborted long
ago as running, for good (tests/reliability/test_dp_faults.py failed so under load: engine 0
"still ran 4 requests" that it had dropped). /load's `engine_timestamp` (the engine's clock on
the step that sent the stats) orders the samples as the engine produced them.

Two engine clients stand for two workers, one fake engine (vLLM's own encoder) for each
client's sockets; the order of delivery is forced, no timing is asserted.
"""

from __future__ import annotations

import asyncio
import time

from vllm.v1.engine import EngineCoreOutputs
from vllm.v1.metrics.stats import SchedulerStats

from tests.engine.test_client import FakeEngine, on_uvloop, until
from tests.stack import newer_stats
from vllm_pyfrontend.engine.client import EngineClient
from vllm_pyfrontend.server.app import engine_load


async def _worker(tmp_path, zctx, client_index: int) -> tuple[EngineClient, FakeEngine]:
    """One worker's engine client and, on its sockets, engine 0 as it talks to that worker."""
    inp, out = f"ipc://{tmp_path}/in{client_index}", f"ipc://{tmp_path}/out{client_index}"
    client = EngineClient(client_index=client_index, input_address=inp, output_address=out,
                          engine_indices=[0], vocab_size=1000)
    start = asyncio.create_task(client.start(timeout=5))
    await asyncio.sleep(0.02)
    engine = FakeEngine(zctx, 0, inp, out)
    engine.send_ready()
    await start
    return client, engine


@on_uvloop
async def test_newest_engine_step_wins_over_a_late_read(tmp_path, zctx):
    (w0, e0), (w1, e1) = [await _worker(tmp_path, zctx, i) for i in (0, 1)]
    try:
        # Step 1 (4 running) goes to worker 1, step 2 (the clients left: idle) to worker 0.
        step1 = EngineCoreOutputs(scheduler_stats=SchedulerStats(num_running_reqs=4), timestamp=1000.0)
        step2 = EngineCoreOutputs(scheduler_stats=SchedulerStats(num_running_reqs=0), timestamp=1000.005)
        # Worker 0 reads step 2 first; worker 1 reads step 1 after it (a busy moment).
        e0.send(step2)
        await until(lambda: 0 in w0.scheduler_stats)
        received = engine_load(w0)["0"]["timestamp"]
        while time.time() <= received:  # worker 1's receipt comes strictly later
            await asyncio.sleep(0.001)
        e1.send(step1)
        await until(lambda: 0 in w1.scheduler_stats)
        loads = [engine_load(w0)["0"], engine_load(w1)["0"]]
        assert loads[1]["timestamp"] > loads[0]["timestamp"]  # the stale one arrived last
        newest = None
        for stats in loads:
            if newer_stats(stats, newest):
                newest = stats
        assert newest["num_running_reqs"] == 0  # the engine's latest state: idle
        assert [s["engine_timestamp"] for s in loads] == [1000.005, 1000.0]
    finally:
        for w, e in ((w0, e0), (w1, e1)):
            await w.close()
            e.close()
