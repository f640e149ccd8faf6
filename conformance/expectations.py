"""Tests of vLLM's suites that vLLM's own frontend passes and this project's does not, on purpose
or not yet. Keys are pytest node ids relative to vLLM's source root
(`tests/entrypoints/...::test_name[params]`).

DELIBERATE_DIFFERENCES: where this project's answer is the better one for a user, each with why.
A missing feature is never a deliberate difference.

KNOWN_GAPS: differences still to close. The CI check (tests/conformance) reports them without
failing; an entry is removed when its fix lands, and any failure not listed in either fails CI.
"""

from __future__ import annotations

DELIBERATE_DIFFERENCES: dict[str, str] = {}

KNOWN_GAPS: dict[str, str] = {}
