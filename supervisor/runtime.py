"""The supervisor's private runtime directory and the engine client addresses inside it.

Worker i owns engine client slot i: an input address (its ROUTER) and an output address (its
PULL), which the engine learns in the handshake. Local engines reach them as `ipc://` sockets in
this directory; engines on other hosts need `tcp://` on the data-parallel address. The directory
also carries `engine-info.json`, the engines' ready responses as the first worker recorded them:
a restarted worker gets no ready response from the engine, so it is handed these instead.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass
from typing import Any

ENGINE_INFO_FILE = "engine-info.json"


@dataclass(frozen=True)
class ClientAddresses:
    input: str
    output: str


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """A port that is free right now (the caller binds it soon after; good enough locally)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def tcp_uri(host: str, port: int | str) -> str:
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


class RuntimeDir:
    """A private temporary directory, removed by `cleanup()`."""

    def __init__(self, base: str | None = None):
        # Short prefix: ipc:// paths are unix socket paths, limited to ~107 bytes.
        self.path = tempfile.mkdtemp(prefix="vpf-", dir=base)
        os.chmod(self.path, 0o700)

    def client_addresses(self, num_workers: int, tcp_host: str | None = None) -> list[ClientAddresses]:
        """One (input, output) pair per worker: ipc here, or tcp on `tcp_host` for remote engines."""
        if tcp_host is None:
            return [
                ClientAddresses(
                    input=f"ipc://{self.path}/w{i}-in.sock",
                    output=f"ipc://{self.path}/w{i}-out.sock",
                )
                for i in range(num_workers)
            ]
        return [
            ClientAddresses(
                input=tcp_uri(tcp_host, free_tcp_port(tcp_host)),
                output=tcp_uri(tcp_host, free_tcp_port(tcp_host)),
            )
            for _ in range(num_workers)
        ]

    @property
    def engine_info_path(self) -> str:
        return os.path.join(self.path, ENGINE_INFO_FILE)

    def read_engine_infos(self) -> list[dict[str, Any]] | None:
        """The ready responses a worker recorded, or None if none has (yet)."""
        try:
            with open(self.engine_info_path, encoding="utf-8") as f:
                infos = json.load(f)
        except (OSError, ValueError):
            return None
        return infos if isinstance(infos, list) and infos else None

    def cleanup(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
