"""What both parser registries remember of each name: the module that registered it and an
optional note, for the listings generated from them (`vllm_pyfrontend.parsers.catalog`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Registration:
    """Where a name was registered (the module's dotted name) and its optional note."""

    module: str
    note: str = ""


def caller_module(depth: int) -> str:
    """The dotted name of the module `depth` frames above the caller."""
    return sys._getframe(depth + 1).f_globals.get("__name__", "?")
