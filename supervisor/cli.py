"""`frontend-supervisor`: command line parsing, then `vllm_pyfrontend.supervisor.deployment.run`.

    frontend-supervisor [--workers N] [--host H] [--port P] [--engine vllm|sim] ...
                        <model> [vLLM engine flags]

The command line is `vllm serve`'s: flags the supervisor does not know are vLLM's engine flags
and go to the engine unchanged; vLLM's frontend (API-server) flags are either the supervisor's or
refused at start with the reason (`frontend_flags.FRONTEND_FLAGS`, the one table of them). Some flags are read by the supervisor *and* given to the engine
(`--max-model-len`, `--max-num-seqs`, `--tokenizer`, `--served-model-name`,
`--generation-config`, the data-parallel layout). argparse's `parse_known_args` cannot do this
split: an unknown flag's value (`--dtype half`) would be taken for the positional model. So a small
scanner walks argv first, using the supervisor's own parser to know its flags' arity and
`vllm_flags` to know the forwarded ones', and only the supervisor's tokens reach argparse.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from vllm_pyfrontend.config import WorkerPolicy, engine_flag_value
from vllm_pyfrontend.server.tls import check_tls_files
from vllm_pyfrontend.supervisor.config_file import split_with_config
from vllm_pyfrontend.llm.lora import parse_lora_modules
from vllm_pyfrontend.supervisor.frontend_flags import is_refused, refusal
from vllm_pyfrontend.supervisor.options import DEFAULT_DP_RPC_PORT, SupervisorOptions
from vllm_pyfrontend.supervisor.vllm_flags import MULTI_VALUE_FLAGS, OPTIONAL_VALUE_FLAGS, normalize_flag, takes_value

DEMO_MODELS = ("demo:deepseek-v4",)

# Supervisor flags that are also vLLM engine flags: forwarded as written (normalized name).
_FORWARDED_AS_WRITTEN = frozenset(
    {"--max-model-len", "--max-num-seqs", "--tokenizer", "--served-model-name", "--generation-config",
     # the engine traces its own side too (vLLM's ObservabilityConfig), the workers the requests
     "--otlp-traces-endpoint", "--collect-detailed-traces",
     # media: the workers fetch and decode; the engine sizes its profiling and encoder cache
     # by the limits (vLLM's ModelConfig / MultiModalConfig keep all four)
     "--allowed-local-media-path", "--allowed-media-domains", "--media-io-kwargs", "--limit-mm-per-prompt"}
)


def default_workers() -> int:
    """CPU cores this process may run on (respects taskset/cgroup cpusets)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def human_readable_int(text: str) -> int:
    """vLLM's integer syntax for lengths: `32k` = 32000, `32K` = 32768, `-1`/`auto` = -1."""
    value = text.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    if value and value[-1] in "kmgtKMGT":
        number, suffix = value[:-1], value[-1]
        if suffix.islower():
            return int(float(number) * 1000 ** ("kmgt".index(suffix) + 1))
        return int(number) * 1024 ** ("KMGT".index(suffix) + 1)
    return int(value)


def _human_int_arg(text: str) -> int:
    try:
        return human_readable_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None


def _non_negative_int(text: str) -> int:
    value = _human_int_arg(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


#: flags whose --help names every registered parser of a kind (dest -> kind)
_PARSER_NAME_FLAGS = {"tool_call_parser": "tool", "reasoning_parser": "reasoning"}


class _SupervisorParser(argparse.ArgumentParser):
    """Names every registered parser under --tool-call-parser / --reasoning-parser when the
    help is formatted: the registries import every parser module (about 9 MiB), which the
    supervisor does not otherwise load."""

    def format_help(self) -> str:
        from vllm_pyfrontend.parsers.catalog import names_help

        for action in self._actions:
            kind = _PARSER_NAME_FLAGS.get(action.dest)
            if kind is not None:
                action.help = f"{names_help(kind)}, or auto"
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    p = _SupervisorParser(
        prog="frontend-supervisor",
        usage="frontend-supervisor [options] <model> [vLLM engine flags]",
        description=(
            "Launch (or join) vLLM's EngineCore and serve an OpenAI-compatible API from N worker "
            "processes. Flags not listed here are vLLM's and are passed to the engine."
        ),
        allow_abbrev=False,  # a prefix of ours must not swallow one of vLLM's flags
    )
    p.add_argument("model", help="local model directory, or demo:deepseek-v4 (with --engine sim)")
    p.add_argument(
        "--workers", "--api-server-count", "-asc", type=int, default=None,
        help="HTTP worker processes (default: number of CPU cores)",
    )
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--uds", default=None, metavar="PATH",
                   help="serve on this Unix domain socket instead of --host/--port")
    p.add_argument("--grpc-port", type=int, default=None, metavar="PORT",
                   help="also serve vLLM's gRPC service (vllm.grpc.engine.VllmEngine, as `vllm serve "
                        "--grpc`) on this port, shared by the workers (needs the grpc packages)")
    p.add_argument("--engine", choices=("vllm", "sim"), default="vllm")
    p.add_argument("--routing-policy", choices=("least-load", "prefix-aware"), default=None,
                   help="which data parallel engine takes a request: the least loaded, or weighing the "
                        "prompt's blocks each engine holds in its prefix cache (needs the engines' KV events, "
                        "--kv-events-config) against load; default: prefix-aware when --kv-events-config "
                        "enables KV events, else least-load")
    p.add_argument("--routing-prefix-weight", type=float, default=None, metavar="W",
                   help="prefix-aware: a prompt an engine holds whole counts as W * (mean load + 8) "
                        "requests less load there (default 1)")
    p.add_argument("--kv-events-host", default=None, metavar="HOST",
                   help="where the workers reach the engines' KV event publishers (default 127.0.0.1)")
    p.add_argument("--enable-prompt-tokens-details", action="store_true", default=None,
                   help="report usage.prompt_tokens_details.cached_tokens (prompt tokens the engine "
                        "found in its prefix cache), as vLLM")
    p.add_argument("--sim-step-time", type=float, default=None, help="simulated engine step time (s)")
    p.add_argument(
        "--shutdown-timeout", type=float, default=30.0,
        help="seconds workers may drain in-flight requests on SIGTERM",
    )
    p.add_argument(
        "--no-worker-preload", dest="worker_preload", action="store_false",
        help="start each worker as its own interpreter instead of forking it from a preloaded "
        "worker template (which shares the tokenizer and modules between workers)",
    )
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--chat-template", default=None, help="template file or inline template text")
    p.add_argument("--generation-config", default="auto")
    p.add_argument("--engine-ready-timeout", "--engine-ready-timeout-secs", type=float, default=600.0)
    p.add_argument(
        "--on-engine-death", choices=("exit", "restart"), default="exit",
        help="when the engine dies: fail in-flight requests and exit 1 (default; let a process "
        "manager restart the deployment), or restart the engine and the workers in place",
    )
    p.add_argument(
        "--engine-timeout", type=float, default=60.0,
        help="seconds an engine may stay silent (no output, no answer "
        "to a liveness probe) before its requests fail with 503 and /health turns 503; 0: never",
    )
    p.add_argument(
        "--migration-limit", type=int, default=3,
        help="times a request may move to a live engine when its engine goes down (killed, "
        "stalled past --engine-timeout, ENGINE_CORE_DEAD, restarted), continuing where it was; "
        "0: it fails with 503 as before",
    )
    p.add_argument(
        "--migration-timeout", type=float, default=30.0,
        help="seconds a moved request (or, during an engine restart, a new one) waits for a live "
        "engine before it fails",
    )
    p.add_argument("--worker-ready-timeout", type=float, default=120.0)
    p.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error", "critical"),
    )
    # Read by the supervisor and given to the engine.
    p.add_argument("--max-model-len", type=_human_int_arg, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument(
        "--data-parallel-size-local", "-dpl", type=int, default=None,
        help="DP ranks launched here (0: launch none, wait for headless engines to join)",
    )
    p.add_argument("--data-parallel-start-rank", "-dpr", type=int, default=0)
    p.add_argument("--data-parallel-address", "-dpa", default=None)
    p.add_argument("--data-parallel-rpc-port", "-dpp", type=int, default=DEFAULT_DP_RPC_PORT)
    add_ops_arguments(p)
    return p


def add_ops_arguments(p: argparse.ArgumentParser) -> None:
    """Security, request hygiene and config-file flags (vLLM's names and defaults). Each
    policy flag's destination is a WorkerPolicy field of the same name."""
    bool_flag = argparse.BooleanOptionalAction
    p.add_argument("--config", default=None, metavar="FILE",
                   help="YAML file of flags (same names; the command line wins)")
    p.add_argument("--api-key", nargs="+", default=None,
                   help="API keys required on /v1 routes (any of them; default: $VLLM_API_KEY)")
    p.add_argument("--api-keys-file", default=None, metavar="FILE",
                   help="named API keys with per-tenant limits (YAML or JSON list of {name, key | key_sha256, "
                        "requests_per_second, tokens_per_minute, max_concurrency, max_tokens}); reloaded on SIGHUP")
    p.add_argument("--metrics-require-api-key", action=bool_flag, default=False,
                   help="also require an API key on /metrics")
    p.add_argument("--allowed-origins", nargs="+", default=[], help="CORS allowed origins")
    p.add_argument("--allowed-methods", nargs="+", default=["*"], help="CORS allowed methods")
    p.add_argument("--allowed-headers", nargs="+", default=["*"], help="CORS allowed headers")
    p.add_argument("--allow-credentials", action=bool_flag, default=False, help="CORS: allow credentials")
    p.add_argument("--enable-request-id-headers", action=bool_flag, default=False,
                   help="echo X-Request-Id (or a fresh id) on every response")
    p.add_argument("--enable-log-requests", action=bool_flag, default=False,
                   help="one structured (JSON) log line per request, with its id")
    p.add_argument("--max-log-len", type=int, default=None, help="truncate logged values to this length")
    p.add_argument("--trust-request-chat-template", action=bool_flag, default=False,
                   help="accept a chat_template in requests (refused by default)")
    # Reasoning and tool calls (vLLM's names; the parsers run in the workers, not the engine).
    p.add_argument("--enable-auto-tool-choice", action=bool_flag, default=False,
                   help='let the model call tools with tool_choice "auto" (needs --tool-call-parser)')
    p.add_argument("--tool-call-parser", default=None,
                   help="a registered tool parser (all named by --help), or auto")
    p.add_argument("--tool-parser-plugin", default=None, metavar="FILE",
                   help="a Python file that registers tool parsers (frontend/parsers/tool/plugin.py); "
                        "the names it registers can be given to --tool-call-parser")
    p.add_argument("--reasoning-parser", default=None,
                   help="a registered reasoning parser (all named by --help), or auto")
    p.add_argument("--reasoning-parser-plugin", default="",
                   help="a module name or Python file that registers reasoning parsers "
                        "(frontend/parsers/reasoning/plugin.py), loaded before --reasoning-parser")
    # vLLM frontend switches whose meaning already holds here (supervisor/frontend_flags.py).
    p.add_argument("--disable-uvicorn-access-log", action=bool_flag, default=False,
                   help="accepted: no access log is written here")
    p.add_argument("--disable-fastapi-docs", action=bool_flag, default=False,
                   help="accepted: there are no docs pages here (only /openapi.json)")
    p.add_argument("--enable-server-load-tracking", action=bool_flag, default=False,
                   help="accepted: /load always reports each worker's in-flight requests")
    # Admission control (vLLM's SchedulerConfig names; enforced by the workers, deployment-wide).
    p.add_argument("--max-num-queued-reqs", type=_non_negative_int, default=None,
                   help="refuse new requests (503 + Retry-After) while this many engine requests "
                        "are unfinished (waiting or running); a request with n choices counts n")
    p.add_argument("--max-num-queued-tokens", type=_non_negative_int, default=None,
                   help="refuse new requests (503 + Retry-After) while the prompt tokens of "
                        "requests still in prefill reach this many")
    # Tracing (vLLM's ObservabilityConfig names).
    p.add_argument("--otlp-traces-endpoint", default=None,
                   help="OTLP endpoint (grpc, or OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf) "
                        "receiving one span per request")
    p.add_argument("--collect-detailed-traces", nargs="+", default=None,
                   help="engine-side detailed traces (given to the engine; needs --otlp-traces-endpoint)")
    # Connection hygiene (seconds; 0 disables) and TLS, in every worker.
    p.add_argument("--http-timeout-keep-alive", type=float,
                   default=float(os.environ.get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE") or 5),
                   help="close a keep-alive connection idle this long (default: "
                        "$VLLM_HTTP_TIMEOUT_KEEP_ALIVE, else 5, as vLLM)")
    p.add_argument("--http-header-timeout", type=float, default=60.0,
                   help="close a connection whose request head is not complete this long after "
                        "it opened (or after the head's first byte, for a keep-alive request)")
    p.add_argument("--http-body-timeout", type=float, default=0.0,
                   help="answer 408 to a request whose body is not complete this long after its "
                        "head (default 0: no limit)")
    p.add_argument("--max-connections-per-worker", type=int, default=0,
                   help="open connections a worker accepts; past it a new connection gets a 503 "
                        "and is closed (default 0: no cap)")
    p.add_argument("--sse-keep-alive-interval", type=float, default=0.0,
                   help='write a ": keep-alive" SSE comment on a stream silent this long (default 0: never)')
    # Stored Responses (/v1/responses with store, previous_response_id, background).
    p.add_argument("--response-store", default=None, metavar="URL",
                   help="where stored responses live: redis://HOST:PORT/DB (shared by replicas), "
                        "sqlite:///PATH, or none (nothing stored, as vLLM without "
                        "VLLM_ENABLE_RESPONSES_API_STORE=1). Default: SQLite in the runtime directory, "
                        "shared by the workers; off when VLLM_ENABLE_RESPONSES_API_STORE=0 (this flag wins)")
    p.add_argument("--response-store-ttl", type=float, default=24 * 3600.0,
                   help="seconds a stored response is kept (default 86400)")
    p.add_argument("--response-store-max-entries", type=_non_negative_int, default=10000,
                   help="stored responses kept at most; the oldest go first (default 10000)")
    p.add_argument("--response-store-max-bytes", type=_non_negative_int, default=512 * 1024 * 1024,
                   help="bytes of stored responses kept in all; the oldest go first (default 512 MiB)")
    p.add_argument("--response-store-max-record-bytes", type=_non_negative_int, default=4 * 1024 * 1024,
                   help="bytes one stored response may take (default 4 MiB): a request whose input "
                        "and metadata alone are over it is refused (400)")
    # The Files and Batch APIs (/v1/files, /v1/batches), run by the workers.
    p.add_argument("--files-dir", default=None, metavar="DIR",
                   help="where uploaded and batch output files live, with the files' and batches' SQLite "
                        "store unless --response-store is Redis (default: in the runtime directory, removed "
                        "when the supervisor exits; set it to keep batches across restarts; replicas sharing "
                        "a Redis store need a directory they all mount)")
    p.add_argument("--files-max-bytes", type=_non_negative_int, default=200 * 1024 * 1024,
                   help="largest file upload in bytes (default 200 MiB)")
    p.add_argument("--files-max-total-bytes", type=_non_negative_int, default=10 * 1024 ** 3,
                   help="all stored files together, in bytes; past it uploads get 413 (default 10 GiB)")
    p.add_argument("--batch-max-concurrency", type=_non_negative_int, default=32,
                   help="batch lines running at once in the whole deployment (default 32; 0: this "
                        "deployment runs no batch lines)")
    p.add_argument("--batch-priority", type=int, default=1,
                   help="engine `priority` of batch lines (default 1: after interactive requests, whose "
                        "default is 0; the engine orders by it with --scheduling-policy priority)")
    p.add_argument("--batch-lease-timeout", type=float, default=30.0,
                   help="seconds after which the lines of a worker that stopped renewing its lease run "
                        "again on another worker (default 30)")
    p.add_argument("--batch-max-requests", type=_non_negative_int, default=50000,
                   help="request lines per batch input file (default 50000, as OpenAI)")
    p.add_argument("--ssl-keyfile", default=None, help="TLS private key file (with --ssl-certfile)")
    p.add_argument("--ssl-certfile", default=None, help="TLS certificate chain file: serve https")
    p.add_argument("--ssl-ca-certs", default=None, help="CA certificates that sign client certificates")
    p.add_argument("--ssl-cert-reqs", type=int, default=0,
                   help="client certificates: 0 not asked, 1 optional, 2 required (ssl.VerifyMode)")
    p.add_argument("--ssl-ciphers", default=None, help="TLS cipher suites (TLS 1.2 and below), OpenSSL syntax")
    p.add_argument("--enable-ssl-refresh", action=bool_flag, default=False,
                   help="reload the certificate chain and client CA files when they change (new "
                        "connections get them; open ones keep theirs)")
    p.add_argument("--lora-modules", nargs="+", default=[], metavar="NAME=PATH",
                   help="LoRA adapters to serve: name=path, or JSON {\"name\", \"path\", \"base_model_name\"} "
                        "(the engine needs --enable-lora)")
    p.add_argument("--enable-scale-out", action=bool_flag, default=False,
                   help="serve vLLM's scale-out routes: /inference/v1/generate (token ids in and out), "
                        "render and derender (else they answer 403)")
    p.add_argument("--tokens-only", action=bool_flag, default=False,
                   help="vLLM's tokens-only mode: the scale-out routes served without --enable-scale-out, "
                        "/inference/v1/generate never detokenizes (output_mode 'tokens' only, no stop "
                        "strings), and /abort_requests is served as well")
    p.add_argument("--enable-tokenizer-info-endpoint", action=bool_flag, default=False,
                   help="serve GET /tokenizer_info (the tokenizer's configuration and chat template)")
    p.add_argument("--return-tokens-as-token-ids", action=bool_flag, default=False,
                   help="logprob tokens as 'token_id:N' for every request (vLLM's flag)")
    p.add_argument("--enable-force-include-usage", action=bool_flag, default=False,
                   help="usage (and continuous usage stats) on every stream (vLLM's flag)")
    p.add_argument("--default-chat-template-kwargs", type=_json_object("--default-chat-template-kwargs"),
                   default=None, help="JSON object of chat template kwargs for every request; a "
                   "request's own chat_template_kwargs win (e.g. '{\"enable_thinking\": false}')")
    p.add_argument("--response-role", default="assistant",
                   help="the role of generated chat messages (with add_generation_prompt)")
    p.add_argument("--exclude-tools-when-tool-choice-none", action=bool_flag, default=False,
                   help="with tool_choice \"none\", do not give the tools to the chat template")
    p.add_argument("--root-path", default="",
                   help="a path prefix a proxy adds: every route answers both with and without it")
    p.add_argument("--trust-request-mm-kwargs", action=bool_flag, default=False,
                   help="take a request's own mm_processor_kwargs and media_io_kwargs (refused otherwise)")
    p.add_argument("--fingerprint-mode", choices=("full", "hash", "custom", "none"), default="full",
                   help="system_fingerprint: full (version, parallelism, hash), hash, custom "
                   "(--fingerprint-value) or none (null)")
    p.add_argument("--fingerprint-value", default=None, help="the fingerprint with --fingerprint-mode custom")
    p.add_argument("--uvicorn-log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug", "trace"),
                   help="the HTTP server's own log level (vLLM's flag; aiohttp's loggers here)")
    p.add_argument("--log-error-stack", action=bool_flag, default=False,
                   help="log the stack trace of every error response (the response never carries it)")
    p.add_argument("--chat-template-content-format", choices=("auto", "string", "openai"), default="auto",
                   help="message content handed to the chat template: a string (auto, string) or OpenAI's "
                   "list of parts (openai)")
    p.add_argument("--enable-per-request-metrics", action=bool_flag, default=False,
                   help="per-request timing metrics (queue, time to first token, decode, mean ITL, "
                   "tokens/s) in chat and completion answers (`metrics`); needs the engine's stats "
                   "(not with --disable-log-stats)")
    p.add_argument("--enable-log-outputs", action=bool_flag, default=False,
                   help="log generated outputs (text and finish reason at INFO, token ids at DEBUG); "
                   "requires --enable-log-requests")
    p.add_argument("--enable-log-deltas", action=bool_flag, default=True,
                   help="with --enable-log-outputs, log each streamed delta too (--no-enable-log-deltas: "
                   "only the complete output)")
    p.add_argument("--anthropic-disabled-thinking-effort", default="auto",
                   choices=("auto", "none", "low", "medium", "high", "xhigh", "max"),
                   help="/v1/messages: the reasoning_effort of requests with thinking disabled (auto: low "
                   "when the chat template rejects none or renders it like a thinking effort, else none)")
    p.add_argument("--h11-max-incomplete-event-size", type=_non_negative_int, default=4194304, metavar="BYTES",
                   help="the most bytes of a request head (vLLM's h11 limit; past it: 400, connection closed)")
    p.add_argument("--h11-max-header-count", type=_non_negative_int, default=256, metavar="N",
                   help="the most header lines of a request (more: 400)")
    add_media_arguments(p)


def _json_object(flag: str):
    def parse(text: str) -> dict:
        from vllm_pyfrontend.media.policy import parse_json_arg  # only when the flag is given

        try:
            return parse_json_arg(text, flag)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def _limit_mm_per_prompt(text: str) -> dict:
    from vllm_pyfrontend.media.policy import parse_json_arg, parse_limit_mm_per_prompt

    try:
        value = parse_json_arg(text, "--limit-mm-per-prompt")
        parse_limit_mm_per_prompt(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def add_media_arguments(p: argparse.ArgumentParser) -> None:
    """Media inputs (frontend/media): vLLM's flags (also given to the engine) and ours."""
    p.add_argument("--allowed-local-media-path", default=None, metavar="DIR",
                   help="let requests read file:// media from under this directory (a security risk: "
                        "trusted environments only)")
    p.add_argument("--allowed-media-domains", nargs="+", default=None, metavar="HOST",
                   help="only media URLs on these hosts (every redirect too)")
    p.add_argument("--media-io-kwargs", type=_json_object("--media-io-kwargs"), default=None, metavar="JSON",
                   help='media decoder settings per modality, e.g. \'{"video": {"num_frames": 40}}\'')
    p.add_argument("--limit-mm-per-prompt", type=_limit_mm_per_prompt, default=None, metavar="JSON",
                   help='items per prompt per modality, e.g. \'{"image": 2, "video": 0}\' (default 999)')
    p.add_argument("--mm-workers", type=_non_negative_int, default=0,
                   help="threads fetching and decoding media in each worker (default 0: from the cores)")
    p.add_argument("--allow-private-media-addresses", action=argparse.BooleanOptionalAction, default=False,
                   help="let media URLs reach loopback, private, link-local and reserved addresses "
                        "(refused by default, every redirect hop checked)")
    p.add_argument("--allowed-private-media-networks", nargs="+", default=[], metavar="CIDR",
                   help="private networks media URLs may reach anyway, e.g. an internal image store")


def profiler_configured(engine_args: Sequence[str]) -> bool:
    """Whether `--profiler-config` (an engine flag, forwarded) names a profiler: vLLM serves
    /start_profile and /stop_profile only then."""
    import json

    for i, arg in enumerate(engine_args):
        if arg == "--profiler-config" and i + 1 < len(engine_args):
            value = engine_args[i + 1]
        elif arg.startswith("--profiler-config="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("--profiler-config."):  # vLLM's dotted form: --profiler-config.profiler torch
            return True
        else:
            continue
        try:
            cfg = json.loads(value)
        except ValueError:
            return False
        return isinstance(cfg, dict) and cfg.get("profiler") is not None
    return False


def split_argv(
    argv: Sequence[str], parser: argparse.ArgumentParser
) -> tuple[list[str], str | None, list[str]]:
    """Split argv into (supervisor tokens, model, forwarded engine tokens).

    Supervisor flags in `_FORWARDED_AS_WRITTEN` land in both lists. Flag names are normalized
    (`--max_model_len` -> `--max-model-len`), as vLLM's own parser does.
    """
    own_actions = parser._option_string_actions  # the parser's own flag table
    own: list[str] = []
    forwarded: list[str] = []
    model: str | None = None
    # Where the last multi-value flag's values ended, in `own` and `forwarded` (see below).
    last_multi: tuple[int, int, int] | None = None
    tokens = list(argv)
    i = 0

    def take_values(flag: str, nargs: object) -> list[str]:
        """The value tokens after `flag` (at tokens[i+1:]), by argparse arity."""
        rest = tokens[i + 1 :]
        if nargs == 0:
            return []
        if nargs in ("+", "*"):
            n = 0
            while n < len(rest) and not rest[n].startswith("-"):
                n += 1
            return rest[:n]
        if nargs == "?":
            return rest[:1] if rest and not rest[0].startswith("-") else []
        return rest[:1]  # one value, even if it looks like a flag (`--max-model-len -1`)

    while i < len(tokens):
        token = tokens[i]
        if token == "--":  # everything after is the engine's
            forwarded.extend(tokens[i + 1 :])
            break
        if not token.startswith("-") or token == "-":
            if model is None:
                model = token
            else:
                parser.error(f"unexpected argument {token!r} (the model is already {model!r})")
            i += 1
            continue
        name, eq, value = token.partition("=")
        name = normalize_flag(name)
        written = [name + eq + value] if eq else [name]
        action = own_actions.get(name)
        if action is None and is_refused(name):  # a vLLM frontend flag not implemented here
            if eq:
                values, given = [], value
            elif name in MULTI_VALUE_FLAGS:
                values = take_values(name, "+")
                given = values
            elif takes_value(name):
                values = tokens[i + 1 : i + 2]
                given = values[0] if values else None
            else:
                values, given = [], True
            why = refusal(name, given)
            if why is not None:
                parser.error(why)
            i += 1 + len(values)  # written with vLLM's default: changes nothing, not the engine's
            continue
        if action is not None:
            values = [] if eq else take_values(name, action.nargs)
            own.extend(written + values)
            canonical = action.option_strings[0]
            if canonical in _FORWARDED_AS_WRITTEN:
                forwarded.extend([canonical + eq + value] if eq else [canonical] + values)
            if action.nargs in ("+", "*") and len(values) >= 2:
                last_multi = (len(own), len(forwarded), canonical in _FORWARDED_AS_WRITTEN)
        elif eq:
            forwarded.extend(written)
            values = []
        elif name in MULTI_VALUE_FLAGS:
            values = take_values(name, "+")
            forwarded.extend(written + values)
        elif name in OPTIONAL_VALUE_FLAGS:
            values = take_values(name, "?")
            forwarded.extend(written + values)
        elif name.startswith("-O") and not name.startswith("--") and len(name) > 2:
            values = []  # `-O3`: value attached
            forwarded.extend(written)
        elif takes_value(name):
            values = tokens[i + 1 : i + 2]
            forwarded.extend(written + values)
        else:
            values = []
            forwarded.extend(written)
        i += 1 + len(values)
    if model is None and last_multi is not None:
        # `--served-model-name a /models/x`: argparse (and vLLM) would swallow the model into
        # the names; with no other positional, the last of the values must be the model.
        own_end, fwd_end, in_forwarded = last_multi
        model = own.pop(own_end - 1)
        if in_forwarded:
            forwarded.pop(fwd_end - 1)
    return own, model, forwarded


def parse_args(argv: Sequence[str] | None = None) -> SupervisorOptions:
    """Parse the command line. The model is kept as written (see `resolve_model`)."""
    parser = build_parser()
    own, model, forwarded = split_with_config(sys.argv[1:] if argv is None else argv, parser, split_argv)
    ns = parser.parse_args(own + (["--", model] if model is not None else []))

    workers = ns.workers if ns.workers is not None else default_workers()
    if workers < 1:
        parser.error("--workers must be at least 1")
    dp, start = ns.data_parallel_size, ns.data_parallel_start_rank
    local = ns.data_parallel_size_local
    if dp < 1:
        parser.error("--data-parallel-size must be at least 1")
    if local is not None and not 0 <= local <= dp:
        parser.error("--data-parallel-size-local must be between 0 and --data-parallel-size")
    if start < 0 or start + (dp if local is None else local) > dp:
        parser.error("--data-parallel-start-rank + local ranks exceed --data-parallel-size")
    if ns.enable_log_outputs and not ns.enable_log_requests:  # vLLM's check, its words
        parser.error("--enable-log-outputs requires --enable-log-requests")
    if ns.h11_max_incomplete_event_size < 1 or ns.h11_max_header_count < 1:
        parser.error("--h11-max-incomplete-event-size and --h11-max-header-count must be at least 1")
    if ns.enable_per_request_metrics and "--disable-log-stats" in forwarded:
        parser.error("--enable-per-request-metrics requires engine statistics logging; remove "
                     "--disable-log-stats to enable per-request metrics.")
    if ns.collect_detailed_traces and not ns.otlp_traces_endpoint:
        parser.error("--collect-detailed-traces requires --otlp-traces-endpoint")
    if ns.shutdown_timeout < 0:
        parser.error("--shutdown-timeout must be >= 0")
    for flag in ("http_timeout_keep_alive", "http_header_timeout", "http_body_timeout",
                 "max_connections_per_worker", "sse_keep_alive_interval"):
        if getattr(ns, flag) < 0:
            parser.error(f"--{flag.replace('_', '-')} must be >= 0")
    if ns.grpc_port is not None:
        if not 1 <= ns.grpc_port <= 65535:
            parser.error("--grpc-port must be between 1 and 65535 (the workers share it)")
        if ns.grpc_port == ns.port and not ns.uds:
            parser.error("--grpc-port must differ from --port when HTTP uses TCP")
    if ns.allowed_local_media_path:
        if not os.path.isdir(ns.allowed_local_media_path):  # vLLM checks it at start too
            parser.error(f"Invalid `--allowed-local-media-path`: {ns.allowed_local_media_path} is not an "
                         "existing directory.")
        ns.allowed_local_media_path = os.path.abspath(ns.allowed_local_media_path)
    try:
        import ipaddress

        for net in ns.allowed_private_media_networks:
            ipaddress.ip_network(net, strict=False)
    except ValueError as e:
        parser.error(f"--allowed-private-media-networks: {e}")
    ns.profiler_enabled = profiler_configured(forwarded)  # the engine's flag: /start_profile exists
    interval = engine_flag_value(forwarded, "--stream-interval")  # the engine's flag, the workers' effect
    if interval is not None and not (interval.isdigit() and int(interval) >= 1):
        parser.error(f"--stream-interval must be an integer >= 1, got {interval!r}")
    policy = WorkerPolicy.from_mapping(vars(ns))
    if policy.reasoning_parser_plugin:  # fail at start, as the workers would
        from vllm_pyfrontend.parsers.reasoning.plugin import load_reasoning_parser_plugin

        try:
            load_reasoning_parser_plugin(policy.reasoning_parser_plugin)
        except Exception as e:  # the user's module: any error stops the start
            parser.error(f"--reasoning-parser-plugin: {type(e).__name__}: {e}")
    try:
        check_tls_files(policy)
        parse_lora_modules(policy.lora_modules)  # a malformed --lora-modules stops the start
        if policy.tool_parser_plugin:  # a broken plugin or an unknown parser name stops the start
            from vllm_pyfrontend.parsers.tool.plugin import check_tool_parser_plugin

            check_tool_parser_plugin(policy.tool_parser_plugin, policy.tool_call_parser)
    except ValueError as e:
        parser.error(str(e))

    # vLLM: --api-key wins over VLLM_API_KEY.
    api_keys = [k for k in (ns.api_key or [os.environ.get("VLLM_API_KEY") or ""]) if k]
    if policy.api_keys_file:  # a bad keys file stops the start, naming the entry and field
        from vllm_pyfrontend.tenants.keys_file import KeysFileError, load_keys_file

        policy.api_keys_file = os.path.abspath(policy.api_keys_file)
        try:
            load_keys_file(policy.api_keys_file, api_keys)
        except KeysFileError as e:
            parser.error(f"--api-keys-file: {e}")

    # The engine's DP layout, explicit, so `vllm serve --headless` and we agree on it.
    engine_args = list(forwarded)
    if dp > 1:
        engine_args += [
            "--data-parallel-size", str(dp),
            "--data-parallel-size-local", str(dp if local is None else local),
        ]
        if start:
            engine_args += ["--data-parallel-start-rank", str(start)]

    return SupervisorOptions(
        model=ns.model,
        model_arg=ns.model,
        workers=workers,
        host=ns.host,
        port=ns.port,
        uds=ns.uds,
        grpc_port=ns.grpc_port,
        engine=ns.engine,
        sim_step_time=ns.sim_step_time,
        shutdown_timeout=ns.shutdown_timeout,
        served_model_names=list(ns.served_model_name or []),
        tokenizer=ns.tokenizer,
        chat_template=ns.chat_template,
        engine_ready_timeout=ns.engine_ready_timeout,
        engine_timeout=ns.engine_timeout,
        on_engine_death=ns.on_engine_death,
        worker_ready_timeout=ns.worker_ready_timeout,
        worker_preload=ns.worker_preload,
        log_level=ns.log_level,
        generation_config=ns.generation_config,
        max_model_len=None if ns.max_model_len in (None, -1) else ns.max_model_len,
        max_num_seqs=ns.max_num_seqs,
        data_parallel_size=dp,
        data_parallel_size_local=local,
        data_parallel_start_rank=start,
        data_parallel_address=ns.data_parallel_address,
        data_parallel_rpc_port=ns.data_parallel_rpc_port,
        engine_args=engine_args,
        api_keys=api_keys,
        policy=policy,
    )


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vllm-pyfrontend")


def resolve_model(model_arg: str, engine: str) -> str:
    """The local model directory for `model_arg`; `demo:*` models are written to the cache."""
    if model_arg.startswith("demo:"):
        if model_arg not in DEMO_MODELS:
            raise ValueError(f"unknown demo model {model_arg!r} (known: {', '.join(DEMO_MODELS)})")
        if engine != "sim":
            raise ValueError(f"{model_arg} has no weights: use it with --engine sim")
        from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4

        return materialize_deepseek_v4(os.path.join(cache_dir(), "deepseek-v4"))
    if not os.path.isdir(model_arg):
        raise ValueError(f"model {model_arg!r} is not a local directory")
    return os.path.abspath(model_arg)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = parse_args(argv)
    except SystemExit as e:  # --help, or a usage error already printed by argparse
        return e.code if isinstance(e.code, int) else 2
    from vllm_pyfrontend.supervisor.deployment import configure_logging, run

    configure_logging(options.log_level)
    try:
        options.model = resolve_model(options.model, options.engine)
        if "hf" in (options.policy.tool_call_parser, options.policy.reasoning_parser):
            # the `hf` parsers' package imports every parser: only when one of them is chosen
            from vllm_pyfrontend.parsers.response_template import check_hf_model_dir

            check_hf_model_dir(options.policy.tool_call_parser, options.policy.reasoning_parser,
                               options.tokenizer or options.model)
    except (ValueError, OSError) as e:
        logging.getLogger("vllm_pyfrontend.supervisor").error("%s", e)
        return 2
    return run(options)


if __name__ == "__main__":
    sys.exit(main())
