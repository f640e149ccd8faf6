"""Configuration handed from the supervisor to each worker process (as JSON)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class WorkerConfig:
    worker_index: int
    num_workers: int
    host: str
    port: int
    model: str  # local model directory (config.json, tokenizer.json, tokenizer_config.json, ...)
    served_model_names: list[str]
    # This worker's engine client slot (= vLLM client_index worker_index).
    input_address: str
    output_address: str
    # Handshake identities of the engines this worker talks to (DP ranks).
    engine_indices: list[int] = field(default_factory=lambda: [0])
    # Ready responses already received (given to a restarted worker, which gets none).
    engine_infos: list[dict[str, Any]] | None = None
    runtime_dir: str = "/tmp"
    tokenizer: str | None = None
    chat_template: str | None = None  # path or inline template text
    max_model_len: int | None = None  # user's --max-model-len; the engine's ready value wins
    shutdown_timeout: float = 30.0
    engine_ready_timeout: float = 600.0
    # The worker writes b"ready\n" to this fd once it serves (None: don't report).
    status_fd: int | None = None
    # Pre-bound listening socket fd to adopt instead of binding host:port (drop-in path).
    listen_fd: int | None = None
    # Use SO_REUSEPORT (several workers on one port).
    reuse_port: bool = True
    log_level: str = "info"
    generation_config: str = "auto"  # "auto" (model's generation_config.json) or "vllm"
    max_request_body_bytes: int = 32 * 1024 * 1024
    # Request deadline for an engine that stops answering (seconds; 0 disables): see
    # EngineClient._watchdog.
    engine_timeout: float = 60.0
    # vLLM client_index stamped on requests (None: worker_index). 0 behind the drop-in router,
    # which owns the single client slot vLLM gave it; request ids still carry worker_index.
    engine_client_index: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "WorkerConfig":
        return cls(**json.loads(text))
