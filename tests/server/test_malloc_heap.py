"""The worker template's C heap: after `seal_free_heap` the allocations of a process forked from
it come from fresh memory at the heap's top, not from the free chunks between shared pages."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from vllm_pyfrontend.server.malloc_heap import _glibc_malloc

pytestmark = pytest.mark.skipif(_glibc_malloc() is None, reason="glibc's malloc (2.33 and later) only")

# Run in a fresh interpreter: the heap's state is the script's own. Live chunks of many sizes
# with every other one freed (holes between live data, as a loaded tokenizer leaves them);
# allocations before sealing reuse the holes, those after it (in a forked child too) do not.
SCRIPT = textwrap.dedent("""
    import os
    from vllm_pyfrontend.server.malloc_heap import _glibc_malloc, release_free_heap, seal_free_heap

    libc = _glibc_malloc()
    sizes = [24 + 40 * k for k in range(80)] + [5000, 20000, 70000]
    live = [libc.malloc(s) for _ in range(60) for s in sizes]
    for p in live[::2]:
        libc.free(p)
    release_free_heap()

    def top_start():
        return libc.sbrk(0) - libc.mallinfo2().keepcost

    def free_below_top():
        m = libc.mallinfo2()
        return m.fordblks - m.keepcost

    start = top_start()
    probe = [libc.malloc(s) for s in sizes]
    reused = sum(p < start for p in probe)
    for p in probe:
        libc.free(p)

    free_before = free_below_top()
    taken = seal_free_heap()
    free_after = free_below_top()
    start = top_start()
    fresh = [libc.malloc(s) for _ in range(20) for s in sizes]
    below = sum(p < start for p in fresh)

    pid = os.fork()
    if pid == 0:
        child = [libc.malloc(s) for _ in range(20) for s in sizes]
        os._exit(sum(p < start for p in child) and 1)
    _, status = os.waitpid(pid, 0)
    print(reused, taken, free_before, free_after, below, os.waitstatus_to_exitcode(status))
""")


def test_sealed_heap_allocates_from_its_top_in_the_process_and_its_forks():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    reused, taken, free_before, free_after, below, child_status = map(int, out.stdout.split())
    assert reused > 0  # before sealing, malloc fills the holes first (what the seal prevents)
    assert taken >= 2400  # ~half of the 4,980 chunks were freed
    assert free_before > 1 << 20 and free_after < free_before // 20
    assert below == 0  # after it, every chunk is fresh memory above where the top began
    assert child_status == 0  # and in a forked child


def test_seal_takes_nothing_twice():
    script = ("from vllm_pyfrontend.server.malloc_heap import seal_free_heap\n"
              "seal_free_heap()\nprint(seal_free_heap())")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) < 64  # what the interpreter freed in between, at most
