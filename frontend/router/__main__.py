"""`python -m vllm_pyfrontend.router`: the router process of the drop-in launch (see router.py).

Started by `vllm_pyfrontend.supervisor.dropin`, which passes it vLLM's two pre-bound ZMQ listener fds.
"""

from __future__ import annotations

import argparse
import logging
import sys

from .router import run_router


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vllm_pyfrontend.router")
    p.add_argument("--input-fd", type=int, required=True, help="vLLM's input ROUTER listener")
    p.add_argument("--output-fd", type=int, required=True, help="vLLM's output PULL listener")
    p.add_argument("--engine-start-index", type=int, default=0)
    p.add_argument("--engine-count", type=int, default=1)
    p.add_argument("--worker-input", action="append", required=True,
                   help="a worker's input address (its ROUTER); once per worker, in order")
    p.add_argument("--worker-output", action="append", required=True,
                   help="a worker's output address (its PULL); once per worker, in order")
    p.add_argument("--ready-timeout", type=float, default=600.0)
    p.add_argument("--status-fd", type=int, default=None, help='written b"ready\\n" once routing')
    p.add_argument("--engine-info-path", default=None,
                   help="write the engines' ready responses here (for restarted workers)")
    p.add_argument("--log-level", default="info")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    start = args.engine_start_index
    return run_router(
        input_fd=args.input_fd,
        output_fd=args.output_fd,
        engine_indices=list(range(start, start + args.engine_count)),
        worker_inputs=args.worker_input,
        worker_outputs=args.worker_output,
        ready_timeout=args.ready_timeout,
        status_fd=args.status_fd,
        engine_info_path=args.engine_info_path,
    )


if __name__ == "__main__":
    sys.exit(main())
