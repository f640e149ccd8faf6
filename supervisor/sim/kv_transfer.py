"""Prefill/decode disaggregation: the simulated engine as vLLM's NixlConnector makes an engine.

`--kv-transfer-config` (vLLM's flag, a JSON map) gives the engine a connector; without it a
request's `kv_transfer_params` are ignored. A request names its role in
`sampling_params.extra_args["kv_transfer_params"]`:
- `do_remote_decode` true (a prefill engine's request, taken when `kv_role` is kv_producer or
  kv_both): it runs as usual; its final output, if it stopped or hit its length, carries the
  map `request_finished` returns in vLLM 0.32 (nixl/pull_scheduler.py): where its blocks are
  and how a decode engine reaches them;
- `do_remote_prefill` true (a decode engine's request, taken when `kv_role` is kv_consumer or
  kv_both): it waits outside the running set, holding its blocks (vLLM's
  WAITING_FOR_REMOTE_KVS), while the prompt tokens not in the local prefix cache arrive,
  `transfer_time_per_token` seconds each; then it runs with only the last prompt token to compute
  (vLLM's `_update_waiting_for_remote_kv` recomputes it to sample the next token), and its
  first output's `prefill_stats` report the transferred tokens as external cached tokens.
A request of a role the engine does not have runs as an ordinary request.

A load fails for the N-th, 2N-th, ... decode-role request the engine receives
(N = `fail_load_every`) and for any whose params carry `"sim_fail_load": true`; the failure
shows when the transfer ends.
`kv_load_failure_policy` "fail" (vLLM 0.32's default) then ends the request with finish reason
error and no tokens; "recompute" computes its whole prompt here instead (nothing reported as
transferred).

Not modelled: a prefill engine keeps no blocks for a decode engine to read (vLLM holds them
until read or `kv_lease_duration`), nothing is sent to a remote engine, and there is no side
channel at `remote_host:remote_port`.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from vllm_pyfrontend import environment

PREFILL = "prefill"  # this engine computes the prompt for a remote decode
DECODE = "decode"  # this engine loads the prompt's KV from a remote prefill

_ROLES = {"kv_producer": (PREFILL,), "kv_consumer": (DECODE,), "kv_both": (PREFILL, DECODE)}
_POLICIES = ("recompute", "fail")


@dataclass(frozen=True)
class KvTransferConfig:
    kv_role: str
    kv_load_failure_policy: str = "fail"  # vLLM 0.32's KVTransferConfig default
    transfer_time_per_token: float = 2e-6  # seconds per transferred prompt token
    fail_load_every: int = 0  # 0: loads fail only when a request asks (sim_fail_load)
    engine_id: str | None = None  # vLLM's default: a random uuid

    @classmethod
    def parse(cls, value: str | dict[str, Any]) -> "KvTransferConfig":
        """From `--kv-transfer-config`'s JSON (or the decoded map), checked as vLLM checks it."""
        data = json.loads(value) if isinstance(value, str) else dict(value)
        if not isinstance(data, dict):
            raise ValueError("--kv-transfer-config must be a JSON object")
        role = data.get("kv_role")
        if role not in _ROLES:
            raise ValueError(f"Unsupported kv_role: {role}. Supported roles are {tuple(_ROLES)}")
        policy = data.get("kv_load_failure_policy", "fail")
        if policy not in _POLICIES:
            raise ValueError(f"kv_load_failure_policy must be one of {_POLICIES}, got {policy!r}")
        extra = data.get("kv_connector_extra_config") or {}
        per_token = float(extra.get("transfer_time_per_token", cls.transfer_time_per_token))
        every = int(extra.get("fail_load_every", 0))
        if per_token < 0 or every < 0:
            raise ValueError("transfer_time_per_token and fail_load_every must not be negative")
        return cls(role, policy, per_token, every, data.get("engine_id"))


class RemoteLoad:
    """A decode-role request's KV transfer: when it ends, whether it fails, the tokens it brings."""

    __slots__ = ("ready_at", "fails", "tokens")

    def __init__(self, fails: bool):
        self.ready_at = 0.0
        self.fails = fails
        self.tokens = 0


class KvConnector:
    """The scheduler's side of the connector: which role a request plays, its load, and the
    map a prefill-role request's final output carries."""

    def __init__(self, config: KvTransferConfig, engine_index: int, block_size: int, num_blocks: int):
        self.config = config
        self.roles = _ROLES[config.kv_role]
        self.recompute_failures = config.kv_load_failure_policy == "recompute"
        # vLLM suffixes each data parallel rank's engine_id with "_dp{rank}".
        self.engine_id = f"{config.engine_id or 'sim-' + uuid.uuid4().hex[:12]}_dp{engine_index}"
        self.host, port = environment.nixl_side_channel()
        self.port = port + engine_index
        self.block_size = block_size
        self.num_blocks = max(2, num_blocks)
        self._next_block = 1  # block 0 is vLLM's null block
        self._loads = 0
        self._lookups = [0, 0, 0]  # since the last stats: requests, queries, hits

    def role(self, extra_args: dict[str, Any] | None) -> str | None:
        params = extra_args.get("kv_transfer_params") if extra_args else None
        if not isinstance(params, dict):
            return None
        # vLLM's get_num_new_matched_tokens looks at do_remote_prefill first.
        if params.get("do_remote_prefill") and DECODE in self.roles:
            return DECODE
        if params.get("do_remote_decode") and PREFILL in self.roles:
            return PREFILL
        return None

    def new_load(self, extra_args: dict[str, Any]) -> RemoteLoad:
        """A decode-role request arrived: whether its load will fail is decided now."""
        self._loads += 1
        every = self.config.fail_load_every
        asked = bool(extra_args["kv_transfer_params"].get("sim_fail_load"))
        return RemoteLoad(asked or (every > 0 and self._loads % every == 0))

    def start_load(self, load: RemoteLoad, tokens: int, now: float) -> None:
        load.tokens = tokens
        load.ready_at = now + tokens * self.config.transfer_time_per_token

    def record_lookup(self, queries: int, loads: bool) -> None:
        """A request was admitted with `queries` prompt tokens past its local prefix cache hit;
        a decode-role request loads them all (vLLM's connector prefix cache stats)."""
        lookups = self._lookups
        lookups[0] += 1
        lookups[1] += queries
        lookups[2] += queries if loads else 0

    def take_prefix_stats(self) -> dict[str, Any]:
        """The connector's PrefixCacheStats since the last call, as msgspec writes the dataclass."""
        requests, queries, hits = self._lookups
        self._lookups = [0, 0, 0]
        return {"reset": False, "requests": requests, "queries": queries, "hits": hits,
                "preempted_requests": 0, "preempted_queries": 0, "preempted_hits": 0,
                "hits_by_source": {"p2p": hits} if hits else {}}  # NixlConnector: CacheHitSource.P2P

    def finished_params(self, request_id: str, num_computed_tokens: int,
                        cached_tokens: int | None) -> dict[str, Any]:
        """The kv_transfer_params of a prefill-role request that stopped or hit its length:
        vLLM 0.32's `request_finished` map (one KV cache group of block ids), plus
        `remote_prefill_cached_tokens` when the final output also carries its prefill stats
        (the scheduler adds it then, for the decode side to report)."""
        n = -(-num_computed_tokens // self.block_size)
        first = self._next_block
        self._next_block = (first + n - 1) % (self.num_blocks - 1) + 1
        blocks = [(first + i - 1) % (self.num_blocks - 1) + 1 for i in range(n)]
        params: dict[str, Any] = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": [blocks],
            "remote_engine_id": self.engine_id,
            "remote_request_id": request_id,
            "remote_host": self.host,
            "remote_port": self.port,
            "tp_size": 1,
            "dcp_size": 1,
            "pp_size": 1,
            "remote_num_tokens": num_computed_tokens,
            "remote_blocks_expiry_time": None,
            "transfer_mode": "pull",
        }
        if cached_tokens is not None:
            params["remote_prefill_cached_tokens"] = cached_tokens
        return params
