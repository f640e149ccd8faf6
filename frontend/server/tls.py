"""The server's TLS settings (`--ssl-*`): checked by the supervisor at start, loaded by each
worker. Kept apart from the connection code so the supervisor does not import aiohttp."""

from __future__ import annotations

import os
import ssl

from vllm_pyfrontend.config import WorkerPolicy


def check_tls_files(policy: WorkerPolicy) -> None:
    """Fail fast, with the flag's name, on TLS settings a worker could not load."""
    if bool(policy.ssl_keyfile) != bool(policy.ssl_certfile):
        raise ValueError("--ssl-keyfile and --ssl-certfile must be given together")
    for flag, path in (("--ssl-keyfile", policy.ssl_keyfile), ("--ssl-certfile", policy.ssl_certfile),
                       ("--ssl-ca-certs", policy.ssl_ca_certs)):
        if path and not os.access(path, os.R_OK):
            raise ValueError(f"{flag} {path}: not a readable file")
    if policy.ssl_cert_reqs not in (0, 1, 2):
        raise ValueError(f"--ssl-cert-reqs must be 0 (none), 1 (optional) or 2 (required), "
                         f"not {policy.ssl_cert_reqs}")
    if policy.ssl_cert_reqs and not policy.ssl_ca_certs:
        raise ValueError("--ssl-cert-reqs needs --ssl-ca-certs (the CA that signs client certificates)")
    if policy.ssl_ca_certs and not policy.ssl_certfile:
        raise ValueError("--ssl-ca-certs needs --ssl-keyfile and --ssl-certfile")
    if policy.ssl_certfile:
        make_ssl_context(policy)  # the files parse, the key matches, the ciphers exist


def make_ssl_context(policy: WorkerPolicy) -> ssl.SSLContext | None:
    """The server's TLS context as vLLM (uvicorn) builds it, or None without a certificate."""
    if not policy.ssl_certfile:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(policy.ssl_certfile, policy.ssl_keyfile)
        ctx.verify_mode = ssl.VerifyMode(policy.ssl_cert_reqs)
        if policy.ssl_ca_certs:
            ctx.load_verify_locations(policy.ssl_ca_certs)
        if policy.ssl_ciphers:
            ctx.set_ciphers(policy.ssl_ciphers)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise ValueError(f"cannot load the TLS settings (--ssl-*): {e}") from None
    return ctx
