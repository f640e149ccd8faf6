"""Where a deployment listens and how it says so: the `--uds` socket (a stale socket file
replaced, a live one refused), the serving address and a working example request for the
startup log."""

from __future__ import annotations

import json
import os
import socket
import stat

from vllm_pyfrontend.supervisor.options import SupervisorOptions
from vllm_pyfrontend.supervisor.workers import Fatal


def bind_unix_socket(path: str) -> socket.socket:
    """A listening Unix socket at `path`. A socket file nobody listens on (left by a killed
    server) is replaced; a live one, or any other file, is an error."""
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(path)
                except ConnectionRefusedError:
                    os.unlink(path)  # stale
                else:
                    raise Fatal(f"--uds {path}: another server is listening there")
        else:
            raise Fatal(f"--uds {path}: the path exists and is not a socket")
    except FileNotFoundError:
        pass
    except OSError as e:
        raise Fatal(f"--uds {path}: {e}") from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        sock.listen(4096)
    except OSError as e:
        sock.close()
        raise Fatal(f"cannot listen on --uds {path}: {e}") from None
    return sock


def serving_address(opts: SupervisorOptions) -> str:
    if opts.uds:
        return f"unix:{opts.uds}" + (" (https)" if opts.policy.ssl_certfile else "")
    host = f"[{opts.host}]" if ":" in opts.host else opts.host
    return f"{'https' if opts.policy.ssl_certfile else 'http'}://{host}:{opts.port}"


def example_curl(opts: SupervisorOptions) -> str:
    """A chat completion request that works against this server, for the startup log."""
    policy = opts.policy
    scheme = "https" if policy.ssl_certfile else "http"
    options = ""
    if opts.uds:
        options, host = f" --unix-socket {opts.uds}", "localhost"
    else:
        host = f"[{opts.host}]" if ":" in opts.host else opts.host
        if host in ("0.0.0.0", "[::]", ""):
            host = "127.0.0.1"
        host = f"{host}:{opts.port}"
    if policy.ssl_certfile:
        options += " --cacert <CA of the server certificate>"
        if policy.ssl_cert_reqs:
            options += " --cert <client.crt> --key <client.key>"
    body = json.dumps(
        {"model": opts.served_names[0], "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 32}
    )
    return (
        f"curl -s{options} {scheme}://{host}/v1/chat/completions "
        f"-H 'Content-Type: application/json' -d '{body}'"
    )
