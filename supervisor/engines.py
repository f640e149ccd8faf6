"""Commands that start the engine processes this supervisor owns.

The simulated engine is one process per local DP rank (each joins the handshake with its own
`--engine-index`). vLLM's headless EngineCore is one process that launches its local DP ranks
itself (`--data-parallel-size-local`), exactly as `vllm serve --headless` does.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from supervisor.options import SupervisorOptions
from supervisor.runtime import tcp_uri


@dataclass(frozen=True)
class EngineLaunch:
    name: str  # log prefix: "engine", or "engine R" for one of several sim ranks
    argv: list[str]


def sim_engine_command(options: SupervisorOptions, handshake_address: str, rank: int) -> list[str]:
    argv = [
        sys.executable, "-m", "supervisor.sim_engine",
        "--handshake-address", handshake_address,
        "--engine-index", str(rank),
        "--model", options.model,
    ]
    if options.sim_step_time is not None:
        argv += ["--step-time", str(options.sim_step_time)]
    if options.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(options.max_num_seqs)]
    if options.max_model_len is not None:
        argv += ["--max-model-len", str(options.max_model_len)]
    return argv


def engine_launches(options: SupervisorOptions, host: str, port: int) -> list[EngineLaunch]:
    """The engine processes to start; they join the handshake at tcp://host:port."""
    ranks = options.local_engine_ranks
    if not ranks:
        return []
    if options.engine == "sim":
        address = tcp_uri(host, port)
        return [
            EngineLaunch(
                name="engine" if options.data_parallel_size == 1 else f"engine {rank}",
                argv=sim_engine_command(options, address, rank),
            )
            for rank in ranks
        ]
    from supervisor.vllm_engine import build_engine_command

    return [EngineLaunch("engine", build_engine_command(options.model, host, port, options.engine_args))]
