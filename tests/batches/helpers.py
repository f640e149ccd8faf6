"""Shared by the Batch API tests: input files, waiting for a batch, reading its output."""

from __future__ import annotations

import io
import json
import time

import httpx
import openai

FINAL = ("completed", "failed", "expired", "cancelled")


def client(base_url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0, timeout=60,
                         http_client=httpx.Client())


def jsonl(lines: list) -> bytes:
    return "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines).encode() + b"\n"


def line(custom_id: str, url: str, body: dict) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def upload(c: openai.OpenAI, lines: list):
    return c.files.create(file=("input.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")


def submit(c: openai.OpenAI, endpoint: str, lines: list, window: str = "24h", **kw):
    f = upload(c, lines)
    return c.batches.create(input_file_id=f.id, endpoint=endpoint, completion_window=window, **kw)


def wait(c: openai.OpenAI, batch_id: str, until=FINAL, timeout: float = 120.0, pred=None):
    """Poll until the batch's status is in `until` (and `pred(batch)` holds, when given)."""
    deadline = time.monotonic() + timeout
    while True:
        b = c.batches.retrieve(batch_id)
        if b.status in until and (pred is None or pred(b)):
            return b
        assert time.monotonic() < deadline, f"batch {batch_id} still {b.status} ({b.request_counts})"
        time.sleep(0.1)


def entries(c: openai.OpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(x) for x in c.files.content(file_id).text.splitlines() if x]


def by_custom_id(items: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for e in items:
        assert e["custom_id"] not in out, f"{e['custom_id']} answered twice"
        out[e["custom_id"]] = e
    return out
