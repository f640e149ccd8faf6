"""One counter per worker in a shared file, summed across the deployment's workers.

`/load`'s `server_load` is the deployment's in-flight requests whichever worker answers: each
worker writes its own count into its own cache-line slot of `<runtime_dir>/<name>` (mmap'ed),
and a read sums the slots. No locks: one writer per slot, and a sum is a snapshot (as vLLM's
`SharedAdmissionStats`, which admission control uses the same way). A restarted worker zeroes
its slot when it opens it.
"""

from __future__ import annotations

import mmap
import os
import struct

from vllm_pyfrontend.shared_files import map_shared

_SLOT = 64  # bytes per worker (one cache line)
_VALUE = struct.Struct("<q")


def map_slots(runtime_dir: str, name: str, slots: int, slot_size: int = _SLOT) -> mmap.mmap:
    """`<runtime_dir>/<name>`, grown to `slots` slots and mapped shared (every worker maps it)."""
    return map_shared(os.path.join(runtime_dir, name), slots * slot_size)


class WorkerSlots:
    def __init__(self, runtime_dir: str, name: str, worker_index: int, num_workers: int):
        self.num_workers = max(num_workers, worker_index + 1)
        self._map = map_slots(runtime_dir, name, self.num_workers)
        self._offset = worker_index * _SLOT
        self.set(0)

    def set(self, value: int) -> None:
        _VALUE.pack_into(self._map, self._offset, value)

    def total(self) -> int:
        return sum(_VALUE.unpack_from(self._map, w * _SLOT)[0] for w in range(self.num_workers))
