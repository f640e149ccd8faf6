"""The anonymous `--api-key` keys (without a keys file): a presented key checked in constant time
against each of them, and the tenant it names (one owner scope per key)."""

from __future__ import annotations

import hmac

from vllm_pyfrontend.tenants import Tenant, key_digest, key_owner


class ApiKeys:
    """Constant-time check of a Bearer token against several keys, and the tenant it names.

    Keys and the presented token are hashed first (SHA-256), so every comparison is between
    equal-length digests, and every key is compared (no early exit): the time taken does not
    depend on which key matched or how much of it did.
    """

    def __init__(self, keys: list[str]):
        self._digests = [key_digest(k) for k in keys if k]
        self._tenants = [Tenant("", key_owner(d)) for d in self._digests]

    def __bool__(self) -> bool:
        return bool(self._digests)

    def check(self, authorization: str | None, api_key: str | None = None) -> bool:
        """`Authorization: Bearer <key>`, or Anthropic's `x-api-key: <key>` header."""
        return self.tenant(authorization, api_key) is not None

    def tenant(self, authorization: str | None, api_key: str | None = None) -> Tenant | None:
        """The tenant of the presented key, None when no key matches."""
        token = None
        if authorization:
            scheme, _, bearer = authorization.partition(" ")
            if scheme.lower() == "bearer":
                token = bearer
        if token is not None:
            found = self._match(token)
            if found is not None:
                return found
        return self._match(api_key) if api_key else None

    def lookup(self, authorization: str | None, api_key: str | None = None) -> tuple[Tenant, None] | None:
        """The same lookup as the keys file's (`key_table.TenantKeys.lookup`): (tenant, no quota)."""
        tenant = self.tenant(authorization, api_key)
        return None if tenant is None else (tenant, None)

    def _match(self, token: str) -> Tenant | None:
        presented = key_digest(token)
        found = -1
        for i, digest in enumerate(self._digests):
            if hmac.compare_digest(presented, digest):
                found = i
        return self._tenants[found] if found >= 0 else None
