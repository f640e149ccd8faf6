"""The supervisor's settings, as parsed from the command line (see `supervisor/cli.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_pyfrontend.config import WorkerPolicy

DEFAULT_DP_RPC_PORT = 29550  # vLLM's default --data-parallel-rpc-port


@dataclass
class SupervisorOptions:
    model: str  # local model directory (already resolved: `demo:...` materialized)
    # The model argument as the user wrote it: vLLM's default served model name.
    model_arg: str | None = None
    workers: int = 1
    host: str = "0.0.0.0"
    port: int = 8000
    uds: str | None = None  # a Unix domain socket path instead of host:port
    grpc_port: int | None = None  # vLLM's gRPC service on this port too (frontend/api/grpc)
    engine: str = "vllm"  # "vllm" | "sim"
    sim_step_time: float | None = None
    shutdown_timeout: float = 30.0
    served_model_names: list[str] = field(default_factory=list)
    tokenizer: str | None = None
    chat_template: str | None = None
    engine_ready_timeout: float = 600.0
    engine_timeout: float = 60.0  # request deadline for an engine that stops answering
    on_engine_death: str = "exit"  # "exit" (code 1) | "restart" (engine and workers again)
    worker_ready_timeout: float = 120.0
    # Fork workers from a preloaded worker template (supervisor/forkserver.py); --no-worker-preload.
    worker_preload: bool = True
    log_level: str = "info"
    generation_config: str = "auto"
    # Read by the supervisor and also given to the engine.
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    data_parallel_size: int = 1
    data_parallel_size_local: int | None = None  # None: all ranks local
    data_parallel_start_rank: int = 0
    data_parallel_address: str | None = None
    data_parallel_rpc_port: int = DEFAULT_DP_RPC_PORT
    # vLLM engine flags, in vLLM's spelling, for `build_engine_command` (vllm engine only).
    engine_args: list[str] = field(default_factory=list)
    # API keys, given to every worker through its environment (never printed, never in argv).
    api_keys: list[str] = field(default_factory=list, repr=False)
    # Security, request hygiene and parsers, given to every worker (see WorkerPolicy).
    policy: WorkerPolicy = field(default_factory=WorkerPolicy)

    @property
    def local_engine_count(self) -> int:
        """DP ranks this supervisor launches itself (the rest join over TCP)."""
        if self.data_parallel_size_local is None:
            return self.data_parallel_size
        return self.data_parallel_size_local

    @property
    def local_engine_ranks(self) -> list[int]:
        start = self.data_parallel_start_rank
        return list(range(start, start + self.local_engine_count))

    @property
    def engine_indices(self) -> list[int]:
        """Handshake identities of every engine (global DP ranks)."""
        return list(range(self.data_parallel_size))

    @property
    def has_remote_engines(self) -> bool:
        """Engines on other hosts join: handshake and client sockets must be TCP."""
        return self.local_engine_count < self.data_parallel_size

    @property
    def served_names(self) -> list[str]:
        return self.served_model_names or [self.model_arg or self.model]
