"""Every frontend (API-server) flag of `vllm serve` and `vllm-rs serve`, classified once.

`frontend-supervisor` takes `vllm serve`'s command line. Flags it does not know go to the engine
(supervisor/cli.py), which is right for engine flags and wrong for frontend flags: the engine
would ignore them (or refuse to start), and a TLS key or an API-server option would be silently
lost. So each frontend flag is here, with what this frontend does with it:

- "implemented by <where>": the flag is ours, with vLLM's meaning;
- "forwarded to the engine": vLLM's meaning is the engine's business;
- "refused: <reason>": the supervisor stops at start with that reason (a flag written with
  vLLM's default value changes nothing and is accepted, see `VLLM_DEFAULTS`).

The list is vLLM 0.32's `make_arg_parser` minus its `AsyncEngineArgs` (the `Frontend` group and
the serve-level flags), plus the vllm-rs 0.33 `serve --help` flags that vLLM's parser lacks;
tests/supervisor/test_frontend_flags.py walks vLLM's parser (and vllm-rs's help when the binary
is there), so a new upstream frontend flag fails the test until it is classified here.
"""

from __future__ import annotations

from typing import Any

_CLI = "supervisor/cli.py"
_MW = "frontend/server/middleware.py"
_TLS = "frontend/server/tls.py (TLS in every worker; files checked at start)"

FRONTEND_FLAGS: dict[str, str] = {
    # -- serve-level ------------------------------------------------------------------------
    "--headless": "refused: frontend-supervisor always serves HTTP; run `vllm serve --headless` "
                  "for an engine alone (it can join with --data-parallel-size-local 0)",
    "--api-server-count": f"implemented by {_CLI} (--workers: worker processes on one port)",
    "--config": "implemented by supervisor/config_file.py (YAML file of flags)",
    "--grpc": "refused: HTTP is always served; use --grpc-port for vLLM's gRPC service beside it",
    # -- network and process ------------------------------------------------------------------
    "--host": f"implemented by {_CLI} (bind address)",
    "--port": f"implemented by {_CLI} (HTTP port, shared by the workers with SO_REUSEPORT)",
    "--uds": "implemented by supervisor/deployment.py (binds the Unix socket once; every worker "
             "serves on its fd)",
    "--grpc-port": "implemented by frontend/api/grpc (vLLM's VllmEngine gRPC service, as `vllm serve "
                   "--grpc` serves it, beside HTTP in every worker)",
    "--root-path": "implemented by frontend/server/root_path.py (routes answer with and without "
                   "the prefix)",
    "--middleware": "implemented by frontend/server/asgi_middleware.py (Starlette's middleware stack "
                    "around this server's handlers: async functions and middleware classes, imported "
                    "at start)",
    "--ssl-keyfile": f"implemented by {_TLS}",
    "--ssl-certfile": f"implemented by {_TLS}",
    "--ssl-ca-certs": f"implemented by {_TLS}",
    "--ssl-cert-reqs": f"implemented by {_TLS}",
    "--ssl-ciphers": f"implemented by {_TLS}",
    "--enable-ssl-refresh": "implemented by frontend/server/tls_refresh.py (the files watched; the "
                            "context updated in place)",
    "--h11-max-incomplete-event-size": "implemented by frontend/server/connections.py (a request head "
                                       "still incomplete past it: 400 and the connection closed, as "
                                       "uvicorn answers h11; aiohttp's per-line limits raised to it)",
    "--h11-max-header-count": "implemented by frontend/server/worker.py (aiohttp's header count "
                              "limit: 400 past it)",
    "--uvicorn-log-level": "implemented by frontend/server/worker.py (the level of the HTTP server's "
                           "own loggers, aiohttp's here)",
    "--disable-uvicorn-access-log": "implemented by frontend/server/worker.py (no access log is "
                                    "written; --enable-log-requests logs one line per request)",
    "--disable-access-log-for-endpoints": "refused: there is no access log to filter (see "
                                          "--enable-log-requests)",
    "--disable-fastapi-docs": "implemented by frontend/server/app.py (there are no docs pages; "
                              "only /openapi.json)",
    "--enable-offline-docs": "refused: there are no docs pages (only /openapi.json)",
    "--data-parallel-supervisor-port": "refused: multi-port external LB mode (one API server per "
                                       "DP rank with a health supervisor) is not supported",
    "--dp-supervisor-probe-interval-s": "refused: multi-port external LB mode is not supported",
    "--dp-supervisor-probe-timeout-s": "refused: multi-port external LB mode is not supported",
    "--dp-supervisor-probe-failure-threshold": "refused: multi-port external LB mode is not supported",
    "--enable-scale-out": "implemented by frontend/api/openai (generate_routes.py: token-in "
                          "/inference/v1/generate; render_routes.py, derender_routes.py; 403 without "
                          "the flag)",
    # -- security and request hygiene ---------------------------------------------------------
    "--api-key": f"implemented by {_MW}",
    "--allow-credentials": f"implemented by {_MW} (CORS)",
    "--allowed-origins": f"implemented by {_MW} (CORS)",
    "--allowed-methods": f"implemented by {_MW} (CORS)",
    "--allowed-headers": f"implemented by {_MW} (CORS)",
    "--enable-request-id-headers": f"implemented by {_MW}",
    "--max-log-len": f"implemented by {_MW} (request logs)",
    "--enable-log-outputs": "implemented by frontend/serving/output_log.py (vLLM's \"Generated "
                            "response\" lines for chat completions, Messages and Responses, in the "
                            "request log)",
    "--enable-log-deltas": "implemented by frontend/serving/output_log.py (streamed deltas logged, "
                           "with --enable-log-outputs)",
    "--log-error-stack": "implemented by frontend/server/app.py (stack traces of error responses in the "
                         "worker's log)",
    "--enable-server-load-tracking": "implemented by frontend/server/app.py (/load always reports "
                                     "the deployment's in-flight requests, summed over the workers)",
    # -- chat templates, tools, reasoning -------------------------------------------------------
    "--chat-template": f"implemented by {_CLI} (frontend/chat/template.py)",
    "--trust-request-chat-template": "implemented by frontend/serving/state.py",
    "--chat-template-content-format": "implemented by frontend/serving/lowering/chat.py",
    "--default-chat-template-kwargs": "implemented by frontend/serving/lowering/chat.py (under a "
                                      "request's own chat_template_kwargs)",
    "--response-role": "implemented by frontend/api/openai/chat_routes.py",
    "--enable-auto-tool-choice": "implemented by frontend/chat/tools.py",
    "--tool-call-parser": "implemented by frontend/parsers/tool (registry)",
    "--tool-parser-plugin": "implemented by frontend/parsers/tool/plugin.py (loaded by the supervisor "
                            "and every worker)",
    "--tool-strict-level": "refused: vLLM's structural-tag tool calling (a grammar of each tool "
                           "parser's call markup) is not implemented: a required or named tool "
                           "choice is constrained by a JSON schema, auto tool calls and a tool's "
                           "`strict` are not constrained",
    "--tool-server": "refused: built-in tools (Responses API tool servers) are not supported",
    "--exclude-tools-when-tool-choice-none": "implemented by frontend/serving/lowering/chat.py",
    "--cohere-is-reasoning-model": "refused: Cohere's /cohere/v2/chat API is not served (the "
                                   "cohere_command3/4 tool and reasoning parsers are)",
    "--cohere-format": "refused: Cohere's tokenizer mode and prompt formats are not served (pass "
                       "chat_template_kwargs per request to the model's own template)",
    "--anthropic-disabled-thinking-effort": "implemented by frontend/api/anthropic/thinking_effort.py "
                                            "(auto: vLLM's probe of the chat template)",
    # -- responses -------------------------------------------------------------------------------
    "--lora-modules": "implemented by frontend/serving/lora.py (adapters shared by every worker)",
    "--trust-request-mm-kwargs": "implemented by frontend/api/openai/lowering.py (a request's own "
                                 "mm_processor_kwargs and media_io_kwargs are refused without it)",
    "--return-tokens-as-token-ids": "implemented by frontend/serving/formatters.py",
    "--enable-prompt-tokens-details": "implemented by frontend/serving/formatters.py (cached prompt tokens "
                                      "in chat and completions usage)",
    "--enable-per-request-metrics": "implemented by frontend/serving/per_request_metrics.py (`metrics` "
                                    "in chat, completion and Responses answers, from the engine's "
                                    "timestamps)",
    "--enable-force-include-usage": "implemented by frontend/serving/lowering/options.py",
    "--sse-keep-alive-interval": "implemented by frontend/serving/sse.py (keep-alive comments on a "
                                 "silent stream)",
    "--enable-tokenizer-info-endpoint": "implemented by frontend/api/admin/routes.py (/tokenizer_info)",
    "--tokens-only": "implemented by frontend/api/openai/generate_routes.py (scale-out routes on, "
                     "generate outputs never detokenized, stop strings refused, /abort_requests)",
    "--fingerprint-mode": "implemented by frontend/serving/state.py",
    "--fingerprint-value": "implemented by frontend/serving/state.py",
    "--enable-flash-late-interaction": "refused: late-interaction scoring is served through the "
                                       "pooled token embeddings; vLLM's fused (flash) scoring path "
                                       "is not implemented",
    # -- vllm-rs 0.33 serve flags that vLLM's parser lacks --------------------------------------
    "--engine-ready-timeout-secs": f"implemented by {_CLI} (--engine-ready-timeout)",
    "--http-timeout-keep-alive": "implemented by frontend/server/connections.py (idle keep-alive "
                                 "connections closed)",
    "--python": "refused: the engine runs on this supervisor's interpreter",
}

# vLLM 0.32's defaults of the refused flags that have a value (FrontendArgs; the test checks
# them against vLLM): a refused flag written with its default changes nothing and is accepted
# (`--uvicorn-log-level info`, `--no-enable-ssl-refresh`, `--enable-log-deltas`), and the
# drop-in, which receives every serve arg with its default, warns only about the others.
VLLM_DEFAULTS: dict[str, Any] = {
    "--uds": None, "--grpc-port": None, "--root-path": None, "--middleware": [],
    "--ssl-keyfile": None, "--ssl-certfile": None, "--ssl-ca-certs": None, "--ssl-cert-reqs": 0,
    "--ssl-ciphers": None, "--enable-ssl-refresh": False, "--h11-max-incomplete-event-size": 4194304,
    "--h11-max-header-count": 256, "--uvicorn-log-level": "info", "--disable-access-log-for-endpoints": None,
    "--enable-offline-docs": False, "--data-parallel-supervisor-port": 9256,
    "--dp-supervisor-probe-interval-s": 5.0, "--dp-supervisor-probe-timeout-s": 5.0,
    "--dp-supervisor-probe-failure-threshold": 3, "--enable-scale-out": False, "--enable-log-outputs": False,
    "--enable-log-deltas": True, "--log-error-stack": False, "--chat-template-content-format": "auto",
    "--default-chat-template-kwargs": None, "--response-role": "assistant",
    "--tool-strict-level": "auto", "--tool-server": None, "--exclude-tools-when-tool-choice-none": False,
    "--cohere-is-reasoning-model": True, "--cohere-format": "cmd4", "--anthropic-disabled-thinking-effort": "auto",
    "--lora-modules": None, "--trust-request-mm-kwargs": False, "--return-tokens-as-token-ids": False,
    "--enable-prompt-tokens-details": False, "--enable-per-request-metrics": False,
    "--enable-force-include-usage": False, "--sse-keep-alive-interval": 0, "--enable-tokenizer-info-endpoint": False,
    "--tokens-only": False, "--fingerprint-mode": "full", "--fingerprint-value": None,
    "--enable-flash-late-interaction": True,
    # serve-level switches, off by default
    "--headless": False, "--grpc": False,
}

ALIASES = {"-asc": "--api-server-count"}


def classify(flag: str) -> tuple[str, str | None]:
    """(canonical flag, its entry) for a normalized flag name; entry None: not a frontend flag."""
    flag = ALIASES.get(flag, flag)
    if flag in FRONTEND_FLAGS:
        return flag, FRONTEND_FLAGS[flag]
    if flag.startswith("--no-") and "--" + flag[5:] in FRONTEND_FLAGS:
        positive = "--" + flag[5:]
        return positive, FRONTEND_FLAGS[positive]
    return flag, None


def is_refused(flag: str) -> bool:
    """A frontend flag this frontend does not implement (whatever the form written)."""
    entry = classify(flag)[1]
    return entry is not None and entry.startswith("refused: ")


def _is_default(canonical: str, value: Any) -> bool:
    if canonical not in VLLM_DEFAULTS:
        return False
    default = VLLM_DEFAULTS[canonical]
    if isinstance(default, bool) or default is None or isinstance(value, bool) or value is None:
        return value == default or (default is None and value in ("", [], None))
    return str(value) == str(default) or (isinstance(default, list) and value in ([], ""))


def refusal(flag: str, value: Any = True) -> str | None:
    """Why `flag` (as written, normalized) with `value` is refused at start, or None. A switch's
    value is True for its positive form (`--no-X` means False, whatever `value` says)."""
    canonical, entry = classify(flag)
    if entry is None or not entry.startswith("refused: "):
        return None
    if flag.startswith("--no-"):
        value = False
    if _is_default(canonical, value):
        return None
    return f"{canonical} is not supported: {entry[len('refused: '):]}"


def refused_serve_args(args: dict[str, Any]) -> list[str]:
    """The reasons for the refused flags set (not at vLLM's default) in vLLM's jsonified serve
    args (the drop-in path, which receives every arg)."""
    reasons = []
    for flag in FRONTEND_FLAGS:
        key = flag[2:].replace("-", "_")
        if key in args:
            why = refusal(flag, args[key])
            if why is not None:
                reasons.append(why)
    return reasons


def markdown() -> str:
    """The flag table for docs/COMPATIBILITY.md (`python -m vllm_pyfrontend.supervisor.frontend_flags
    --markdown`): every frontend flag, implemented (where) or refused (why)."""
    rows = ["| flag | here | where / why |", "|---|---|---|"]
    for flag, entry in FRONTEND_FLAGS.items():
        kind, _, detail = entry.partition(" by ") if entry.startswith("implemented") else entry.partition(": ")
        status = "implemented" if entry.startswith("implemented") else kind.rstrip(":")
        rows.append(f"| `{flag}` | {status} | {detail.replace('|', '/')} |")
    implemented = sum(e.startswith("implemented") for e in FRONTEND_FLAGS.values())
    rows.append("")
    rows.append(f"{implemented} of {len(FRONTEND_FLAGS)} implemented, "
                f"{sum(e.startswith('refused') for e in FRONTEND_FLAGS.values())} refused.")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m vllm_pyfrontend.supervisor.frontend_flags --markdown")
    sys.stdout.write(markdown())
