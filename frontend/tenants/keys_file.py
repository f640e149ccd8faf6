"""The keys file (`--api-keys-file`): named API keys and each tenant's limits.

A YAML or JSON list, one entry per tenant:

    - name: acme                       # the tenant: metrics label, owner scope "tenant:acme"
      key: sk-acme-1                   # or key_sha256: <64 hex digits of SHA-256(key)>
      requests_per_second: 10          # limits, all optional (absent: unlimited)
      tokens_per_minute: 100000        # prompt + completion tokens
      max_concurrency: 8               # requests in progress at once
      max_tokens: 2048                 # the most tokens one completion may ask for
      max_storage_bytes: 1000000000    # files (uploads and batch outputs) and stored responses
      admin: true                      # optional: may abort every tenant's requests and read
                                       # the per-tenant metric series (default false)

The supervisor reads and validates it at start (a bad file stops the start with the entry and
field at fault) and again on SIGHUP (a bad file is logged and the keys in use stay). The keys
never reach a command line: the supervisor writes the validated table, keys as SHA-256 digests,
into its private runtime directory (`publish`), and every worker reads that snapshot
(`read_snapshot`), at start and on the SIGHUP the supervisor forwards. All workers therefore
serve the same validated table, a restarted worker included, whatever happened to the file
since.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from vllm_pyfrontend.tenants import key_digest

SNAPSHOT_FILE = "tenant-keys.json"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_LIMITS = ("requests_per_second", "tokens_per_minute", "max_concurrency", "max_tokens", "max_storage_bytes")
_FIELDS = frozenset(("name", "key", "key_sha256", "admin", *_LIMITS))


class KeysFileError(ValueError):
    """A keys file that cannot be used; the message names the file, the entry and the field."""


@dataclass(frozen=True, slots=True)
class Limits:
    requests_per_second: int | None = None
    tokens_per_minute: int | None = None
    max_concurrency: int | None = None
    max_tokens: int | None = None
    max_storage_bytes: int | None = None  # files and stored responses (not a rate: the stores hold it)

    @property
    def any(self) -> bool:
        return any(getattr(self, f) is not None for f in _LIMITS)

    def to_json(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in _LIMITS if getattr(self, f) is not None}


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One tenant of the keys file: its name, the SHA-256 digest of its key, its limits, and
    whether it is an admin (aborts any tenant's requests, reads per-tenant metrics)."""

    name: str
    digest: bytes
    limits: Limits
    admin: bool = False


def _limit(where: str, field: str, value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KeysFileError(f"{where}: `{field}` must be a whole number of at least 1, got {value!r}")
    return value


def parse_entries(data: Any, source: str = "keys file") -> list[KeyEntry]:
    """The entries of a parsed keys file, validated (raises KeysFileError)."""
    if data is None:
        data = []
    if not isinstance(data, list):
        raise KeysFileError(f"{source}: expected a list of key entries, got {type(data).__name__}")
    entries: list[KeyEntry] = []
    names: dict[str, int] = {}
    digests: dict[bytes, int] = {}
    for i, raw in enumerate(data):
        where = f"{source}: entry {i + 1}"
        if not isinstance(raw, dict):
            raise KeysFileError(f"{where}: expected a mapping with `name` and `key`, got {type(raw).__name__}")
        name = raw.get("name")
        if isinstance(name, str) and name:
            where = f"{source}: entry {i + 1} ({name})"
        unknown = sorted(str(k) for k in raw if k not in _FIELDS)
        if unknown:
            raise KeysFileError(f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(_FIELDS))})")
        if not isinstance(name, str) or not _NAME.match(name):
            raise KeysFileError(f"{where}: `name` must be 1-64 characters of letters, digits, `.`, `_`, `@`, `-` "
                                f"(starting with a letter or digit), got {name!r}")
        where = f"{source}: entry {i + 1} ({name})"
        if name in names:
            raise KeysFileError(f"{where}: duplicate name (also entry {names[name] + 1})")
        names[name] = i
        has_key, has_sha = "key" in raw, "key_sha256" in raw
        if has_key and has_sha:
            raise KeysFileError(f"{where}: give either `key` or `key_sha256`, not both")
        if has_key:
            key = raw["key"]
            if not isinstance(key, str) or not key.strip():
                raise KeysFileError(f"{where}: `key` must be a non-empty string")
            digest = key_digest(key)
        elif has_sha:
            sha = raw["key_sha256"]
            if not isinstance(sha, str) or not _HEX64.match(sha.strip()):
                raise KeysFileError(f"{where}: `key_sha256` must be 64 hexadecimal digits (SHA-256 of the key)")
            digest = bytes.fromhex(sha.strip())
        else:
            raise KeysFileError(f"{where}: missing `key` (or `key_sha256`)")
        if digest in digests:
            raise KeysFileError(f"{where}: duplicate key (also entry {digests[digest] + 1})")
        digests[digest] = i
        limits = Limits(**{f: _limit(where, f, raw[f]) for f in _LIMITS if raw.get(f) is not None})
        admin = raw.get("admin", False)
        if not isinstance(admin, bool):
            raise KeysFileError(f"{where}: `admin` must be true or false, got {admin!r}")
        entries.append(KeyEntry(name, digest, limits, admin))
    return entries


def load_keys_file(path: str, anonymous_keys: list[str] | tuple[str, ...] = ()) -> list[KeyEntry]:
    """Read and validate the keys file at `path` (YAML or JSON). `anonymous_keys`: the
    `--api-key` keys, which no named entry may repeat (a key names one tenant)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise KeysFileError(f"cannot read the keys file {path}: {e.strerror or e}") from None
    try:
        import yaml

        data = yaml.safe_load(text)  # (JSON is YAML)
    except Exception as e:  # noqa: BLE001 - yaml's errors: one message with the position
        raise KeysFileError(f"{path}: not valid YAML or JSON: {e}") from None
    entries = parse_entries(data, path)
    anonymous = {key_digest(k) for k in anonymous_keys if k}
    for e in entries:
        if e.digest in anonymous:
            raise KeysFileError(f"{path}: the key of `{e.name}` is also an --api-key key")
    return entries


# -- the snapshot the workers read --------------------------------------------------------------


def snapshot_path(runtime_dir: str) -> str:
    return os.path.join(runtime_dir, SNAPSHOT_FILE)


def publish(runtime_dir: str, entries: list[KeyEntry], generation: int) -> None:
    """Write the validated table for the workers (atomically: a worker reads the old or the
    new one, never half of one; owner-only, in the owner-only runtime directory)."""
    path = snapshot_path(runtime_dir)
    tmp = f"{path}.{os.getpid()}.tmp"
    doc = {"generation": generation,
           "keys": [{"name": e.name, "sha256": e.digest.hex(), "admin": e.admin, **e.limits.to_json()}
                    for e in entries]}
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def read_snapshot(runtime_dir: str) -> tuple[int, list[KeyEntry]]:
    """(generation, entries) as the supervisor published them."""
    with open(snapshot_path(runtime_dir), encoding="utf-8") as f:
        doc = json.load(f)
    entries = [KeyEntry(d["name"], bytes.fromhex(d["sha256"]),
                        Limits(**{f: d[f] for f in _LIMITS if d.get(f) is not None}), bool(d.get("admin")))
               for d in doc["keys"]]
    return int(doc["generation"]), entries
