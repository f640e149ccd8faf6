"""Configuration handed from the supervisor to each worker process (as JSON)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from vllm_pyfrontend import environment
# The environment variable carrying the API keys (a JSON list) from the supervisor to its
# workers, and the prompt encoder's library where no --tokenizer-backend is given (the drop-in
# path has none): see vllm_pyfrontend.environment.
from vllm_pyfrontend.environment import API_KEYS_ENV, TOKENIZER_BACKEND_ENV  # noqa: F401

TOKENIZER_BACKENDS = ("auto", "fastokens", "tokenizers")


def tokenizer_backend_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """`TOKENIZER_BACKEND_ENV`'s value (None when unset or empty); ValueError when it names none
    of `TOKENIZER_BACKENDS`."""
    value = environment.tokenizer_backend(environ)
    if value is not None and value not in TOKENIZER_BACKENDS:
        raise ValueError(f"{TOKENIZER_BACKEND_ENV}={value!r}: not one of {', '.join(TOKENIZER_BACKENDS)}")
    return value


@dataclass
class WorkerPolicy:
    """The per-request policy every worker applies, declared once: the supervisor's command line
    (supervisor/cli.py) and the `vllm serve` drop-in (supervisor/dropin.py) both build it with
    `from_mapping` from the same names (vLLM's flag names), and it travels to each worker inside
    its WorkerConfig. A new policy flag is a field here (and its CLI flag)."""

    # Security and request hygiene (see frontend/server/middleware.py).
    metrics_require_api_key: bool = False
    allowed_origins: list[str] = field(default_factory=list)
    allowed_methods: list[str] = field(default_factory=lambda: ["*"])
    allowed_headers: list[str] = field(default_factory=lambda: ["*"])
    allow_credentials: bool = False
    enable_request_id_headers: bool = False
    enable_log_requests: bool = False
    max_log_len: int | None = None
    trust_request_chat_template: bool = False
    # Reasoning and tool-call parsing (names from the frontend/parsers registries, or "auto").
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    # a user's module registering reasoning parsers (frontend/parsers/reasoning/plugin.py)
    reasoning_parser_plugin: str = ""
    tool_parser_plugin: str | None = None  # a user's module registering tool parsers (tool/plugin.py)
    # Admission control (frontend/serving/admission.py): deployment-wide bounds, None: unbounded.
    max_num_queued_reqs: int | None = None
    max_num_queued_tokens: int | None = None
    # Named API keys with per-tenant quotas (frontend/tenants): the keys file's path. The keys
    # reach the workers as the supervisor's validated snapshot in the runtime directory
    # (tenants/keys_file.py), never in this config.
    api_keys_file: str | None = None
    # Tracing (frontend/tracing.py): one span per request, exported over OTLP.
    otlp_traces_endpoint: str | None = None
    collect_detailed_traces: list[str] = field(default_factory=list)
    # Connection hygiene (see frontend/server/connections.py); seconds, 0 disables.
    http_timeout_keep_alive: float = 5.0  # vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE default
    http_header_timeout: float = 60.0  # a request head must be complete within this
    http_body_timeout: float = 0.0  # a request body must be complete within this
    max_connections_per_worker: int = 0  # past it, new connections get a 503 and are closed
    sse_keep_alive_interval: float = 0.0  # ": keep-alive" comment on a stream silent this long
    # TLS (vLLM's flags; ssl_cert_reqs is an ssl.VerifyMode: 0 none, 1 optional, 2 required).
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    ssl_ca_certs: str | None = None
    ssl_cert_reqs: int = 0
    ssl_ciphers: str | None = None
    enable_ssl_refresh: bool = False  # reload the certificate files when they change
    # LoRA adapters served from the start (vLLM's --lora-modules: name=path or JSON objects).
    lora_modules: list[str] = field(default_factory=list)
    # vLLM's scale-out routes (render / derender / token-in generate) and /tokenizer_info.
    enable_scale_out: bool = False
    # vLLM's --tokens-only: the token-in/token-out and render routes without --enable-scale-out,
    # generate outputs never detokenized, stop strings refused, the legacy /abort_requests.
    tokens_only: bool = False
    enable_tokenizer_info_endpoint: bool = False
    # OpenAI answers (vLLM's flags of the same names).
    return_tokens_as_token_ids: bool = False  # logprob tokens as "token_id:N" for every request
    enable_force_include_usage: bool = False  # usage on every stream, as if include_usage were set
    default_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # under a request's own
    response_role: str = "assistant"  # the role of generated chat messages
    exclude_tools_when_tool_choice_none: bool = False  # tool_choice "none": no tools in the template
    root_path: str = ""  # a path prefix (a proxy's): routes answer with and without it
    # vLLM's --middleware: import paths of ASGI HTTP middleware (server/asgi_middleware.py)
    middleware: list[str] = field(default_factory=list)
    trust_request_mm_kwargs: bool = False  # a request's own mm_processor_kwargs / media_io_kwargs
    fingerprint_mode: str = "full"  # system_fingerprint: full | hash | custom | none
    fingerprint_value: str | None = None  # the fingerprint with fingerprint_mode "custom"
    chat_template_content_format: str = "auto"  # message content as a string, or OpenAI's parts list
    log_error_stack: bool = False  # the stack trace of every error response in the worker's log
    uvicorn_log_level: str = "info"  # the HTTP server's own log level (aiohttp's loggers here)
    # /start_profile and /stop_profile exist when the engines have a profiler configured.
    profiler_enabled: bool = False
    # Stored Responses (frontend/store): None = SQLite in the runtime directory, shared by the
    # workers of one supervisor (or off with VLLM_ENABLE_RESPONSES_API_STORE=0);
    # "redis://HOST:PORT/DB" = shared by several replicas; "none" = nothing stored (vLLM's default).
    response_store: str | None = None
    # Tenants' limits across replicas (frontend/tenants/quota_sync.py): a Redis URL (None: the
    # response store's when it is Redis, else per replica); what a replica does while it does
    # not answer ("open": its own counts; "closed": 503 for limited tenants).
    quota_store: str | None = None
    quota_store_failure: str = "open"

    def quota_store_url(self) -> str | None:
        """Where replicas share tenants' counts: --quota-store, else a Redis response store."""
        if self.quota_store:
            return self.quota_store
        store = self.response_store or ""
        return store if store.startswith(("redis://", "rediss://", "unix://")) else None
    response_store_ttl: float = 24 * 3600.0  # seconds a stored response is kept
    response_store_max_entries: int = 10000  # past it the oldest stored responses go
    response_store_max_bytes: int = 512 * 1024 * 1024  # past it (in all) the oldest go
    response_store_max_record_bytes: int = 4 * 1024 * 1024  # one stored response at most
    # The Files and Batch APIs (frontend/api/batches, serving/batch_runner.py): file contents
    # and (without a Redis store) the files' and batches' SQLite file under files_dir (None: in
    # the runtime directory, gone when the supervisor exits); lines run by every worker, at most
    # batch_max_concurrency at once in the deployment (0: run none here), at engine priority
    # batch_priority; a line whose worker stops renewing its lease for batch_lease_timeout
    # seconds runs again elsewhere.
    files_dir: str | None = None
    files_max_bytes: int = 200 * 1024 * 1024
    files_max_total_bytes: int = 10 * 1024 * 1024 * 1024
    batch_max_concurrency: int = 32
    batch_priority: int = 1
    batch_lease_timeout: float = 30.0
    batch_max_requests: int = 50000
    batch_max_output_bytes: int = 1024 * 1024 * 1024  # one batch's output file at most
    # Media inputs (frontend/media; vLLM's names): where media may come from, decoder settings,
    # items per prompt, and the threads that fetch and decode them in each worker.
    allowed_local_media_path: str | None = None  # file:// URLs only under this directory
    allowed_media_domains: list[str] = field(default_factory=list)  # http(s) hosts (empty: any)
    allow_private_media_addresses: bool = False  # else loopback/private/link-local... are refused
    allowed_private_media_networks: list[str] = field(default_factory=list)  # CIDRs allowed anyway
    media_io_kwargs: dict[str, Any] = field(default_factory=dict)  # {"video": {"num_frames": 8}}
    limit_mm_per_prompt: dict[str, Any] = field(default_factory=dict)  # {"image": 2, "video": 0}
    mm_workers: int = 0  # media threads per worker; 0: chosen from the cores
    # Requests of an engine that goes down continue on a live one (frontend/engine/migration.py):
    # at most this many moves per request (0: they fail, 503), waiting up to the timeout
    # (seconds) for an engine to be live.
    migration_limit: int = 3
    migration_timeout: float = 30.0
    # Routing over data parallel engines (frontend/engine/routing.py): "least-load",
    # "prefix-aware" (by the prompt blocks each engine holds, from the engines' KV events:
    # vLLM's --kv-events-config), or None: prefix-aware when the engines publish KV events.
    routing_policy: str | None = None
    routing_prefix_weight: float = 1.0  # a prompt cached whole is worth weight * (mean load + 8)
    kv_events_host: str = "127.0.0.1"  # the host whose KV event publishers the workers subscribe to
    # Prefill/decode disaggregation (frontend/engine/disaggregation.py): the first N data parallel
    # ranks prefill, the others decode (0: every engine does both); prompts shorter than the
    # threshold skip the prefill engines.
    prefill_engines: int = 0
    prefill_min_prompt_tokens: int = 0
    enable_prompt_tokens_details: bool = False  # usage.prompt_tokens_details: the prompt's cached tokens
    # vLLM's answer, output-log and HTTP-parser options (the flags of the same names):
    # per-request timing `metrics` in chat and completion answers (serving/per_request_metrics.py);
    # generated outputs in the request log, with --enable-log-requests (serving/output_log.py),
    # streamed deltas too unless enable_log_deltas is off; the reasoning effort of /v1/messages
    # requests with thinking disabled ("auto": probed from the chat template, api/anthropic);
    # the request head's limits (server/connections.py): bytes of a head still incomplete, and
    # header lines.
    enable_per_request_metrics: bool = False
    enable_log_outputs: bool = False
    enable_log_deltas: bool = True
    anthropic_disabled_thinking_effort: str = "auto"
    h11_max_incomplete_event_size: int = 4194304
    h11_max_header_count: int = 256
    # The library that encodes prompts (text/tokenizer.py): "auto" (fastokens where it gives
    # the tokenizers library's ids on the check texts), "fastokens" (required), "tokenizers".
    tokenizer_backend: str = "auto"

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "WorkerPolicy":
        """The policy from settings under the field names: parsed flags (`vars(namespace)`) or
        vLLM's jsonified serve args. Missing or None values take the default; lists accept a
        single string; an empty list or string also means the default."""
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            value = values.get(f.name)
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            if value is None or value == "":
                value = default
            elif isinstance(default, bool):
                value = bool(value)
            elif isinstance(default, (int, float)):
                value = type(default)(value)
            elif isinstance(default, dict):  # a JSON object flag (--media-io-kwargs)
                value = json.loads(value) if isinstance(value, str) else dict(value)
            elif isinstance(default, list):
                value = [value] if isinstance(value, str) else list(value)
                # vLLM's form of the CORS lists is one JSON array (`--allowed-origins '["a"]'`).
                # (objects, e.g. the drop-in's --lora-modules, stay JSON text)
                value = [json.dumps(x) if isinstance(x, dict) else str(x) for v in value
                         for x in (json.loads(v) if isinstance(v, str) and v.startswith("[") else [v])]
                value = value or default
            kwargs[f.name] = value
        return cls(**kwargs)


def engine_flag_value(args: list[str], name: str) -> str | None:
    """The value of engine flag `name` in `args` (`--name V` or `--name=V`; the last one given),
    or None."""
    value = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1:]
    return value


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
    # The model as the command line gave it (a hub name or a path): /v1/models reports it as
    # `root`, as vLLM does (None: the local directory).
    model_root: str | None = None
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
    # vLLM's gRPC service (frontend/api/grpc) on this port too, shared by the workers; None: off.
    grpc_port: int | None = None
    log_level: str = "info"
    generation_config: str = "auto"  # "auto" (model's generation_config.json) or "vllm"
    max_request_body_bytes: int = 32 * 1024 * 1024
    # Request deadline for an engine that stops answering (seconds; 0 disables): see
    # engine/health.py (Health._watchdog).
    engine_timeout: float = 60.0
    # vLLM client_index stamped on requests (None: worker_index). 0 behind the drop-in router,
    # which owns the single client slot vLLM gave it; request ids still carry worker_index.
    engine_client_index: int | None = None
    # vLLM's `--pooler-config` (a JSON map) as given to the engine: its `task` and
    # `use_activation` are also the pooling routes' defaults (api/pooling/model.py).
    pooler_config: dict[str, Any] | None = None
    # The engine's `vllm serve` flags as forwarded to it: frontend/multimodal builds vLLM's model
    # config (multimodal limits, processor kwargs and cache) from the same flags.
    engine_args: list[str] = field(default_factory=list)
    # API keys are never put in the JSON (argv is world-readable): the supervisor passes them
    # in the API_KEYS_ENV environment variable and the worker fills this list from it.
    api_keys: list[str] = field(default_factory=list)
    # Security, request hygiene, reasoning and tool-call parsing (see WorkerPolicy).
    policy: WorkerPolicy = field(default_factory=WorkerPolicy)

    def engine_flag(self, name: str) -> str | None:
        """The value of an engine flag (`--max-logprobs`) as forwarded to the engine, or None."""
        return engine_flag_value(self.engine_args, name)

    def to_json(self) -> str:
        d = asdict(self)
        d["api_keys"] = []  # secrets travel in the environment, not on the command line
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> "WorkerConfig":
        d = json.loads(text)
        d["policy"] = WorkerPolicy(**d.get("policy") or {})
        return cls(**d)
