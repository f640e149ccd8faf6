"""The model's vocabulary size (config.json) bounds token ids, as vLLM's renderer does."""

from __future__ import annotations

import json

import pytest

from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.llm.prompt import check_prompt_ids
from vllm_pyfrontend.model_config import ModelConfig


def test_vocab_size_from_config_or_text_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3", "vocab_size": 151936}))
    assert ModelConfig.load(str(tmp_path)) == ModelConfig("qwen3", 151936)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava", "text_config": {"vocab_size": 32064}}))
    assert ModelConfig.load(str(tmp_path)).vocab_size == 32064
    (tmp_path / "config.json").write_text("not json")
    assert ModelConfig.load(str(tmp_path)) == ModelConfig()
    assert ModelConfig.load(str(tmp_path / "missing")) == ModelConfig()


def test_prompt_ids_past_the_tokenizer_but_inside_the_model_vocab():
    # Qwen3: the tokenizer has 151669 ids, the model's embedding table 151936 rows.
    assert check_prompt_ids([151700], 151936) == [151700]
    with pytest.raises(InvalidRequestError):
        check_prompt_ids([151936], 151936)
    with pytest.raises(InvalidRequestError):
        check_prompt_ids([-1], 151936)
