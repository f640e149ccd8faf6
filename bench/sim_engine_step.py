"""Cost of one simulated-engine step with many running requests (the sim must stay far below
its step time, or benchmarks would measure the sim instead of the frontend).

    .venv/bin/python bench/sim_engine_step.py [--running 1024] [--steps 50]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import ormsgpack

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4  # noqa: E402
from vllm_pyfrontend.supervisor.sim import wire  # noqa: E402
from vllm_pyfrontend.supervisor.sim.scheduler import Scheduler  # noqa: E402
from vllm_pyfrontend.supervisor.sim.tokens import TokenSource  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--running", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    model = materialize_deepseek_v4(os.path.expanduser("~/.cache/vllm-pyfrontend/deepseek-v4"))
    sched = Scheduler(TokenSource(model), wire.Layout("0.32.0"), max_num_seqs=args.running,
                      max_model_len=16384, block_size=16, num_gpu_blocks=1 << 20)
    sp = {"max_tokens": 100000, "temperature": 1.0, "_all_stop_token_ids": []}
    for i in range(args.running):
        req = [f"req-{i}", [5] * 32, None, sp, None, time.time(), None, None, None, None, None, i % 4]
        sched.add(wire.decode_add(ormsgpack.packb(req)), time.monotonic())
    sched.step(time.monotonic())
    t0 = time.perf_counter()
    for _ in range(args.steps):
        result = sched.step(time.monotonic())
        for client, items in result.outputs.items():
            wire.pack_outputs(0, items, 0.0, result.stats if client == result.stats_client else None)
    per_step = (time.perf_counter() - t0) / args.steps
    print(f"sim engine step with {args.running} running requests: {per_step * 1000:.2f} ms "
          f"({per_step / 0.010:.1%} of a 10 ms step)")


if __name__ == "__main__":
    main()
