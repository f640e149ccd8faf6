"""How many examples a randomized check draws: all of them everywhere, except in CI (`CI=true`,
`.ci/run`) without `VLLM_PYFRONTEND_FULL=1`, where a smaller sample drawn the same way runs (the
switch that skips the `on_demand` tests there, tests/conftest.py)."""

from __future__ import annotations

import os


def full_run() -> bool:
    """Whether every example runs: outside CI, or in CI with VLLM_PYFRONTEND_FULL=1."""
    ci = os.environ.get("CI", "").lower() in ("1", "true")
    return not ci or os.environ.get("VLLM_PYFRONTEND_FULL") == "1"


def sample_size(full: int, ci: int) -> int:
    """`full` examples, or `ci` of them in CI unless VLLM_PYFRONTEND_FULL=1."""
    return full if full_run() else ci
