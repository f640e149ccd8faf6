"""Shared by the Responses API tests: the worker that served a call, and calls aimed at one."""

from __future__ import annotations

import httpx
import openai

WORKER_HEADER = "x-vllm-pyfrontend-worker"


def client(base_url: str, **kw) -> openai.OpenAI:
    """A client on its own connection pool: each new client opens a new connection, which the
    kernel's SO_REUSEPORT hash gives to either worker."""
    return openai.OpenAI(base_url=base_url + "/v1", api_key=kw.pop("api_key", "none"), max_retries=0,
                         timeout=kw.pop("timeout", 60), http_client=httpx.Client(), **kw)


def on_worker(base_url: str, worker: int | None, call, tries: int = 60, api_key: str = "none"):
    """Run `call(client)` (a `with_raw_response` call) on fresh connections until the worker
    `worker` serves it (None: any); returns (parsed result, serving worker)."""
    for _ in range(tries):
        with client(base_url, api_key=api_key) as c:
            raw = call(c)
        served = int(raw.headers[WORKER_HEADER])
        if worker is None or served == worker:
            return raw.parse(), served
    raise AssertionError(f"worker {worker} never took a connection in {tries} tries")


def create_on(base_url: str, worker: int | None, api_key: str = "none", **kw):
    return on_worker(base_url, worker, lambda c: c.responses.with_raw_response.create(**kw), api_key=api_key)


def http_on(base_url: str, worker: int, headers: dict | None = None, tries: int = 60) -> httpx.Client:
    """An HTTP client whose (kept-alive) connection worker `worker` took, found by `/load`."""
    for _ in range(tries):
        c = httpx.Client(base_url=base_url, headers=headers or {}, timeout=30)
        if c.get("/load").json()["worker"] == worker:
            return c
        c.close()
    raise AssertionError(f"worker {worker} never took a connection in {tries} tries")
