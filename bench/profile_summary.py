"""Summarise a py-spy raw (collapsed-stack) profile: top functions by self and inclusive time,
and an SVG flame graph, so the hot path can be read without extra tools.

    .venv/bin/python bench/profile_summary.py bench/results/profile-decode.txt \\
        [--svg bench/results/profile-decode.svg] [--top 25]

py-spy (`record --format raw`) writes one line per distinct stack: `frame;frame;...;leaf COUNT`,
root first; with `--subprocesses` the first frame names the process. Line numbers are dropped
so that one function is one row.
"""

from __future__ import annotations

import argparse
import html
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r":\d+\)$")


def _frame(f: str) -> str:
    """`func (path/to/file.py:123)` -> `func (file.py)`."""
    f = _LINE.sub(")", f.strip())
    m = re.match(r"^(.*) \((.*)\)$", f)
    if not m:
        return f
    func, path = m.groups()
    return f"{func} ({'/'.join(path.split('/')[-2:])})"


def _short_process(frame: str) -> str:
    """`process 123:"python -m vllm_pyfrontend.server.worker --config-json {...}"` -> short label."""
    m = re.match(r'process (\d+):"(.*)"?$', frame)
    if not m:
        return frame[:80]
    pid, cmd = m.groups()
    idx = re.search(r'"worker_index": (\d+)', cmd)
    return f"pid {pid} " + (f"worker {idx.group(1)}" if idx else cmd[:70])


def load(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        stacks.append(([_frame(f) for f in stack.split(";")], int(count)))
    return stacks


def summarise(stacks: list[tuple[list[str], int]], top: int) -> str:
    total = sum(c for _, c in stacks) or 1
    self_t: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    procs: Counter[str] = Counter()
    for frames, c in stacks:
        self_t[frames[-1]] += c
        for f in set(frames):
            incl[f] += c
        owners = [f for f in frames if f.startswith("process ")]  # nested: supervisor;worker;...
        if owners:
            procs[_short_process(owners[-1])] += c
    out = [f"samples: {total}"]
    if procs:
        out.append("\nper process:")
        out += [f"  {c / total:6.1%}  {p}" for p, c in procs.most_common()]
    out.append(f"\ntop {top} by self time (leaf frame):")
    out += [f"  {c / total:6.1%}  {f}" for f, c in self_t.most_common(top)]
    out.append(f"\ntop {top} by inclusive time (frame anywhere on the stack):")
    out += [f"  {c / total:6.1%}  {f}" for f, c in incl.most_common(top + 10)
            if not f.startswith("process ")][:top]
    return "\n".join(out)


def flamegraph_svg(stacks: list[tuple[list[str], int]], title: str, width: int = 1600) -> str:
    """A plain flame graph (root at the bottom), hover a box for its name and share."""
    tree: dict = {}
    for frames, c in stacks:
        node = tree
        for f in frames:
            entry = node.setdefault(f, [0, {}])
            entry[0] += c
            node = entry[1]
    total = sum(c for _, c in stacks) or 1
    row_h = 16

    def depth(node: dict) -> int:
        return 1 + max((depth(ch) for _, ch in node.values()), default=0)

    levels = depth(tree)
    height = levels * row_h + 40
    rects: list[str] = []

    def draw(node: dict, x: float, level: int) -> None:
        for name, (count, kids) in sorted(node.items()):
            w = count / total * width
            if w >= 0.5:
                y = height - (level + 1) * row_h - 10
                hue = 20 + (hash(name) % 40)
                label = html.escape(name)
                rects.append(
                    f'<g><title>{label} ({count / total:.2%})</title>'
                    f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 1}" '
                    f'fill="hsl({hue},85%,60%)"/>'
                    + (f'<text x="{x + 2:.1f}" y="{y + 12}" font-size="11">'
                       f'{html.escape(name[: int(w / 6.5)])}</text>' if w > 30 else "")
                    + "</g>")
                draw(kids, x, level + 1)
            x += w

    draw(tree, 0.0, 0)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="monospace"><text x="4" y="16" font-size="13">{html.escape(title)}</text>'
            + "".join(rects) + "</svg>")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("raw", type=Path)
    ap.add_argument("--svg", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    stacks = load(args.raw)
    print(summarise(stacks, args.top))
    if args.svg:
        args.svg.write_text(flamegraph_svg(stacks, f"py-spy: {args.raw.name}"))
        print(f"\nwrote {args.svg}")


if __name__ == "__main__":
    main()
