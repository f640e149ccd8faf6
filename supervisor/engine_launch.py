"""Commands that start the engine processes this supervisor owns.

The simulated engine is one process per local DP rank (each joins the handshake with its own
`--engine-index`). vLLM's headless EngineCore is one process that launches its local DP ranks
itself (`--data-parallel-size-local`), exactly as `vllm serve --headless` does.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from vllm_pyfrontend.supervisor.options import SupervisorOptions
from vllm_pyfrontend.supervisor.runtime import tcp_uri
from vllm_pyfrontend.supervisor.vllm_flags import takes_value

# vLLM engine flags the simulated engine also understands (same names, same meaning).
SIM_ENGINE_FLAGS = frozenset(
    {"--max-num-batched-tokens", "--block-size", "--dtype", "--disable-log-stats", "--seed", "--runner",
     # the sim engine's own fault injection (not vLLM flags), for reliability tests
     "--hang-after-steps", "--die-after-steps",
     # prefix caching and its KV events (supervisor/sim/prefix_cache.py)
     "--enable-prefix-caching", "--no-enable-prefix-caching", "--kv-events-config", "--num-gpu-blocks-override",
     # prefill/decode disaggregation (supervisor/sim/kv_transfer.py) and the sim's prefill cost
     "--kv-transfer-config", "--prefill-time-per-token"}
)


@dataclass(frozen=True)
class EngineLaunch:
    name: str  # log prefix: "engine", or "engine R" for one of several sim ranks
    argv: list[str]


def split_sim_flags(engine_args: list[str]) -> tuple[list[str], list[str]]:
    """(flags the sim engine takes, the rest) from vLLM engine flags as the CLI forwarded them."""
    picked: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(engine_args):
        token = engine_args[i]
        name = token.split("=", 1)[0]
        n = 1
        if "=" not in token and takes_value(name) and i + 1 < len(engine_args):
            n = 2
        (picked if name in SIM_ENGINE_FLAGS else rest).extend(engine_args[i : i + n])
        i += n
    return picked, rest


def sim_engine_command(options: SupervisorOptions, handshake_address: str, rank: int) -> list[str]:
    argv = [
        sys.executable, "-m", "vllm_pyfrontend.supervisor.sim",
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
    return argv + split_sim_flags(options.engine_args)[0]


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
    from vllm_pyfrontend.supervisor.vllm_headless import build_engine_command

    return [EngineLaunch("engine", build_engine_command(options.model, host, port, options.engine_args))]
