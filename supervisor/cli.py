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

from vllm_pyfrontend import environment
from vllm_pyfrontend.config import WorkerPolicy, engine_flag_value, tokenizer_backend_from_env
from vllm_pyfrontend.server.tls import check_tls_files
from vllm_pyfrontend.supervisor.config_file import split_with_config
from vllm_pyfrontend.llm.lora import parse_lora_modules
# (human_readable_int: re-exported, vLLM's integer syntax)
from vllm_pyfrontend.supervisor.flag_groups import _human_int_arg, add_ops_arguments, human_readable_int  # noqa: F401
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
    p.add_argument("--middleware", action="append", default=[], metavar="IMPORT.PATH",
                   help="ASGI HTTP middleware around every request (vLLM's flag; repeat it for more, the last "
                        "one outermost): an async function (request, call_next), installed as Starlette's "
                        "BaseHTTPMiddleware dispatch, or a middleware class taking the app (a "
                        "BaseHTTPMiddleware subclass or a pure ASGI middleware); imported at start")
    p.add_argument("--engine", choices=("vllm", "sim"), default="vllm")
    p.add_argument("--routing-policy", choices=("least-load", "prefix-aware"), default=None,
                   help="which data parallel engine takes a request: the least loaded, or weighing the "
                        "prompt's blocks each engine holds in its prefix cache (needs the engines' KV events, "
                        "--kv-events-config) against load; default: prefix-aware when --kv-events-config "
                        "enables KV events, else least-load")
    p.add_argument("--routing-prefix-weight", type=float, default=None, metavar="W",
                   help="prefix-aware: a prompt an engine holds whole counts as W * (mean load + 8) "
                        "requests less load there (default 1)")
    p.add_argument("--prefill-engines", type=int, default=None, metavar="N",
                   help="prefill/decode disaggregation: the first N data parallel ranks compute prompts "
                        "(prefill engines), the others generate (decode engines); each request goes to a "
                        "prefill engine for its prompt, then to a decode engine with the KV the engines' "
                        "connector passed (vLLM's --kv-transfer-config, e.g. NixlConnector with kv_role "
                        "kv_both); default 0: every engine does both")
    p.add_argument("--prefill-min-prompt-tokens", type=int, default=None, metavar="T",
                   help="with --prefill-engines: prompts shorter than T tokens go to a decode engine whole "
                        "(default 0)")
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
    if ns.prefill_engines is not None and not 0 <= ns.prefill_engines < dp:
        parser.error(f"--prefill-engines must be between 1 and {dp - 1} (--data-parallel-size less one: "
                     "the other ranks decode)" if dp > 1 else
                     "--prefill-engines needs --data-parallel-size 2 or more (prefill and decode engines)")
    if ns.prefill_min_prompt_tokens is not None and ns.prefill_min_prompt_tokens < 0:
        parser.error("--prefill-min-prompt-tokens must be >= 0")
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
    if ns.tokenizer_backend is None:
        try:
            ns.tokenizer_backend = tokenizer_backend_from_env() or "auto"
        except ValueError as e:
            parser.error(str(e))
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
        for path in policy.middleware:  # one that cannot be imported stops the start (the workers install them)
            from vllm_pyfrontend.server.asgi_middleware import import_middleware

            import_middleware(path)
        if policy.tool_parser_plugin:  # a broken plugin or an unknown parser name stops the start
            from vllm_pyfrontend.parsers.tool.plugin import check_tool_parser_plugin

            check_tool_parser_plugin(policy.tool_parser_plugin, policy.tool_call_parser)
    except ValueError as e:
        parser.error(str(e))

    # vLLM: --api-key wins over VLLM_API_KEY.
    api_keys = [k for k in (ns.api_key or [environment.vllm_api_key() or ""]) if k]
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
    return os.path.join(environment.cache_dir(), "vllm-pyfrontend")


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
