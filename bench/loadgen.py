"""The load generator: vLLM's Rust `vllm-rs bench serve`, plus a one-request probe.

Why the Rust bench and not a Python client: on a small machine the load generator shares the
cores with the frontend under test, and 1024 streams of SSE at ~100k chunks/s would cost a
Python client more CPU than some of the frontends it measures. The Rust client is cheap, is what
vLLM's own Rust-vs-Python numbers were produced with, and speaks plain OpenAI chat streaming,
so it drives all three frontends the same way. It is count-based (`--num-prompts`), so the
harness sizes the count from a warm-up run's rate to get a run of roughly `--duration` seconds.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.frontends import SERVED_NAME, vllm_rs_binary
from bench.workloads import Workload


def bench_serve(base_url: str, tokenizer_dir: str, workload: Workload, num_prompts: int,
                concurrency: int, log: Path, timeout: float, seed: int = 0) -> dict:
    """Run `vllm-rs bench serve` once; return its result JSON (plus `wall_s`)."""
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        argv = [str(vllm_rs_binary()), "bench", "serve", "--backend", "openai-chat",
                "--base-url", base_url, "--endpoint", "/v1/chat/completions",
                "--model", SERVED_NAME, "--tokenizer", tokenizer_dir,
                *workload.bench_args(tokenizer_dir),
                "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency),
                "--request-rate", "inf", "--seed", str(seed),
                "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
                "--save-result", "--result-dir", tmp, "--result-filename", "result.json",
                "--disable-tqdm"]
        t0 = time.monotonic()
        with open(log, "ab") as out:
            out.write(("\n$ " + " ".join(argv) + "\n").encode())
            out.flush()
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
        wall = time.monotonic() - t0
        path = Path(tmp) / "result.json"
        if proc.returncode != 0 or not path.exists():
            raise RuntimeError(f"bench serve exited {proc.returncode}; see {log}")
        result = json.loads(path.read_text())
        if isinstance(result, list):  # --append-result style files hold a list
            result = result[-1]
        result["wall_s"] = wall
        return result


def probe(base_url: str, workload: Workload, timeout: float = 60.0) -> dict:
    """One streaming chat request shaped like the workload: what the frontend answers
    (content, tool calls, finish reason, usage), to report behaviour next to the numbers."""
    body = {"model": SERVED_NAME, "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
            "max_tokens": workload.output_len, "stream": True,
            "stream_options": {"include_usage": True}, **workload.request_extra()}
    if workload.ignore_eos:
        body["max_tokens"] = min(workload.output_len, 64)
    req = urllib.request.Request(base_url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    content, reasoning, tool_calls, finish, usage, chunks, errors = [], [], [], None, None, 0, []
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunks += 1
                ev = json.loads(data)
                if "error" in ev:
                    errors.append(ev["error"])
                usage = ev.get("usage") or usage
                for ch in ev.get("choices") or ():
                    delta = ch.get("delta") or {}
                    content.append(delta.get("content") or "")
                    reasoning.append(delta.get("reasoning") or delta.get("reasoning_content") or "")
                    for tc in delta.get("tool_calls") or ():
                        tool_calls.append(tc)
                    finish = ch.get("finish_reason") or finish
    except Exception as e:  # noqa: BLE001 - reported, not raised: a probe describes behaviour
        detail = e.read().decode()[:300] if hasattr(e, "read") else ""
        return {"ok": False, "error": f"{type(e).__name__}: {e} {detail}".strip()}
    names = [tc.get("function", {}).get("name") for tc in tool_calls if tc.get("function", {}).get("name")]
    args = "".join(tc.get("function", {}).get("arguments") or "" for tc in tool_calls)
    text = "".join(content)
    return {"ok": not errors, "finish_reason": finish, "chunks": chunks, "usage": usage,
            "content_head": text[:80], "content_tail": text[-80:], "content_chars": len(text),
            "reasoning_chars": len("".join(reasoning)), "tool_call_names": names,
            "tool_call_arguments": args, "errors": errors}
