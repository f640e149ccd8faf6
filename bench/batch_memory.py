"""What a batch costs a worker in memory: validating a large input file, and writing a large
output file, each measured as the growth of the process's peak RSS over the step.

    .venv/bin/python -m bench.batch_memory [--lines 50000] [--output-mib 1024] [--out FILE]

Three measurements, each on the real code (`serving/batch_lines.parse_input` reading the file as
the batch runner does, and `BatchRunner._finalize` writing the output from the SQLite batch store
a page at a time):

- `validate`: an input file of `--lines` chat requests (about 200 bytes each);
- `validate_short_lines`: a 30 MB file of two-byte lines (`{}`: each an error entry), which the
  line cap stops at `--lines` requests;
- `finalize`: a batch of 10,000 lines whose answers take `--output-mib` in all, written to its
  output file (with the cap at `--output-mib` + 1 MiB: every answer fits).

The peak is reset before each step (`/proc/self/clear_refs`, Linux), so each figure is that
step's own high-water mark above the RSS it started from.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vllm_pyfrontend.serving.batch_lines import parse_input  # noqa: E402
from vllm_pyfrontend.serving.batch_runner import BatchRunner, RunnerSettings, _parse_file  # noqa: E402
from vllm_pyfrontend.store.batches import NewLine, open_batch_store  # noqa: E402
from vllm_pyfrontend.store.files import FileContents, open_file_store  # noqa: E402

URL = "/v1/chat/completions"


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> int:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


def _grown(start: int) -> float:
    return (_status("VmHWM") - start) / 2**20


def _input_file(path: str, lines: int) -> int:
    with open(path, "w") as f:
        for i in range(lines):
            body = {"model": "m", "messages": [{"role": "user", "content": f"Question number {i}, please."}],
                    "max_tokens": 16}
            f.write(json.dumps({"custom_id": f"req-{i}", "method": "POST", "url": URL, "body": body}) + "\n")
    return os.path.getsize(path)


async def _finalize(tmp: str, lines: int, answer_bytes: int) -> dict:
    batches = open_batch_store(None, tmp)
    files = open_file_store(None, tmp)
    contents = FileContents(os.path.join(tmp, "contents"))
    cap = lines * (answer_bytes + 64) + 2**20
    runner = BatchRunner(batches=batches, files=files, contents=contents, call=None,
                         settings=RunnerSettings(max_output_bytes=cap))
    now = time.time()
    await batches.create({"id": "batch_m", "object": "batch", "endpoint": URL, "status": "validating",
                          "input_file_id": "file-x", "completion_window": "24h", "created_at": int(now),
                          "expires_at": now + 3600, "errors": None, "output_file_id": None,
                          "error_file_id": None, "metadata": None}, "owner", "tenant")
    task = await batches.claim_task("w", 60)
    await batches.start_run("batch_m", "w", [NewLine(i, f"c{i}", b"{}") for i in range(lines)])
    filler = "x" * answer_bytes
    while claimed := await batches.claim_lines("w", 1000, 1000, 60):
        for line in claimed:
            answer = json.dumps({"id": f"l{line.idx}", "custom_id": line.custom_id, "response": {"body": filler}})
            await batches.complete("w", "batch_m", line.idx, answer.encode(), False)
    task = await batches.claim_task(runner.me, 60)
    assert task is not None and task.kind == "finalize", task
    start = _reset_peak()
    t0 = time.monotonic()
    await runner._finalize(task)
    seconds = time.monotonic() - t0
    grown = _grown(start)
    obj = await batches.get("batch_m", None)
    size = os.path.getsize(contents.path(obj["output_file_id"]))
    await batches.close()
    await files.close()
    return {"lines": lines, "output_mib": round(size / 2**20, 1), "seconds": round(seconds, 1),
            "peak_rss_growth_mib": round(grown, 1), "status": obj["status"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=50000)
    ap.add_argument("--output-mib", type=int, default=1024)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "input.jsonl")
        size = _input_file(path, args.lines)
        start = _reset_peak()
        lines = _parse_file(path, URL, max_lines=args.lines, max_body_bytes=1 << 20, priority=1)
        out["validate"] = {"lines": len(lines), "input_mib": round(size / 2**20, 1),
                           "peak_rss_growth_mib": round(_grown(start), 1)}
        del lines
        short = os.path.join(tmp, "short.jsonl")
        with open(short, "wb") as f:
            f.write(b"{}\n" * (10 * 2**20))
        start = _reset_peak()
        with open(short, "rb") as f:
            try:
                parse_input(f, URL, max_lines=args.lines, max_body_bytes=1 << 20, priority=1)
                outcome = "accepted"
            except Exception as e:  # noqa: BLE001 - the line cap's InputError is the expected outcome
                outcome = type(e).__name__
        out["validate_short_lines"] = {"input_mib": round(os.path.getsize(short) / 2**20, 1), "outcome": outcome,
                                       "peak_rss_growth_mib": round(_grown(start), 1)}
        os.unlink(short)
        n = 10000
        out["finalize"] = asyncio.run(_finalize(tmp, n, args.output_mib * 2**20 // n))
    for k, v in out.items():
        print(json.dumps({"step": k, **v}))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
