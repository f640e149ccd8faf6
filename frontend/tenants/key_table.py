"""A worker's API keys with a keys file: named tenants (with their quotas) and the anonymous
`--api-key` keys, looked up by the SHA-256 digest of the presented key, swapped whole on reload.

Looking a digest up in a dict is safe against timing attacks: what a timing could reveal is
about the digests held, and a digest does not give away a key (finding a key for a digest is
SHA-256's preimage problem). It costs the same whatever the number of keys, where comparing
against every key (the `--api-key` path, `server/middleware.py` ApiKeys) grows with it.

The table is one dict, replaced by one assignment: a request looks its key up in the table of
the moment, and requests admitted under the old table keep their tenant and lease (their
counts go on in the new table, `quotas.TenantQuota`).
"""

from __future__ import annotations

import logging
from typing import Any

from vllm_pyfrontend.tenants import Tenant, key_digest, key_owner, named_owner
from vllm_pyfrontend.tenants.keys_file import read_snapshot
from vllm_pyfrontend.tenants.quotas import TenantQuota, TenantQuotas

log = logging.getLogger(__name__)

Entry = tuple[Tenant, "TenantQuota | None"]


class TenantKeys:
    """The worker's key table (`lookup`), read from the supervisor's snapshot (`load`, and
    `reload` on SIGHUP)."""

    def __init__(self, runtime_dir: str, worker_index: int, num_workers: int, anonymous_keys: list[str],
                 recorder: Any = None, fail_closed: bool = False):
        self.runtime_dir = runtime_dir
        self.quotas = TenantQuotas(runtime_dir, worker_index, num_workers, recorder, fail_closed)
        self._anonymous: dict[bytes, Entry] = {}
        for k in anonymous_keys:
            if k:
                d = key_digest(k)
                self._anonymous[d] = (Tenant("", key_owner(d)), None)
        self.table: dict[bytes, Entry] = dict(self._anonymous)
        self._storage: dict[str, int] = {}  # owner -> max_storage_bytes
        self.generation: int | None = None

    def load(self) -> None:
        """Read the published table and swap it in (raises on an unreadable snapshot)."""
        generation, entries = read_snapshot(self.runtime_dir)
        if generation == self.generation:
            return
        quotas = self.quotas.install(generation, entries)
        table = dict(self._anonymous)
        for e in entries:
            table[e.digest] = (Tenant(e.name, named_owner(e.name), e.limits, e.admin), quotas[e.name])
        self.table = table
        self._storage = {named_owner(e.name): e.limits.max_storage_bytes for e in entries
                         if e.limits.max_storage_bytes is not None}
        self.generation = generation

    def reload(self) -> None:
        """SIGHUP: the supervisor published a new table. On any failure the old one stays."""
        try:
            before = self.generation
            self.load()
        except Exception as e:  # noqa: BLE001 - a reload never takes the worker down
            log.error("API keys not reloaded (keeping the keys in use): %s: %s", type(e).__name__, e)
            return
        if self.generation != before:
            log.info("API keys reloaded: %d named key(s) (generation %s)", len(self.quotas.by_name), self.generation)

    def storage_limit(self, owner: str) -> int | None:
        """The bytes an owner's stored objects may take (`max_storage_bytes`; None: no bound)."""
        return self._storage.get(owner)

    def quota(self, name: str) -> TenantQuota | None:
        """The quota of the named tenant `name` in the table of the moment (None: not named
        there, or an anonymous key's "")."""
        return self.quotas.by_name.get(name) if name else None

    def lookup(self, authorization: str | None, api_key: str | None = None) -> Entry | None:
        """The (tenant, quota) of the presented key (`Authorization: Bearer` or Anthropic's
        `x-api-key`), None when no key matches."""
        table = self.table
        if authorization:
            scheme, _, bearer = authorization.partition(" ")
            if scheme.lower() == "bearer":
                found = table.get(key_digest(bearer))
                if found is not None:
                    return found
        if api_key:
            return table.get(key_digest(api_key))
        return None
