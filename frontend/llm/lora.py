"""LoRA adapters: what `model: <adapter>` lowers to, and the adapter list every worker shares.

vLLM's API server keeps its adapters in a dict and numbers them with a counter
(`OpenAIServingModels`); the engine caches adapters by that number (`lora_int_id`), so one
adapter must carry the same number from every worker, and a runtime load through one worker
must be usable through all. Here the list lives in a small SQLite file in the deployment's
runtime directory: every worker reads it (one indexed lookup per request naming an adapter) and
writes it in a transaction, and ids come from an AUTOINCREMENT counter, so they are never handed
out twice, as vLLM's counter never is.

The engine request carries vLLM's `LoRARequest` (`vllm/lora/request.py`, a msgspec array):
`[lora_name, lora_int_id, lora_path, base_model_name, load_inplace, is_3d_lora_weight]`.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from typing import Any, Iterable

from vllm_pyfrontend.store.files import enable_wal


class LoRAModuleError(ValueError):
    """A `--lora-modules` value that is neither `name=path` nor vLLM's JSON form."""


@dataclass(frozen=True, slots=True)
class LoRAModulePath:
    """One `--lora-modules` entry (vLLM's LoRAModulePath)."""

    name: str
    path: str
    base_model_name: str | None = None
    is_3d_lora_weight: bool = False


def parse_lora_modules(values: Iterable[Any]) -> list[LoRAModulePath]:
    """vLLM's LoRAParserAction: `name=path`, or a JSON object with `name`, `path` and optionally
    `base_model_name` (mappings are taken as they are, for the drop-in's parsed args)."""
    out: list[LoRAModulePath] = []
    for item in values or ():
        if item in (None, ""):
            continue
        if isinstance(item, str) and "=" in item and "," not in item:
            name, path = item.split("=", 1)
            out.append(LoRAModulePath(name, path))
            continue
        try:
            fields = json.loads(item) if isinstance(item, str) else dict(item)
            out.append(LoRAModulePath(**fields))
        except (ValueError, TypeError) as e:
            raise LoRAModuleError(f"Invalid --lora-modules value {item!r}: {e}") from None
    return out


@dataclass(frozen=True, slots=True)
class LoRAAdapter:
    name: str
    int_id: int
    path: str
    base_model_name: str | None = None
    load_inplace: bool = False
    is_3d_lora_weight: bool = False

    def wire(self) -> list[Any]:
        """vLLM's LoRARequest as the engine decodes it (a positional array)."""
        return [self.name, self.int_id, self.path, self.base_model_name, self.load_inplace,
                self.is_3d_lora_weight]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS ids (id INTEGER PRIMARY KEY AUTOINCREMENT);
CREATE TABLE IF NOT EXISTS adapters (
    name TEXT PRIMARY KEY, int_id INTEGER NOT NULL, path TEXT NOT NULL, base_model_name TEXT,
    load_inplace INTEGER NOT NULL, is_3d INTEGER NOT NULL, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""


class LoRAStore:
    """The deployment's adapters, shared by its workers through one SQLite file."""

    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        enable_wal(self._db)
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    @staticmethod
    def _adapter(row) -> LoRAAdapter:
        name, int_id, path, base, inplace, is_3d = row
        return LoRAAdapter(name, int_id, path, base, bool(inplace), bool(is_3d))

    def get(self, name: str) -> LoRAAdapter | None:
        row = self._db.execute(
            "SELECT name, int_id, path, base_model_name, load_inplace, is_3d FROM adapters WHERE name = ?",
            (name,)).fetchone()
        return None if row is None else self._adapter(row)

    def all(self) -> list[LoRAAdapter]:
        """In load order (vLLM lists its dict in insertion order)."""
        rows = self._db.execute(
            "SELECT name, int_id, path, base_model_name, load_inplace, is_3d FROM adapters ORDER BY seq").fetchall()
        return [self._adapter(r) for r in rows]

    def id_for(self, name: str) -> int:
        """The id a load of `name` uses: the loaded adapter's own (in-place reload), else a new one."""
        with self._transaction():
            row = self._db.execute("SELECT int_id FROM adapters WHERE name = ?", (name,)).fetchone()
            if row is not None:
                return row[0]
            return self._db.execute("INSERT INTO ids DEFAULT VALUES").lastrowid

    def put(self, adapter: LoRAAdapter) -> None:
        """Record a loaded adapter (replacing one of the same name, keeping its place)."""
        with self._transaction():
            row = self._db.execute("SELECT seq FROM adapters WHERE name = ?", (adapter.name,)).fetchone()
            seq = row[0] if row is not None else self._db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM adapters").fetchone()[0]
            self._db.execute(
                "INSERT OR REPLACE INTO adapters VALUES (?, ?, ?, ?, ?, ?, ?)",
                (adapter.name, adapter.int_id, adapter.path, adapter.base_model_name,
                 int(adapter.load_inplace), int(adapter.is_3d_lora_weight), seq))

    def remove(self, name: str) -> bool:
        with self._transaction():
            return self._db.execute("DELETE FROM adapters WHERE name = ?", (name,)).rowcount > 0

    def claim_once(self, key: str) -> bool:
        """True for the first caller of the deployment only (e.g. to record the static
        adapters once, not again when a worker restarts after a runtime unload)."""
        with self._transaction():
            if self._db.execute("SELECT 1 FROM meta WHERE key = ?", (key,)).fetchone() is not None:
                return False
            self._db.execute("INSERT INTO meta VALUES (?, '1')", (key,))
            return True

    def claimed(self, key: str) -> bool:
        return self._db.execute("SELECT 1 FROM meta WHERE key = ?", (key,)).fetchone() is not None

    def release(self, key: str) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM meta WHERE key = ?", (key,))

    def _transaction(self):
        return _Immediate(self._db)


class _Immediate:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error): one writer at a time across workers."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
