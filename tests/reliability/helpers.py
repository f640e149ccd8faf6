"""Shared pieces of the reliability tests: the process tree of a stack, /proc figures, raw
HTTP/SSE over sockets (to misbehave as clients do: stop reading, vanish mid-stream)."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from tests.stack import Stack, proc_alive, proc_children, proc_cmdline, worker_pids

MODEL = "demo:deepseek-v4"
SERVED = "dsv4"


def sim_args(*extra: str, workers: int = 2, step: float = 0.002, max_model_len: int = 1024) -> list[str]:
    return ["--engine", "sim", "--workers", str(workers), "--sim-step-time", str(step),
            "--max-model-len", str(max_model_len), "--served-model-name", SERVED,
            "--shutdown-timeout", "5", *extra, MODEL]


# -- processes -------------------------------------------------------------------------------

# (the /proc readers live in tests/stack.py, shared with the supervisor tests)
children, cmdline, alive = proc_children, proc_cmdline, proc_alive


def workers_of(stack: Stack) -> list[int]:
    return worker_pids(stack.proc.pid)


def engines_of(stack: Stack) -> list[int]:
    return [p for p in children(stack.proc.pid) if "vllm_pyfrontend.supervisor.sim" in cmdline(p)]


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_all_serving(stack: Stack, timeout: float = 60) -> None:
    """/health answers once one worker serves; the supervisor logs when all of them do."""
    wait_for(lambda: any("[supervisor]" in l and "serving on http" in l for l in list(stack.log)),
             timeout, "all workers serving", stack)


def restarts(stack: Stack) -> int:
    return sum("restarting worker" in line for line in list(stack.log))


def wait_for(pred, timeout: float, what: str, stack: Stack | None = None, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n" + (stack.logs() if stack else ""))


# -- HTTP ------------------------------------------------------------------------------------

@dataclass
class Reply:
    status: int
    body: bytes

    def json(self):
        return json.loads(self.body)


def request(stack: Stack, path: str, body: bytes | None = None, *, method: str | None = None,
            content_type: str = "application/json", timeout: float = 60,
            headers: dict[str, str] | None = None) -> Reply:
    req = urllib.request.Request(stack.base_url + path, data=body, method=method or ("POST" if body is not None else "GET"),
                                 headers=headers or {})
    if body is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Reply(r.status, r.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, e.read())


def chat_body(**kw) -> bytes:
    kw.setdefault("model", SERVED)
    kw.setdefault("messages", [{"role": "user", "content": "Hello"}])
    kw.setdefault("max_tokens", 4)
    return json.dumps(kw).encode()


def assert_serves(stack: Stack, tries: int = 4) -> None:
    """A normal request succeeds (on every worker, as far as SO_REUSEPORT spreads them)."""
    for _ in range(tries):
        r = request(stack, "/v1/chat/completions", chat_body(max_tokens=3))
        assert r.status == 200, (r.status, r.body)
        assert r.json()["usage"]["completion_tokens"] == 3


def assert_openai_error(reply: Reply) -> dict:
    """A 4xx (never a 5xx) with the OpenAI error shape and a message that says something."""
    assert 400 <= reply.status < 500, (reply.status, reply.body[:500])
    err = json.loads(reply.body)["error"]
    assert isinstance(err["message"], str) and len(err["message"]) > 5, err
    assert isinstance(err["type"], str) and err["code"] == reply.status, err
    return err


def engine_running(stack: Stack) -> tuple[int, int]:
    stats = stack.freshest_engine_stats() or {}
    return stats.get("num_running_reqs", 0), stats.get("num_waiting_reqs", 0)


def server_load(stack: Stack) -> int:
    """In-flight requests of the deployment (/load sums every worker's, whichever answers)."""
    return request(stack, "/load").json()["server_load"]


# -- raw streaming ---------------------------------------------------------------------------

def open_stream(stack: Stack, body: bytes, *, rcvbuf: int | None = None, timeout: float = 30,
                after: bytes = b"", headers: dict[str, str] | None = None) -> socket.socket:
    """Send a streaming request on a raw socket and return it unread (the caller misbehaves)."""
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(("127.0.0.1", stack.port))
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()) + "\r\n").encode()
    s.sendall(head + body + after)
    return s


def read_until(s: socket.socket, marker: bytes, limit: int = 1 << 24) -> bytes:
    data = b""
    while marker not in data and len(data) < limit:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def read_all(s: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    return data


def sse_events(raw: bytes) -> list[str]:
    """`data:` payloads of a raw chunked SSE response (chunk framing stripped loosely)."""
    text = raw.decode(errors="replace")
    return [line[6:] for line in text.split("\n") if line.startswith("data: ")]
