"""`python -m conformance`: vLLM's own HTTP-level test modules, on vLLM's frontend and on this one.

    python -m conformance                          # the core modules, both frontends
    python -m conformance --modules test_models test_tokenization --frontend ours
    python -m conformance --summary --markdown     # the table of the kept reports, no run
    python -m conformance --list                   # what runs, and why the rest does not

Exit status: 1 when a test vLLM's frontend passes fails here and is listed neither as a
deliberate difference nor as a known gap (conformance/expectations.py), else 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from conformance import catalogue, runner


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m conformance", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modules", nargs="+", default=["core"],
                   help="`core` (default), `all`, `ci`, or module names/paths under vLLM's tests/entrypoints")
    p.add_argument("--frontend", choices=["vllm", "ours", "both"], default="both",
                   help="which frontend(s) to run; the other's kept report is reused for the comparison")
    p.add_argument("--jobs", type=int, default=1, help="frontends run at once (default 1)")
    p.add_argument("--workers", type=int, default=2, help="this frontend's worker processes (default 2)")
    p.add_argument("--out", type=Path, default=runner.DEFAULT_OUT, help="reports and server logs")
    p.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per frontend's run")
    p.add_argument("--summary", action="store_true", help="summarise the kept reports, run nothing")
    p.add_argument("--markdown", action="store_true", help="print the markdown table (else JSON)")
    p.add_argument("--list", action="store_true", help="list runnable and not runnable modules")
    args = p.parse_args(argv)
    # Absolute: the pytest run writes its outcomes from inside vLLM's source tree (its cwd).
    args.out = args.out.resolve()

    if args.list:
        for m in catalogue.ALL:
            print(f"{'core' if m in catalogue.CORE else 'more'}  {m.path}  ({', '.join(m.models)})")
        print()
        print(runner.not_runnable_markdown(), end="")
        return 0
    modules = catalogue.select(args.modules)
    frontends = list(runner.FRONTENDS) if args.frontend == "both" else [args.frontend]
    if args.summary:
        summary = runner.summarize(modules, args.out)
    else:
        summary = runner.run(modules, frontends, out=args.out, jobs=args.jobs, workers=args.workers,
                             timeout=args.timeout)
    if args.markdown:
        command = "python -m conformance --modules " + " ".join(args.modules)
        print(runner.markdown(summary, command), end="")
    else:
        print(json.dumps({k: v for k, v in summary.items() if k != "not_runnable"}, indent=1))
    (args.out / "summary.md").write_text(runner.markdown(summary))
    return 1 if summary["totals"]["new_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
