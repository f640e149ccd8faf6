"""The layer order of the import package, written once.

Each layer is a group of top-level subpackages (or modules) of `vllm_pyfrontend`. A module may
import its own package and any layer below its own, never one above it nor another package of
its own layer; inside `api`, an API style (`api.<style>`) never imports another style, and a
route module (`routes.py`) is imported only by the server that mounts it. `tests/test_layers.py`
checks every import of the tree against this table (imports inside functions included), and
`docs/ARCHITECTURE.md`'s layer table is printed from it:

    python -m vllm_pyfrontend.layers --markdown
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = "vllm_pyfrontend"


@dataclass(frozen=True)
class Layer:
    packages: tuple[str, ...]
    speaks: str  # in -> out
    owns: str


# Top to bottom.
LAYERS: tuple[Layer, ...] = (
    Layer(("supervisor",), "command line -> processes",
          "both launchers (`frontend-supervisor`, the `vllm serve` drop-in), engine launch and "
          "vLLM's handshake, the worker pool, the simulated engine"),
    Layer(("server",), "sockets -> routes",
          "the HTTP host of a worker process: the aiohttp app and its route table, middleware "
          "(auth, CORS, request ids, request logs), connections and TLS, the worker template "
          "(preload), /metrics and /ready, /openapi.json"),
    Layer(("api",), "HTTP bodies <-> typed requests; events -> JSON or SSE",
          "one folder per API style (schemas, lowering, formatter, routes): OpenAI chat "
          "completions and completions, Responses, Anthropic Messages, pooling, speech, tokens "
          "(tokenize, render, token-in/token-out), admin, gRPC"),
    Layer(("serving",), "typed requests -> runs in flight",
          "what every API style shares: the worker's state, the request scope (tenant quota, "
          "admission, engine requests and aborts, metrics, span, log line, release), the one "
          "chat and completions lowering, the request pipeline (choices, the per-token step), "
          "answers (JSON or SSE), SSE writers, aborts by id across workers, LoRA adapters"),
    Layer(("router", "multimodal"), "one client slot <-> N workers; chat media -> prompt ids",
          "the drop-in path's demultiplexer; vLLM's multimodal processing for chat media "
          "(placeholders, processor, feature encoding)"),
    Layer(("parsers",), "text -> content, reasoning and tool-call deltas",
          "tool-call and reasoning parsers (plug-ins behind registries), `safe_text` "
          "combinators, `auto` detection"),
    Layer(("chat",), "messages <-> assistant events",
          "chat templates (minijinja; Python renderers for bundled templates), tool plans, "
          "the assistant event types"),
    Layer(("text", "media"), "text <-> token ids; media URLs -> decoded items",
          "tokenizer backends, incremental detokenizer, stop strings, prompt pieces; media "
          "fetching and decoding off the event loop"),
    Layer(("llm",), "typed options <-> engine requests and token outputs",
          "sampling lowering, structured outputs, prompt ids and bad words, request ids, "
          "`Submission`, `Generation`, pooling and beam-search request shapes, LoRA records"),
    Layer(("engine",), "engine requests <-> ZMQ frames",
          "the wire format per vLLM version, validation before encoding, handshake, the engine "
          "client (connection, sending and routing, aborts, outputs, utility calls, health)"),
    Layer(("metrics", "store", "tracing", "config", "model_config", "tenants"), "values -> files, records",
          "Prometheus families across workers, the shared response store (SQLite or Redis), "
          "request spans, the worker's configuration, the model's config, who a request is "
          "from (tenant and owner scope)"),
    Layer(("errors", "shared_files", "environment"), "-",
          "the errors every layer raises: `APIError` (an HTTP status in OpenAI's shape), "
          "`InvalidRequestError`, `MediaError`; the files workers map shared (per-worker counts); "
          "every environment variable the product reads, named and read in one place"),
)


def layer_of(package: str) -> int:
    for i, layer in enumerate(LAYERS):
        if package in layer.packages:
            return i
    raise KeyError(f"{ROOT}.{package} is in no layer: add it to vllm_pyfrontend.layers.LAYERS")


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every `vllm_pyfrontend...` name this tree imports, relative imports resolved: a module
    for `import m` and `from m import x`, and `m.x` for each name `x` of the latter (which may
    itself be a module: see `_resolve`)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(ROOT))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith(ROOT):
                found.update(f"{target}.{a.name}" for a in node.names)
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module an imported name belongs to: itself, or the module it is defined in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def module_files(frontend: Path, supervisor: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for base, prefix in ((frontend, ROOT), (supervisor, f"{ROOT}.supervisor")):
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join([prefix, *parts])] = path
    return files


def violations(frontend: Path, supervisor: Path) -> list[str]:
    """Each import that breaks the order, as `importer -> imported: why`."""
    files = module_files(frontend, supervisor)
    out: list[str] = []
    for module, path in files.items():
        parts = module.split(".")
        if len(parts) < 2:
            continue  # the package's own __init__
        top = parts[1]
        if top == "layers":
            continue  # this table
        mine = layer_of(top)
        tree = ast.parse(path.read_text(), str(path))
        imported = {_resolve(name, files) for name in _imports(tree, module, path.name == "__init__.py")}
        for target in sorted(t for t in imported if t is not None):
            tparts = target.split(".")
            if len(tparts) < 2 or tparts[1] == top:
                if top == "api" and len(parts) > 2 and len(tparts) > 2 and tparts[2] != parts[2]:
                    out.append(f"{module} -> {target}: one API style imports another")
                elif tparts[-1] == "routes" and target != module and parts[:3] != tparts[:3]:
                    out.append(f"{module} -> {target}: a route module imported outside its style")
                continue
            theirs = layer_of(tparts[1])
            if theirs < mine:
                out.append(f"{module} -> {target}: imports a layer above its own")
            elif theirs == mine:
                out.append(f"{module} -> {target}: imports another package of its own layer")
            elif tparts[-1] == "routes" and top != "server":
                out.append(f"{module} -> {target}: a route module imported outside the server")
    return out


def markdown() -> str:
    lines = ["| layer | packages | in -> out | owns |", "|---|---|---|---|"]
    for i, layer in enumerate(LAYERS):
        names = ", ".join(f"`{p}`" for p in layer.packages)
        lines.append(f"| {i} | {names} | {layer.speaks} | {layer.owns} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        print(markdown())
    else:
        here = Path(__file__).resolve().parent
        problems = violations(here, here.parent / "supervisor")
        print("\n".join(problems) or "no import goes up a layer")
        sys.exit(1 if problems else 0)
