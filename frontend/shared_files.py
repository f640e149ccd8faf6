"""Files every worker of a deployment maps shared (admission counts, /load, tenant quotas).

Each worker writes only its own records and a reader sums them: no locks. A file is grown to
the size asked for (a restarted or newer worker may need more records) and mapped whole.
"""

from __future__ import annotations

import mmap
import os


def map_shared(path: str, size: int) -> mmap.mmap:
    """`path` (created 0600 when missing), grown to at least `size` bytes, mapped shared."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
