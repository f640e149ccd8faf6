"""Cost of the stop-string matcher per detokenized delta (the stop workload's text and stops).

    .venv/bin/python bench/stop_matcher.py
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.workloads import STOP_SCRIPT, STOP_STRING  # noqa: E402
from vllm_pyfrontend.text.stop import StopStringMatcher  # noqa: E402


def main(rounds: int = 2000) -> None:
    # word-sized deltas of the scripted prose, without the stop string (every delta is scanned)
    deltas = [" " + w for w in STOP_SCRIPT.replace(STOP_STRING, "").split(" ")][:250]
    t0 = time.perf_counter()
    for _ in range(rounds):
        m = StopStringMatcher([STOP_STRING, "</answer>"], False)
        for d in deltas:
            m.feed(d)
    per = (time.perf_counter() - t0) / rounds / len(deltas)
    print(f"StopStringMatcher.feed: {per * 1e6:.2f} µs per delta ({len(deltas)} deltas x {rounds} requests)")


if __name__ == "__main__":
    main()
