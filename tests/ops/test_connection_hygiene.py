"""Hardening for the open network, on the simulated engine: header-read and keep-alive timeouts
under 3,000 half-open and idle connections while real clients are served, the per-worker
connection cap, HTTPS and mutual TLS with the openai client, a Unix domain socket shared by the
workers, and SSE keep-alive comments during a long pause. What involves the supervisor or
several workers (the 3,000 connections, accepted by worker processes while this process opens
them; mutual TLS and its startup lines; the shared Unix socket) runs on the whole stack
(`Stack`); what one worker does alone (its connection cap, TLS and its certificate refresh, SSE
keep-alive) on the in-process tier (tests/inprocess.py)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import resource
import selectors
import socket
import ssl
import threading
import time

import httpx
import openai
import pytest

from tests.inprocess import InProcessStack
from tests.stack import Stack

MODEL = "demo:deepseek-v4"
SERVED = "dsv4"
CHAT = {"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def sim(*extra: str, workers: int = 2, step: float = 0.005) -> list[str]:
    return ["--engine", "sim", "--workers", str(workers), "--sim-step-time", str(step),
            "--max-model-len", "1024", "--served-model-name", SERVED, "--shutdown-timeout", "2",
            *extra, MODEL]


def tls(ca: str, cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    """A client TLS context trusting `ca`, presenting `cert` if given. (httpx 0.28 ignores
    `cert=` when `verify=` is a path, so the context is built here, as httpx recommends.)"""
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(*cert)
    return ctx


class NetStack(Stack):
    """A Stack whose health probe speaks TLS (`ca` + client cert) or goes over a Unix socket."""

    def __init__(self, args: list[str], *, uds: str | None = None, verify: str | None = None,
                 cert: tuple[str, str] | None = None, **kwargs):
        self.uds, self.verify, self.cert = uds, verify, cert
        super().__init__(args, **kwargs)
        if verify:
            self.base_url = self.base_url.replace("http://", "https://")
        if uds:
            self.base_url = "http://localhost"

    def client(self, **kwargs) -> httpx.Client:
        if self.uds:
            return httpx.Client(transport=httpx.HTTPTransport(uds=self.uds), **kwargs)
        if self.verify:
            return httpx.Client(verify=tls(self.verify, self.cert), **kwargs)
        return httpx.Client(**kwargs)

    def health(self) -> int | None:
        scheme = "https" if self.verify else "http"
        url = "http://localhost/health" if self.uds else f"{scheme}://127.0.0.1:{self.port}/health"
        try:
            with self.client(timeout=2) as c:
                return c.get(url).status_code
        except httpx.HTTPError:
            return None


class NetInProcessStack(InProcessStack):
    """An InProcessStack (one worker, in this process) serving HTTPS, with NetStack's TLS
    health probe and clients."""

    def __init__(self, args: list[str], *, verify: str, cert: tuple[str, str] | None = None, **kwargs):
        self.uds, self.verify, self.cert = None, verify, cert
        super().__init__(args, **kwargs)
        self.base_url = self.base_url.replace("http://", "https://")

    client = NetStack.client
    health = NetStack.health


def wait_log(stack: Stack | InProcessStack, text: str, timeout: float = 60) -> None:
    """/health answers once one worker listens; the supervisor's startup lines come when all do."""
    deadline = time.monotonic() + timeout
    while text not in stack.logs():
        assert time.monotonic() < deadline, f"no {text!r} in the log:\n{stack.logs()}"
        time.sleep(0.2)


def raise_fd_limit(want: int) -> int:
    """Raise this process's soft fd limit toward `want` (up to the hard limit); the supervisor
    and its workers inherit it. Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Traffic(threading.Thread):
    """A legitimate client sending requests back to back; records every outcome."""

    def __init__(self, stack: Stack):
        super().__init__(daemon=True)
        self.stack = stack
        self.stopping = threading.Event()
        self.ok = 0
        self.failures: list[str] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.stack.base_url, timeout=30) as c:
            while not self.stopping.is_set():
                try:
                    r = c.post("/v1/chat/completions", json=CHAT)
                    if r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None:
                        self.ok += 1
                    else:
                        self.failures.append(f"{r.status_code} {r.text[:200]}")
                except httpx.HTTPError as e:
                    self.failures.append(repr(e))
                time.sleep(0.05)

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def _read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, "closed before the response"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(4096)
    return head


def _wait_closed(socks: list[socket.socket], deadline: float) -> dict[socket.socket, float]:
    """Wait until the server closes each socket (EOF or reset); returns each one's close time."""
    closed: dict[socket.socket, float] = {}
    with selectors.DefaultSelector() as sel:
        for s in socks:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        while len(closed) < len(socks) and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.2):
                s = key.fileobj
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                except ConnectionError:
                    data = b""
                if not data:
                    closed[s] = time.monotonic()
                    sel.unregister(s)
    return closed


# -------------------------------------------------------------------------- timeouts


N_CONNECTIONS = 3000
TIMEOUT_S = 2.0


def test_half_open_and_idle_connections_are_closed_while_clients_are_served():
    limit = raise_fd_limit(N_CONNECTIONS * 2 + 512)  # our ends, and the workers' ends
    n = min(N_CONNECTIONS, (limit - 512) // 2)
    assert n >= 1000, f"fd limit {limit} too low for this test"
    # (worker processes: in this process, the worker's loop and the 3,000 connects share one
    # interpreter, and under CI load the first idle connections outlived their header timeout
    # before the last was opened)
    with Stack(sim("--http-header-timeout", str(TIMEOUT_S), "--http-timeout-keep-alive", str(TIMEOUT_S))) as stack:
        traffic = Traffic(stack)
        traffic.start()
        half_open: list[socket.socket] = []
        idle: list[socket.socket] = []
        try:
            started = time.monotonic()
            for i in range(n):
                s = socket.create_connection(("127.0.0.1", stack.port), timeout=10)
                if i % 2:
                    s.sendall(b"POST /v1/chat/comp")  # half a request line, then nothing
                    half_open.append(s)
                else:
                    idle.append(s)
            # The idle ones are served one request, then keep the connection open and idle.
            for s in idle:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            for s in idle:
                assert _read_response(s).startswith(b"HTTP/1.1 200")
            opened = time.monotonic() - started
            closed = _wait_closed(half_open + idle, time.monotonic() + TIMEOUT_S + 20)
        finally:
            traffic.stop()
            for s in half_open + idle:
                s.close()
        assert len(closed) == len(half_open) + len(idle), (
            f"{len(half_open) + len(idle) - len(closed)} of {n} connections still open "
            f"(opened in {opened:.1f}s)\n{stack.logs()[-3000:]}")
        # Closed by the timers, not at once (the last ones were opened `opened` s after the first).
        assert min(closed.values()) - started >= TIMEOUT_S - 0.3
        assert not traffic.failures, traffic.failures[:5]
        assert traffic.ok >= 5


def test_a_slow_head_gets_the_header_timeout_not_the_idle_timeout():
    """Once a head's first bytes arrive, the (longer) header timeout applies, not keep-alive."""
    with InProcessStack(sim("--http-header-timeout", "5", "--http-timeout-keep-alive", "0.5", workers=1)) as stack:
        s = socket.create_connection(("127.0.0.1", stack.port), timeout=10)
        try:
            for piece in (b"GET /hea", b"lth HTTP/1.1\r\n", b"Host: x\r\n"):
                s.sendall(piece)
                time.sleep(0.5)  # 1.5 s for the head: past the idle timeout, 3.5 s within the header's
            s.sendall(b"\r\n")
            assert _read_response(s).startswith(b"HTTP/1.1 200")
            # Then the connection is idle: the keep-alive timeout closes it.
            t0 = time.monotonic()
            closed = _wait_closed([s], t0 + 10)
            assert s in closed and 0.35 <= closed[s] - t0 <= 4
        finally:
            s.close()
        # A connection that sends nothing is closed by the idle timeout (not the header's 5 s).
        s = socket.create_connection(("127.0.0.1", stack.port), timeout=10)
        t0 = time.monotonic()
        closed = _wait_closed([s], t0 + 10)
        s.close()
        assert s in closed and closed[s] - t0 <= 4


def test_a_trickled_head_is_cut_at_the_header_timeout_whatever_the_keep_alive():
    """Slowloris: a head sent one byte at a time never completes; with a long keep-alive
    timeout (aiohttp's only timer) it would live that long, the header timeout cuts it."""
    with InProcessStack(sim("--http-header-timeout", "2", "--http-timeout-keep-alive", "60", workers=1)) as stack:
        s = socket.create_connection(("127.0.0.1", stack.port), timeout=10)
        t0 = time.monotonic()
        closed_after = None
        try:
            for byte in b"GET /health HTTP/1.1\r\nHost: x" * 10:
                try:
                    s.sendall(bytes([byte]))
                    time.sleep(0.2)
                    if _wait_closed([s], time.monotonic() + 0.05):  # the server closed it
                        closed_after = time.monotonic() - t0
                        break
                    s.setblocking(True)
                except OSError:  # reset while sending
                    closed_after = time.monotonic() - t0
                    break
        finally:
            s.close()
        assert closed_after is not None and 1.7 <= closed_after <= 5, closed_after


def test_a_stalled_body_is_cut_with_408():
    with InProcessStack(sim("--http-body-timeout", "1", workers=1)) as stack:
        s = socket.create_connection(("127.0.0.1", stack.port), timeout=20)
        try:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{\"model\":")
            t0 = time.monotonic()
            head = _read_response(s)
            assert head.startswith(b"HTTP/1.1 408"), head
            assert 0.8 <= time.monotonic() - t0 <= 5
        finally:
            s.close()
        with httpx.Client(base_url=stack.base_url) as c:  # whole bodies are unaffected
            assert c.post("/v1/chat/completions", json=CHAT).status_code == 200


# -------------------------------------------------------------------------- connection cap


def test_the_connection_cap_refuses_cleanly_and_logs_rarely():
    cap = 20
    with InProcessStack(sim("--max-connections-per-worker", str(cap), "--http-timeout-keep-alive", "60",
                            workers=1)) as stack:
        time.sleep(0.5)  # the health probes' connections are gone
        held = [socket.create_connection(("127.0.0.1", stack.port), timeout=10) for _ in range(cap)]
        try:
            for s in held:  # each one accepted and counted: it is served
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                assert _read_response(s).startswith(b"HTTP/1.1 200")
            for _ in range(10):
                with httpx.Client(base_url=stack.base_url, timeout=10) as c:
                    r = c.post("/v1/chat/completions", json=CHAT)
                assert r.status_code == 503
                err = r.json()["error"]
                assert err["code"] == 503 and err["type"] == "ServiceUnavailableError" and err["message"]
        finally:
            for s in held:
                s.close()
        time.sleep(0.5)
        with httpx.Client(base_url=stack.base_url, timeout=10) as c:
            assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
        refusals = [line for line in stack.logs().splitlines() if "refused" in line and "connection" in line]
        assert len(refusals) == 1, refusals


# -------------------------------------------------------------------------- TLS


def _write_pem(path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, made now."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d = tmp_path_factory.mktemp("certs")
    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def key_pem(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("test CA")).issuer_name(name("test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, usage, san=None):
        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return key, b.sign(ca_key, hashes.SHA256())

    skey, scert = leaf("localhost", ExtendedKeyUsageOID.SERVER_AUTH,
                       [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    ckey, ccert = leaf("client", ExtendedKeyUsageOID.CLIENT_AUTH)
    pem = serialization.Encoding.PEM
    return {
        "ca": _write_pem(d / "ca.pem", ca.public_bytes(pem)),
        "server_key": _write_pem(d / "server.key", key_pem(skey)),
        "server_cert": _write_pem(d / "server.pem", scert.public_bytes(pem)),
        "client_key": _write_pem(d / "client.key", key_pem(ckey)),
        "client_cert": _write_pem(d / "client.pem", ccert.public_bytes(pem)),
    }


def test_https_with_mutual_tls_and_the_openai_client(certs):
    client_cert = (certs["client_cert"], certs["client_key"])
    args = sim("--ssl-keyfile", certs["server_key"], "--ssl-certfile", certs["server_cert"],
               "--ssl-ca-certs", certs["ca"], "--ssl-cert-reqs", str(int(ssl.CERT_REQUIRED)))
    with NetStack(args, verify=certs["ca"], cert=client_cert) as stack:
        http = httpx.Client(verify=tls(certs["ca"], client_cert))
        client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", http_client=http, max_retries=0)
        out = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert out.choices[0].message.content
        chunks = list(client.chat.completions.create(
            model=SERVED, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True))
        assert chunks and chunks[-1].choices[0].finish_reason == "length"
        # Without a client certificate: refused.
        bare = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0,
                             http_client=httpx.Client(verify=tls(certs["ca"])))
        with pytest.raises(openai.APIConnectionError):
            bare.models.list()
        # Plain http on the TLS port is no way in either.
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{stack.port}/v1/models", timeout=5)
        wait_log(stack, f"serving on https://127.0.0.1:{stack.port}")
        # The example curl is the next log line, written just after: wait for it too.
        wait_log(stack, "curl -s --cacert")
        assert f"https://127.0.0.1:{stack.port}/v1/chat/completions" in stack.logs()


def test_https_without_client_certificates(certs):
    args = sim("--ssl-keyfile", certs["server_key"], "--ssl-certfile", certs["server_cert"], workers=1)
    with NetInProcessStack(args, verify=certs["ca"]) as stack:
        client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0,
                               http_client=httpx.Client(verify=tls(certs["ca"])))
        assert [m.id for m in client.models.list()] == [SERVED]


def _served_certificate(port: int) -> bytes:
    """The certificate a new TLS connection to the server is shown (DER), not verified."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as conn:
            return conn.getpeercert(binary_form=True)


def _der(pem_path: str) -> bytes:
    with open(pem_path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def test_ssl_refresh_serves_replaced_certificate_files(certs, tmp_path):
    key, cert = tmp_path / "server.key", tmp_path / "server.pem"
    key.write_bytes(open(certs["server_key"], "rb").read())
    cert.write_bytes(open(certs["server_cert"], "rb").read())
    args = sim("--ssl-keyfile", str(key), "--ssl-certfile", str(cert), "--enable-ssl-refresh", workers=1)
    with NetInProcessStack(args, verify=certs["ca"]) as stack:
        assert _served_certificate(stack.port) == _der(certs["server_cert"])
        # The files are replaced (another key pair: the client's); new connections get it.
        cert.write_bytes(open(certs["client_cert"], "rb").read())
        key.write_bytes(open(certs["client_key"], "rb").read())
        deadline = time.monotonic() + 20
        while _served_certificate(stack.port) != _der(certs["client_cert"]):
            assert time.monotonic() < deadline, "the replaced certificate was not served\n" + stack.logs()[-2000:]
            time.sleep(0.2)
        wait_log(stack, "reloaded the TLS certificate chain")


def test_unreadable_tls_files_fail_fast(certs, tmp_path, capsys):
    from vllm_pyfrontend.supervisor.cli import parse_args

    missing = str(tmp_path / "nope.key")
    with pytest.raises(SystemExit):
        parse_args(["--engine", "sim", "--ssl-keyfile", missing, "--ssl-certfile", certs["server_cert"], MODEL])
    assert f"--ssl-keyfile {missing}: not a readable file" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a key that does not match the certificate
        parse_args(["--engine", "sim", "--ssl-keyfile", certs["client_key"], "--ssl-certfile",
                    certs["server_cert"], MODEL])
    assert "cannot load the TLS settings" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--engine", "sim", "--ssl-keyfile", certs["server_key"], MODEL])
    assert "must be given together" in capsys.readouterr().err


# -------------------------------------------------------------------------- Unix socket


def test_serving_on_a_unix_socket_shared_by_the_workers(tmp_path):
    path = str(tmp_path / "api.sock")
    with NetStack(sim("--uds", path), uds=path) as stack:
        wait_log(stack, f"serving on unix:{path} (2 workers)")
        http = stack.client(timeout=30)
        client = openai.OpenAI(base_url="http://localhost/v1", api_key="none", http_client=http, max_retries=0)
        for _ in range(8):
            out = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=4)
            assert out.choices[0].message.content
        logs = stack.logs()
        workers = [line for line in logs.splitlines() if line.startswith("[worker") and f"serving on unix:{path}" in line]
        assert len(workers) == 2, logs  # both workers, one listener
        assert f"serving on unix:{path}" in logs and f"--unix-socket {path}" in logs
        # Nothing listens on TCP.
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", stack.port), timeout=2).close()
    assert not os.path.exists(path)  # removed on exit


# -------------------------------------------------------------------------- SSE keep-alive


def test_sse_keep_alive_comments_during_a_pause():
    # Each step a 0.25 s pause, a keep-alive comment every 0.05 s of silence: ~4 a pause.
    with InProcessStack(sim("--sse-keep-alive-interval", "0.05", workers=1, step=0.25)) as stack:
        body = dict(CHAT, max_tokens=3, stream=True)
        with httpx.Client(base_url=stack.base_url, timeout=30) as c:
            with c.stream("POST", "/v1/chat/completions", json=body) as r:
                lines = [line for line in r.iter_lines()]
        assert lines.count(": keep-alive") >= 4, lines
        data = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
        assert lines[-2:] == ["data: [DONE]", ""] or lines[-1] == "data: [DONE]"
        assert data[-1]["choices"][0]["finish_reason"] == "length"
        # The openai client skips the comments.
        client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="none", max_retries=0)
        chunks = list(client.chat.completions.create(
            model=SERVED, messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert text and chunks[-1].choices[0].finish_reason == "length"


def test_unix_socket_binding_replaces_only_a_stale_socket(tmp_path):
    from vllm_pyfrontend.supervisor.deployment import bind_unix_socket
    from vllm_pyfrontend.supervisor.workers import Fatal

    path = str(tmp_path / "s.sock")
    first = bind_unix_socket(path)
    with pytest.raises(Fatal, match="another server is listening"):
        bind_unix_socket(path)
    first.close()  # the file stays behind, nobody listens: replaced
    bind_unix_socket(path).close()
    other = tmp_path / "file"
    other.write_text("x")
    with pytest.raises(Fatal, match="not a socket"):
        bind_unix_socket(str(other))


def test_startup_curl_follows_the_listener():
    from vllm_pyfrontend.config import WorkerPolicy
    from vllm_pyfrontend.supervisor.deployment import example_curl, serving_address
    from vllm_pyfrontend.supervisor.options import SupervisorOptions

    plain = SupervisorOptions(model="m", host="0.0.0.0", port=8000)
    assert serving_address(plain) == "http://0.0.0.0:8000"
    assert "curl -s http://127.0.0.1:8000/v1/chat/completions" in example_curl(plain)
    mtls = SupervisorOptions(model="m", uds="/run/api.sock", policy=WorkerPolicy(
        ssl_keyfile="k", ssl_certfile="c", ssl_ca_certs="ca", ssl_cert_reqs=2))
    assert serving_address(mtls) == "unix:/run/api.sock (https)"
    assert example_curl(mtls).startswith(
        "curl -s --unix-socket /run/api.sock --cacert <CA of the server certificate> "
        "--cert <client.crt> --key <client.key> https://localhost/v1/chat/completions")
