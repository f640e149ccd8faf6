"""`--api-keys-file` in the supervisor: the key table published for the workers, and its reload
on SIGHUP.

    start     read and check the file, publish generation 1 (before any worker starts)
    SIGHUP    read and check it again: a bad file is logged and nothing changes; a good one is
              published as the next generation and every ready worker gets SIGHUP, which makes
              it swap its table (frontend/tenants/key_table.py) with no connection dropped
    ready     a worker that started before the last reload (it may have read the older table)
              gets SIGHUP as it reports ready: a worker only handles SIGHUP once it is ready,
              so nothing is signalled before that

The file itself is read only here; the workers read the published snapshot, keys as digests, in
the runtime directory (frontend/tenants/keys_file.py).
"""

from __future__ import annotations

import logging
import signal

from vllm_pyfrontend.tenants.keys_file import KeysFileError, load_keys_file, publish
from vllm_pyfrontend.tenants.quotas import remove_older_files


class KeysReloader:
    def __init__(self, path: str, runtime_dir: str, anonymous_keys: list[str], logger: logging.Logger):
        self.path = path
        self.runtime_dir = runtime_dir
        self._anonymous = list(anonymous_keys)
        self._log = logger
        self.generation = 0
        self._started_at: dict[int, int] = {}  # worker index -> generation when it was started

    def start(self) -> None:
        """Publish the first table (raises KeysFileError for a file gone bad since the start,
        or one that cannot be written)."""
        entries = load_keys_file(self.path, self._anonymous)
        try:
            publish(self.runtime_dir, entries, 1)
        except OSError as e:
            raise KeysFileError(f"cannot publish the keys for the workers: {e}") from None
        self.generation = 1
        self._log.info("API keys file %s: %d named key(s)", self.path, len(entries))

    def reload(self, slots) -> bool:
        """SIGHUP: publish the file again and tell the ready workers. False: the file is bad
        (logged; the workers keep the keys they have)."""
        try:
            entries = load_keys_file(self.path, self._anonymous)
            publish(self.runtime_dir, entries, self.generation + 1)
        except (KeysFileError, OSError) as e:
            self._log.error("SIGHUP: API keys not reloaded, keeping the keys in use: %s", e)
            return False
        self.generation += 1
        remove_older_files(self.runtime_dir, self.generation - 1)
        self._log.info("SIGHUP: API keys file %s reloaded: %d named key(s) (generation %d)",
                       self.path, len(entries), self.generation)
        for slot in slots:
            if slot.ready and slot.child is not None and slot.child.alive:
                slot.child.send_signal(signal.SIGHUP)
        return True

    def starting(self, index: int) -> None:
        """Worker `index` is being started (it reads the table published now, or a later one)."""
        self._started_at[index] = self.generation

    def ready(self, slot) -> None:
        """Worker `slot` reports ready: if a reload came since its start, it may hold the
        older table, so it reloads now."""
        if self._started_at.get(slot.index, self.generation) < self.generation and slot.child is not None:
            self._started_at[slot.index] = self.generation
            slot.child.send_signal(signal.SIGHUP)
