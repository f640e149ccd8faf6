"""`--grpc-port`: parsed into every worker's config, checked, and grpcio never imported by an
HTTP-only worker."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vllm_pyfrontend.supervisor.cli import parse_args


def test_grpc_port_reaches_the_options():
    opts = parse_args(["--engine", "sim", "--port", "8000", "--grpc-port", "50051", "demo:deepseek-v4"])
    assert opts.grpc_port == 50051
    assert parse_args(["--engine", "sim", "demo:deepseek-v4"]).grpc_port is None


@pytest.mark.parametrize("port", ["8000", "0", "70000"])
def test_grpc_port_refused(port, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--engine", "sim", "--port", "8000", "--grpc-port", port, "demo:deepseek-v4"])
    assert "--grpc-port" in capsys.readouterr().err


def test_http_only_worker_does_not_import_grpc():
    code = ("import sys, vllm_pyfrontend.server.worker, vllm_pyfrontend.supervisor.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'smg_grpc_proto')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
