"""Who a request is from: the tenant its API key names, and the owner scope of what it stores.

The auth middleware resolves the presented key and puts a `Tenant` under `request[TENANT]`.
Everything a request stores (responses, files, batches) records `tenant.owner` and is read back
only by requests whose tenant has the same owner; another owner's id is answered like an id that
does not exist.

    no --api-key at all        ANONYMOUS: owner "" (one shared scope, vLLM's behaviour)
    an anonymous --api-key     owner "key:<first 16 hex of the key's SHA-256>": one scope per key
    a named key (keys file)    owner "tenant:<name>": one scope per name, so rotating a
                               tenant's key keeps its stored objects

A named key comes from the keys file (`--api-keys-file`, `keys_file.py`), with the tenant's
limits (`quotas.py`: held across the workers; `key_table.py`: the worker's table of keys).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm_pyfrontend.tenants.keys_file import Limits

# The key a request's Tenant is stored under in aiohttp's per-request mapping.
TENANT = "tenant"


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str  # "" for an anonymous key or no key; a label value for per-tenant metrics
    owner: str  # the scope of stored objects
    limits: Limits | None = field(default=None, compare=False)  # a named key's, from the keys file
    admin: bool = False  # a named key marked `admin: true`: aborts any tenant's requests, reads per-tenant metrics


ANONYMOUS = Tenant("", "")


def key_owner(key_digest: bytes) -> str:
    """The owner scope of an anonymous `--api-key`, from its SHA-256 digest."""
    return "key:" + key_digest.hex()[:16]


def key_digest(key: str) -> bytes:
    return hashlib.sha256(key.strip().encode("utf-8")).digest()


def named_owner(name: str) -> str:
    return "tenant:" + name


def tenant_of(request: Mapping[str, Any]) -> Tenant:
    """The request's tenant (ANONYMOUS when the deployment has no keys)."""
    return request.get(TENANT, ANONYMOUS)
