"""`python -m vllm_pyfrontend.supervisor.sim`: a simulated headless vLLM EngineCore.

It joins a frontend's handshake socket exactly as `vllm serve --headless` engines do and
then answers with generated tokens on a fixed step clock, so the frontend (ours, or vLLM's
own) can be tested and benchmarked without a GPU. See `supervisor/sim/` for the parts.

    python -m vllm_pyfrontend.supervisor.sim --handshake-address tcp://127.0.0.1:29550 \
        --engine-index 0 --model MODEL_DIR [--step-time 0.01] [--max-num-seqs 256] ...
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

from vllm_pyfrontend.server import log_lines
from vllm_pyfrontend.supervisor.sim.engine import SimEngine, SimEngineConfig
from vllm_pyfrontend.supervisor.sim.kv_transfer import KvTransferConfig
from vllm_pyfrontend.supervisor.sim.prefix_cache import attach_prefix_cache


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vllm_pyfrontend.supervisor.sim", description=__doc__)
    p.add_argument("--handshake-address", required=True, help="frontend handshake ROUTER")
    p.add_argument("--engine-index", type=int, default=0, help="data parallel rank")
    p.add_argument("--model", default=None, help="model dir (its tokenizer.json gives text)")
    p.add_argument("--step-time", type=float, default=0.01, help="seconds per engine step")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-model-len", type=int, default=16384)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-gpu-blocks", "--num-gpu-blocks-override", type=int, default=None)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                   help="model a prefix cache (default: on with --kv-events-config, else off)")
    p.add_argument("--kv-events-config", default=None, help="vLLM's KV events config (JSON)")
    p.add_argument("--kv-transfer-config", type=_kv_transfer_config, default=None,
                   help="vLLM's KV transfer config (JSON): prefill/decode disaggregation with "
                   "kv_role, kv_load_failure_policy and kv_connector_extra_config "
                   "(transfer_time_per_token, fail_load_every)")
    p.add_argument("--prefill-time-per-token", type=float, default=0.0,
                   help="seconds each prompt token computed adds to its step (default 0: none)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--vllm-version", default="0.32.0", help="wire layout to speak")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--disable-log-stats", action="store_true", help="no stats or events")
    p.add_argument(
        "--include-finished-set",
        action="store_true",
        help="fill finished_requests (vLLM does so only under a DP coordinator)",
    )
    p.add_argument(
        "--on-bad-request",
        choices=("dead", "deaf"),
        default="dead",
        help="undecodable input: send ENGINE_CORE_DEAD and exit (dead), or stop reading "
        "inputs as vLLM's crashed input thread does (deaf)",
    )
    p.add_argument("--die-after-steps", type=int, default=None, help="fault injection")
    p.add_argument("--hang-after-steps", type=int, default=None, help="fault injection")
    p.add_argument("--runner", choices=("auto", "generate", "pooling"), default="auto",
                   help="pooling: answer pooling requests with a vector (an embedding model)")
    p.add_argument("--pooling-dim", type=int, default=1024, help="pooled vector size (--runner pooling)")
    p.add_argument("--handshake-timeout", type=float, default=300.0)
    p.add_argument("--log-level", default="INFO")
    return p


def _kv_transfer_config(text: str) -> KvTransferConfig:
    try:
        return KvTransferConfig.parse(text)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# The config fields read from flags of other names (or values); each other field of
# `SimEngineConfig` is the value of the flag of its name.
_DERIVED_FIELDS = ("log_stats", "handshake_timeout_s", "runner")


def config_from_args(args: argparse.Namespace) -> SimEngineConfig:
    named = {f.name: getattr(args, f.name) for f in dataclasses.fields(SimEngineConfig)
             if f.name not in _DERIVED_FIELDS}
    return SimEngineConfig(
        **named,
        log_stats=not args.disable_log_stats,
        handshake_timeout_s=args.handshake_timeout,
        runner="pooling" if args.runner == "pooling" else "generate",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    fmt = f"%(asctime)s sim-engine[{args.engine_index}] %(levelname)s %(message)s"
    logging.basicConfig(level=args.log_level.upper(), format=fmt)
    log_lines.install(fmt)  # request ids are the client's to choose
    engine = SimEngine(config_from_args(args))
    attach_prefix_cache(engine, args)
    return engine.run()


if __name__ == "__main__":
    sys.exit(main())
