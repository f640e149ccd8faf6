"""The C heap (glibc malloc) of a process that forks workers: what it gives back before forking,
and how it keeps the workers' allocations off the pages they share with it.

Both are no-ops where the C library is not glibc (taking the free chunks needs glibc 2.33)."""

from __future__ import annotations

import ctypes
import functools


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """glibc, where `malloc_trim` is (glibc 2.8 and later)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


@functools.cache
def _glibc_malloc() -> ctypes.CDLL | None:
    """glibc with what `seal_free_heap` reads and calls (`mallinfo2`: glibc 2.33 and later)."""
    libc = _libc()
    try:
        libc.mallinfo2, libc.sbrk  # noqa: B018
    except AttributeError:  # (None, or an older glibc)
        return None
    libc.mallinfo2.restype = _MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.sbrk.restype = ctypes.c_void_p
    libc.sbrk.argtypes = [ctypes.c_ssize_t]
    return libc


def release_free_heap() -> None:
    """Give the C heap's free pages back to the kernel (glibc `malloc_trim`). Loading the
    tokenizer parses its JSON (5.5 MB for DeepSeek V4) into temporary trees in both tokenizer
    libraries; freed, those pages stay resident in malloc's arenas: ~60 MiB of a worker's
    ~255 MiB (PSS) with that tokenizer, every worker."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


# Chunk sizes taken, largest first: powers of two down to 8 KiB, then every 16 bytes (malloc's
# chunk granularity on 64-bit glibc) from 4 KiB down to the smallest chunk. A larger free chunk
# is split, and its remainder taken at a smaller size.
_SEAL_SIZES = [1 << k for k in range(26, 12, -1)] + list(range(4096, 16, -16))
# The largest chunk glibc's per-thread cache holds (a 1,032-byte request).
_TCACHE_MAX_CHUNK = 1040


def seal_free_heap() -> int:
    """Take every free chunk of the main arena and keep it, so a process forked afterwards
    allocates from fresh pages at the heap's top instead of from the free chunks between the
    live data it shares with this process. Loading a tokenizer leaves thousands of them (7,000,
    ~100 MiB, for DeepSeek V4 with fastokens: its JSON parsed and freed twice), and malloc
    reuses them first: each reuse writes the page the chunk lies on, and a worker gets its own
    copy of it, the template keeping the original (~13 MiB copied per worker under load,
    `bench/run.py --workload toolcall`). Taking chunks writes their headers only: the free
    pages inside them that `release_free_heap` returned stay returned (the split ones' headers
    make ~4 MiB of them resident again, once, in the template). Takes a few milliseconds.

    A chunk comes from the top (fresh memory: where taking stops for that size) when its
    address is at or above where the top began; one from mmap lies above the heap as well.
    Only the calling thread's arena (the main one) is reached. Returns how many chunks were
    taken (they are never freed)."""
    libc = _glibc_malloc()
    if libc is None:
        return 0
    top_start = libc.sbrk(0) - libc.mallinfo2().keepcost
    taken = 0
    for size in _SEAL_SIZES:
        while True:
            p = libc.malloc(size - 8)  # a chunk of `size` bytes: the request plus its header
            if p and p < top_start:
                taken += 1
                continue
            if size > _TCACHE_MAX_CHUNK:
                libc.free(p)  # back into the top (or unmapped)
            # (a small one is kept: freed, it would wait in malloc's per-thread cache, a free
            # chunk above the shared pages' end that a worker would still reuse)
            break
    return taken
