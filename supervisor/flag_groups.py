"""The supervisor's flag groups beside vLLM's serve flags (`supervisor/cli.py` builds the parser):
deployment and operations (`add_ops_arguments`) and media inputs (`add_media_arguments`), with
vLLM's integer syntax for lengths."""

from __future__ import annotations

import argparse

from vllm_pyfrontend import environment
from vllm_pyfrontend.config import TOKENIZER_BACKENDS


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
                        "requests_per_second, tokens_per_minute, max_concurrency, max_tokens, max_storage_bytes, "
                        "admin}); reloaded "
                        "on SIGHUP")
    p.add_argument("--quota-store", default=None, metavar="URL",
                   help="redis://HOST:PORT/DB shared by replicas, so a tenant's limits hold across them "
                        "(default: the --response-store when it is Redis; else each replica counts its own)")
    p.add_argument("--quota-store-failure", choices=("open", "closed"), default="open",
                   help="while the quota store does not answer: open (each replica goes on with its own "
                        "counts; the default) or closed (limited tenants' requests get 503)")
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
                   default=environment.http_timeout_keep_alive(),
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
    p.add_argument("--tokenizer-backend", choices=TOKENIZER_BACKENDS, default=None,
                   help="the library that encodes prompts (default: $VLLM_PYFRONTEND_TOKENIZER_BACKEND, "
                        "else auto): auto (fastokens where it gives the tokenizers "
                        "library's ids; encodes 4-50x faster, for ~70 MiB of tables shared by the workers "
                        "and caches in each worker that grow with distinct prompt text, up to ~100 MiB), "
                        "fastokens (required: the start fails where it differs), or tokenizers (the least "
                        "memory)")
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
    p.add_argument("--batch-max-output-bytes", type=_non_negative_int, default=1024 ** 3,
                   help="one batch's output file at most, in bytes; the answers past it go to the error "
                        "file as `output_too_large` entries (default 1 GiB)")
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
