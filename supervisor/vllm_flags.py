"""What the supervisor must know about `vllm serve` flags it does not consume itself.

The supervisor forwards unknown flags to vLLM untouched (vLLM's frontend flags are not unknown:
supervisor/frontend_flags.py implements or refuses each), but to find the positional `<model>`
among them it must know which flags take no value (else `--enforce-eager /models/x` would make the
model path the flag's value) and which take several. Importing vLLM to ask its own parser costs
seconds and needs vLLM installed (the simulated engine does not), so the facts live here, taken
from vLLM 0.32's `EngineArgs.add_cli_args` and `vllm serve`'s frontend parser. Every `--no-X`
form of a BooleanOptionalAction is also valueless and is recognised by its prefix.
"""

from __future__ import annotations

# Flags that take no value (store_true / BooleanOptionalAction positive forms).
BOOLEAN_FLAGS: frozenset[str] = frozenset(
    {
        # engine (EngineArgs)
        "--aggregate-engine-logging", "--allow-deprecated-quantization", "--async-scheduling",
        "--cudagraph-metrics", "--data-parallel-external-lb", "--data-parallel-hybrid-lb",
        "--data-parallel-multi-port-external-lb", "--dcp-q-replicate", "--disable-cascade-attn",
        "--disable-chunked-mm-input", "--disable-custom-all-reduce",
        "--disable-hybrid-kv-cache-manager", "--disable-log-stats",
        "--disable-nccl-for-dp-synchronization", "--disable-sliding-window",
        "--enable-batch-sharded-sampling", "--enable-chunked-prefill", "--enable-cumem-allocator",
        "--enable-dbo", "--enable-elastic-ep", "--enable-ep-weight-filter", "--enable-eplb",
        "--enable-expert-parallel", "--enable-fault-tolerance", "--enable-flashinfer-autotune",
        "--enable-hc-sp", "--enable-layerwise-nvtx-tracing", "--enable-log-requests",
        "--enable-logging-iteration-details", "--enable-lora",
        "--enable-mamba-cache-stochastic-rounding", "--enable-mamba-shared-prefix-checkpoint",
        "--enable-mfu-metrics", "--enable-mixed-moe-lora-format", "--enable-mm-embeds",
        "--enable-moe-shared-loras", "--enable-nccl-comm-suspend", "--enable-prefix-caching",
        "--enable-prompt-embeds", "--enable-return-routed-experts", "--enable-shm-tensor-arena",
        "--enable-sleep-mode", "--enable-tower-connector-lora", "--enable-trace-replay",
        "--enforce-eager", "--fail-on-environ-validation", "--fully-sharded-loras",
        "--interleave-mm-strings", "--jit-monitor-verbose", "--kv-cache-metrics",
        "--kv-sharing-fast-prefill", "--language-model-only",
        "--long-prefill-token-threshold-adaptive", "--mm-device-do-normalize", "--mm-encoder-only",
        "--numa-bind", "--ray-workers-use-nsight", "--return-sampling-mask",
        "--scheduler-reserve-full-isl", "--skip-mm-profiling", "--skip-tokenizer-init",
        "--sleep-mode-offload-cudagraph", "--specialize-active-lora", "--swa-bounded-replay",
        "--trust-remote-code", "--use-fp64-gumbel", "--use-replayssm", "--use-tqdm-on-load",
        "-dpe", "-dph", "-dpm", "-ep",
        # vllm serve frontend
        "--allow-credentials", "--cohere-is-reasoning-model", "--disable-fastapi-docs",
        "--disable-uvicorn-access-log", "--enable-auto-tool-choice",
        "--enable-flash-late-interaction", "--enable-force-include-usage", "--enable-log-deltas",
        "--enable-log-outputs", "--enable-offline-docs", "--enable-per-request-metrics",
        "--enable-prompt-tokens-details", "--enable-request-id-headers", "--enable-scale-out",
        "--enable-server-load-tracking", "--enable-ssl-refresh",
        "--enable-tokenizer-info-endpoint", "--exclude-tools-when-tool-choice-none", "--grpc",
        "--headless", "--log-error-stack", "--return-tokens-as-token-ids", "--tokens-only",
        "--trust-request-chat-template", "--trust-request-mm-kwargs",
    }
)

# Flags that take one or more values (argparse nargs="+").
MULTI_VALUE_FLAGS: frozenset[str] = frozenset(
    {
        "--allowed-media-domains", "--sleep-preserve-parameter-names", "--logits-processors",
        "--ignore-patterns", "--numa-bind-nodes", "--numa-bind-cpus",
        "--kv-cache-dtype-skip-layers", "--cpu-offload-params", "--offload-params",
        "--lora-target-modules", "--collect-detailed-traces", "--cudagraph-capture-sizes",
        "--lora-modules", "--api-key",
    }
)

# Flags that take an optional value (argparse nargs="?").
OPTIONAL_VALUE_FLAGS: frozenset[str] = frozenset({"--hf-token"})


def normalize_flag(flag: str) -> str:
    """vLLM accepts `--max_model_len` for `--max-model-len`; use the dashed form everywhere."""
    if flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-")
    return flag


def takes_value(flag: str) -> bool:
    """Whether an unknown (forwarded) flag, written without `=`, consumes the next token."""
    flag = normalize_flag(flag)
    if flag in BOOLEAN_FLAGS or flag.startswith("--no-"):
        return False
    return True


def pooler_config_from(engine_args: list[str]) -> dict | None:
    """vLLM's `--pooler-config` among forwarded engine flags (a JSON map, `--pooler-config=...`,
    or dotted `--pooler-config.task classify`): the pooling routes read its task and
    use_activation, as vLLM's API server reads them from the same flag."""
    import json

    config: dict = {}
    i = 0
    while i < len(engine_args):
        tok = engine_args[i]
        name, eq, value = tok.partition("=")
        name = normalize_flag(name)
        if name == "--pooler-config" or name.startswith("--pooler-config."):
            if not eq:
                i += 1
                value = engine_args[i] if i < len(engine_args) else ""
            if name == "--pooler-config":
                try:
                    parsed = json.loads(value)
                except ValueError:
                    parsed = None
                if isinstance(parsed, dict):
                    config.update(parsed)
            else:
                key = name[len("--pooler-config."):].replace("-", "_")
                try:
                    config[key] = json.loads(value)
                except ValueError:
                    config[key] = value
        i += 1
    return config or None
