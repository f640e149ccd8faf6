"""A classifier's labels and label count as vLLM's model config has them (Hugging Face's rules,
vLLM's LLM-as-classifier conversion, `--hf-overrides`), and scoring only for one label."""

from __future__ import annotations

import json

import pytest

from vllm_pyfrontend.api.pooling.model import PoolingModel, classifier_labels


@pytest.mark.parametrize("config, count, labels", [
    ({}, 2, {0: "LABEL_0", 1: "LABEL_1"}),  # transformers' default: two unnamed labels
    ({"num_labels": 3}, 3, {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}),
    ({"id2label": {"0": "neg", "1": "pos"}}, 2, {0: "neg", 1: "pos"}),
    ({"id2label": {"0": "relevant"}, "num_labels": 5}, 1, {0: "relevant"}),  # id2label wins
    ({"method": "from_2_way_softmax", "classifier_from_token": ["no", "yes"]}, 1, {0: "LABEL_0"}),
    ({"method": "no_post_processing", "classifier_from_token": ["a", "b", "c"]}, 3,
     {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}),
])
def test_labels(config, count, labels):
    assert classifier_labels(config) == (count, labels)


def test_scoring_follows_the_label_count_and_hf_overrides(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForSequenceClassification"]}))
    tasks = ("classify",)
    two = PoolingModel.load(str(tmp_path), tasks)
    assert two.num_labels == 2 and two.id2label[0] == "LABEL_0" and two.score_type is None
    one = PoolingModel.load(str(tmp_path), tasks, hf_overrides={"num_labels": 1})
    assert one.num_labels == 1 and one.score_type == "cross-encoder"


def test_llm_as_reranker_joins_the_pair_without_a_separator(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    tasks = ("classify",)
    assert PoolingModel.load(str(tmp_path), tasks).use_sep_token
    method = {"method": "from_2_way_softmax", "classifier_from_token": ["no", "yes"]}
    assert not PoolingModel.load(str(tmp_path), tasks, hf_overrides=method).use_sep_token
    assert PoolingModel.load(str(tmp_path), tasks, hf_overrides={**method, "use_sep_token": True}).use_sep_token
    assert PoolingModel.load(str(tmp_path), tasks, hf_overrides={**method, "use_pad_token": True}).use_sep_token
