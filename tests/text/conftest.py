"""Fixtures: the real DeepSeek V4 tokenizer laid out as a model dir."""

from __future__ import annotations

import pytest

from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4
from vllm_pyfrontend.text.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def dsv4_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return materialize_deepseek_v4(str(tmp_path_factory.mktemp("dsv4")))


@pytest.fixture(scope="session")
def tok(dsv4_dir: str) -> Tokenizer:
    return Tokenizer.load(dsv4_dir)


@pytest.fixture(scope="session")
def tok_hf(dsv4_dir: str) -> Tokenizer:
    return Tokenizer.load(dsv4_dir, backend="tokenizers")
