"""Pooling routes against vLLM's own Python server, each in front of its own real EngineCore on
CPU: a tiny embedding model (`--runner pooling --convert embed`, Matryoshka dimensions), a
tiny cross-encoder (Qwen3ForSequenceClassification, one label), a two-label classifier without
id2label (Hugging Face's default labels; no scoring), a BERT cross-encoder (WordPiece, token
type ids) and a ColBERT late-interaction model. Vectors and scores must be allclose to vLLM's,
usage and shapes equal; the official `openai` SDK parses our embeddings; bad input is a clear 4xx.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from tests.e2e.tiny_model import ENGINE_ARGS
from tests.e2e.tiny_pooling_model import (BERT_MAX_LEN, build_tiny_bert_cross_encoder, build_tiny_classifier,
                                          build_tiny_colbert, build_tiny_embed_model,
                                          build_tiny_unlabelled_classifier)
from tests.e2e.vllm_pair import MODEL, start_pair

pytestmark = pytest.mark.real_engine

TEXTS = ["hello world", "The quick brown fox jumps over the lazy dog.", "bye"]


@pytest.fixture(scope="module")
def embed_pair():
    args = ["--served-model-name", MODEL, *ENGINE_ARGS, "--runner", "pooling", "--convert", "embed"]
    with start_pair(build_tiny_embed_model(), args=args) as pair:
        yield pair


@pytest.fixture(scope="module")
def classifier_pair():
    args = ["--served-model-name", MODEL, *ENGINE_ARGS, "--runner", "pooling"]
    with start_pair(build_tiny_classifier(), args=args, workers=1) as pair:
        yield pair


def post(base: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(base + path, json=body, timeout=120)


def both(pair, path: str, body: dict[str, Any]) -> tuple[httpx.Response, httpx.Response]:
    return post(pair.ours, path, body), post(pair.vllm, path, body)


_VOLATILE = {"id", "created"}


def assert_close(ours: Any, theirs: Any, where: str = "$") -> None:
    """Same JSON shape and values; floats allclose (bfloat16 model, float32 outputs)."""
    if isinstance(theirs, float) or isinstance(ours, float):
        assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-6), where
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict), where
        assert set(ours) - _VOLATILE == set(theirs) - _VOLATILE, where
        for k in theirs:
            if k not in _VOLATILE:
                assert_close(ours[k], theirs[k], f"{where}.{k}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_close(a, b, f"{where}[{i}]")
    else:
        assert ours == theirs, where


def b64_floats(s: str, fmt: str = "<f") -> list[float]:
    raw = base64.b64decode(s)
    n = len(raw) // struct.calcsize(fmt[-1])
    return list(struct.unpack(f"{fmt[0]}{n}{fmt[-1]}", raw))


# --------------------------------------------------------------------------- embeddings

EMBED_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("string", "/v1/embeddings", {"input": "hello world"}),
    ("strings", "/v1/embeddings", {"input": TEXTS}),
    ("token_ids", "/v1/embeddings", {"input": [100, 200, 300, 400]}),
    ("token_id_lists", "/v1/embeddings", {"input": [[100, 200], [300, 400, 500]]}),
    ("dimensions", "/v1/embeddings", {"input": TEXTS[:2], "dimensions": 64}),
    ("truncate", "/v1/embeddings", {"input": TEXTS[1], "truncate_prompt_tokens": 3}),
    ("truncate_left", "/v1/embeddings", {"input": TEXTS[1], "truncate_prompt_tokens": 3, "truncation_side": "left"}),
    ("no_activation", "/v1/embeddings", {"input": "hello", "use_activation": False}),
    ("no_special_tokens", "/v1/embeddings", {"input": "hello", "add_special_tokens": False}),
    ("messages", "/v1/embeddings", {"messages": [{"role": "user", "content": "hello there"}]}),
    ("messages_in_input", "/v1/embeddings", {"input": [{"role": "system", "content": "Be short."},
                                                       {"role": "user", "content": "hi"}]}),
    ("request_id", "/v1/embeddings", {"input": "x", "request_id": "abc", "user": "u"}),
    ("pooling", "/pooling", {"input": TEXTS[:2]}),
    ("pooling_embed_task", "/pooling", {"input": "hi", "task": "embed"}),
    ("score_bi_encoder", "/score", {"text_1": "what is a fox", "text_2": TEXTS}),
    ("score_n_n", "/score", {"text_1": TEXTS[:2], "text_2": TEXTS[1:]}),
    ("score_queries_documents", "/v1/score", {"queries": "fox", "documents": TEXTS}),
    ("rerank_bi_encoder", "/rerank", {"query": "a fox", "documents": TEXTS, "top_n": 2}),
    ("rerank_v2", "/v2/rerank", {"query": "a fox", "documents": TEXTS}),
    ("cohere_embed", "/v2/embed", {"texts": TEXTS[:2]}),
    ("cohere_embed_types", "/v2/embed", {"texts": TEXTS[:2], "embedding_types": ["float", "binary", "ubinary"],
                                         "output_dimension": 64}),
    ("cohere_truncate_start", "/v2/embed", {"texts": [TEXTS[1]], "truncate": "START", "max_tokens": 3}),
]

# Both answer 4xx with the same status (the messages are ours).
EMBED_ERRORS: list[tuple[str, str, dict[str, Any]]] = [
    ("empty_list", "/v1/embeddings", {"input": []}),
    ("missing_input", "/v1/embeddings", {}),
    ("bad_input_type", "/v1/embeddings", {"input": 5}),
    ("token_out_of_vocab", "/v1/embeddings", {"input": [10**7]}),
    ("too_long", "/v1/embeddings", {"input": "hello " * 5000}),
    ("dimensions_not_matryoshka", "/v1/embeddings", {"input": "x", "dimensions": 48}),
    ("dimensions_too_big", "/v1/embeddings", {"input": "x", "dimensions": 4096}),
    ("truncate_past_context", "/v1/embeddings", {"input": "x", "truncate_prompt_tokens": 5000}),
    ("normalize_removed", "/v1/embeddings", {"input": "x", "normalize": True}),
    ("bad_encoding_format", "/v1/embeddings", {"input": "x", "encoding_format": "hex"}),
    ("wrong_model", "/v1/embeddings", {"input": "x", "model": "nope"}),
    ("score_lengths", "/score", {"text_1": TEXTS[:2], "text_2": TEXTS}),
    ("score_empty", "/score", {"text_1": [], "text_2": TEXTS}),
    ("pooling_task_removed", "/pooling", {"input": "x", "task": "encode"}),
    ("pooling_dimensions", "/pooling", {"input": "x", "dimensions": 32}),
    ("pooling_token_task", "/pooling", {"input": "x", "task": "token_embed"}),
]


def test_embeddings_equal_vllms(embed_pair):
    for name, path, body in EMBED_CASES:
        ours, theirs = both(embed_pair, path, {"model": MODEL, **body})
        assert theirs.status_code == 200, (name, theirs.text)
        assert ours.status_code == 200, (name, ours.text)
        assert_close(ours.json(), theirs.json(), name)


def test_embeddings_base64_equals_vllms(embed_pair):
    for extra in ({}, {"embed_dtype": "float16"}, {"embed_dtype": "bfloat16", "endianness": "big"}):
        body = {"model": MODEL, "input": TEXTS, "encoding_format": "base64", **extra}
        ours, theirs = both(embed_pair, "/v1/embeddings", body)
        assert ours.status_code == theirs.status_code == 200, ours.text
        a, b = ours.json(), theirs.json()
        assert a["usage"] == b["usage"]
        if not extra:  # float32: the same floats as the float format
            floats = post(embed_pair.ours, "/v1/embeddings", {"model": MODEL, "input": TEXTS}).json()
            for item, f in zip(a["data"], floats["data"]):
                np.testing.assert_allclose(b64_floats(item["embedding"]), f["embedding"], rtol=1e-6)
        for x, y in zip(a["data"], b["data"]):
            assert x["index"] == y["index"] and x["object"] == y["object"]
            if not extra:
                np.testing.assert_allclose(b64_floats(x["embedding"]), b64_floats(y["embedding"]), rtol=1e-5,
                                           atol=1e-6)
            else:  # 16-bit encodings round the same float32 values the same way
                assert x["embedding"] == y["embedding"], extra


def test_openai_sdk_parses_embeddings(embed_pair):
    client = openai.OpenAI(base_url=embed_pair.ours + "/v1", api_key="x")
    ref = openai.OpenAI(base_url=embed_pair.vllm + "/v1", api_key="x")
    for fmt in ("float", "base64"):  # the SDK asks for base64 and decodes it when not told
        kw = {"encoding_format": fmt} if fmt == "float" else {}
        ours = client.embeddings.create(model=MODEL, input=TEXTS, **kw)
        theirs = ref.embeddings.create(model=MODEL, input=TEXTS, **kw)
        assert len(ours.data) == 3 and ours.usage.prompt_tokens == theirs.usage.prompt_tokens
        for a, b in zip(ours.data, theirs.data):
            assert len(a.embedding) == 128
            np.testing.assert_allclose(a.embedding, b.embedding, rtol=1e-5, atol=1e-6)


def test_embedding_errors_are_4xx(embed_pair):
    for name, path, body in EMBED_ERRORS:
        ours, theirs = both(embed_pair, path, {"model": MODEL, **body})
        assert 400 <= theirs.status_code < 500, (name, theirs.text)
        assert ours.status_code == theirs.status_code, (name, ours.text, theirs.status_code)
        err = ours.json()["error"]
        assert err["code"] == ours.status_code and err["message"], name


def test_embedding_limits_and_wrong_tasks(embed_pair):
    # 10,000 inputs: refused before anything reaches the engine (vLLM runs them all).
    r = post(embed_pair.ours, "/v1/embeddings", {"model": MODEL, "input": ["x"] * 10_000})
    assert r.status_code == 400 and "at most 2048" in r.json()["error"]["message"]
    # Generation routes and classification on an embedding model: a 400 that says why
    # (vLLM: 404, the routes are not there).
    for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/completions", {"prompt": "hi"}), ("/classify", {"input": "hi"})):
        r = post(embed_pair.ours, path, {"model": MODEL, **body})
        assert r.status_code == 400, (path, r.text)
        assert "embed" in r.json()["error"]["message"], r.text
        assert post(embed_pair.vllm, path, {"model": MODEL, **body}).status_code == 404
    # The engine is still fine.
    assert post(embed_pair.ours, "/v1/embeddings", {"model": MODEL, "input": "ok"}).status_code == 200


def test_rerank_return_documents_false(embed_pair):
    body = {"model": MODEL, "query": "a fox", "documents": TEXTS, "return_documents": False, "top_n": 2}
    ours = post(embed_pair.ours, "/rerank", body).json()
    full = post(embed_pair.vllm, "/rerank", body).json()  # vLLM ignores the field
    assert [r["index"] for r in ours["results"]] == [r["index"] for r in full["results"]]
    assert all("document" not in r for r in ours["results"])


# --------------------------------------------------------------------------- classifier

CLASSIFY_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("classify", "/classify", {"input": TEXTS}),
    ("classify_ids", "/classify", {"input": [[100, 200, 300]]}),
    ("classify_messages", "/classify", {"messages": [{"role": "user", "content": "hello"}]}),
    ("classify_no_activation", "/classify", {"input": "hello", "use_activation": False}),
    ("pooling", "/pooling", {"input": TEXTS[:2]}),
    ("score", "/score", {"text_1": "what is a fox", "text_2": TEXTS}),
    ("score_n_n", "/v1/score", {"text_1": TEXTS[:2], "text_2": TEXTS[1:]}),
    ("score_data", "/score", {"data_1": "fox", "data_2": "dog"}),
    ("score_doc_limit", "/score", {"queries": "a fox", "documents": TEXTS, "max_tokens_per_doc": 2}),
    ("score_truncate", "/score", {"text_1": "a fox", "text_2": TEXTS[1], "truncate_prompt_tokens": 4}),
    ("rerank", "/rerank", {"query": "a fox", "documents": TEXTS}),
    ("rerank_top_n", "/v1/rerank", {"query": "a fox", "documents": TEXTS, "top_n": 1}),
]

CLASSIFY_ERRORS: list[tuple[str, str, dict[str, Any]]] = [
    ("empty", "/classify", {"input": []}),
    ("too_long", "/classify", {"input": "hello " * 5000}),
    ("pooling_other_task", "/pooling", {"input": "x", "task": "embed"}),
    ("score_lengths", "/score", {"text_1": TEXTS[:2], "text_2": TEXTS}),
    ("doc_limit_past_context", "/score", {"text_1": "a", "text_2": "b", "max_tokens_per_doc": 5000}),
]


def test_classification_and_scores_equal_vllms(classifier_pair):
    for name, path, body in CLASSIFY_CASES:
        ours, theirs = both(classifier_pair, path, {"model": MODEL, **body})
        assert theirs.status_code == 200, (name, theirs.text)
        assert ours.status_code == 200, (name, ours.text)
        assert_close(ours.json(), theirs.json(), name)
    label = post(classifier_pair.ours, "/classify", {"model": MODEL, "input": "x"}).json()["data"][0]["label"]
    assert label == "relevant"  # from the model config's id2label


def test_classifier_errors_are_4xx(classifier_pair):
    for name, path, body in CLASSIFY_ERRORS:
        ours, theirs = both(classifier_pair, path, {"model": MODEL, **body})
        assert 400 <= theirs.status_code < 500, (name, theirs.text)
        assert ours.status_code == theirs.status_code, (name, ours.text, theirs.status_code)
    for path, body in (("/v1/embeddings", {"input": "hi"}), ("/v2/embed", {"texts": ["hi"]}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
        r = post(classifier_pair.ours, path, {"model": MODEL, **body})
        assert r.status_code == 400 and "classify" in r.json()["error"]["message"], (path, r.text)


# --------------------------------------------------------------------------- more pooling models
# One engine pair per model, class-scoped so that only one pair runs at a time. Both sides must
# answer every case with the same status, and equal bodies where vLLM serves it.


def assert_same_answers(pair, cases: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    """Each case sent to both servers: the same status, and allclose bodies on success.
    Where vLLM has not registered the route for this model (404) we answer 400 saying why
    (docs/COMPATIBILITY.md, "Pooling models"). Returns vLLM's bodies by case name (None
    where it refused)."""
    answers = {}
    for name, path, body in cases:
        ours, theirs = both(pair, path, {"model": MODEL, **body})
        if theirs.status_code == 404:
            assert ours.status_code == 400 and ours.json()["error"]["message"], (name, ours.text)
            answers[name] = None
            continue
        assert ours.status_code == theirs.status_code, (name, ours.text, theirs.status_code, theirs.text)
        if theirs.status_code == 200:
            assert_close(ours.json(), theirs.json(), name)
        answers[name] = theirs.json() if theirs.status_code == 200 else None
    return answers


def engine_args(*extra: str, max_model_len: int | None = None) -> list[str]:
    args = ["--served-model-name", MODEL, *ENGINE_ARGS, "--runner", "pooling", *extra]
    if max_model_len is not None:
        args[args.index("--max-model-len") + 1] = str(max_model_len)
    return args


SCORING_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("score", "/score", {"text_1": "what is a fox", "text_2": TEXTS}),
    ("v1_score_n_n", "/v1/score", {"text_1": TEXTS[:2], "text_2": TEXTS[1:]}),
    ("score_queries_documents", "/score", {"queries": "a fox", "documents": TEXTS}),
    ("score_doc_limit", "/score", {"queries": "a fox", "documents": TEXTS, "max_tokens_per_doc": 2}),
    ("score_truncate", "/score", {"text_1": "a fox", "text_2": TEXTS[1], "truncate_prompt_tokens": 4}),
    ("rerank", "/rerank", {"query": "a fox", "documents": TEXTS}),
    ("v1_rerank_top_n", "/v1/rerank", {"query": "a fox", "documents": TEXTS, "top_n": 1}),
    ("v2_rerank", "/v2/rerank", {"query": "the lazy dog", "documents": TEXTS}),
]

CLASSIFIER_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("classify", "/classify", {"input": TEXTS}),
    ("classify_ids", "/classify", {"input": [[2, 100, 150]]}),
    ("pooling", "/pooling", {"input": TEXTS[:2]}),
    *SCORING_CASES,
]


@pytest.mark.on_demand  # an engine pair of its own: see tests/conftest.py
class TestUnlabelledClassifier:
    """A Qwen3ForSequenceClassification with two labels and no id2label in config.json: vLLM's
    labels are Hugging Face's defaults (`LABEL_0`, `LABEL_1`) and scoring is off (a
    cross-encoder needs one label)."""

    @pytest.fixture(scope="class")
    def pair(self):
        with start_pair(build_tiny_unlabelled_classifier(), args=engine_args(), workers=1) as pair:
            yield pair

    def test_labels_and_scoring_equal_vllms(self, pair):
        answers = assert_same_answers(pair, CLASSIFIER_CASES)
        labels = {d["label"] for d in answers["classify"]["data"]}
        assert labels <= {"LABEL_0", "LABEL_1"} and labels, labels
        assert all(len(d["probs"]) == 2 for d in answers["classify"]["data"])
        assert answers["score"] is None and answers["rerank"] is None  # vLLM refuses them too
        msg = post(pair.ours, "/rerank", {"model": MODEL, "query": "a", "documents": ["b"]}).json()["error"]["message"]
        assert "num_labels == 1" in msg and "has 2" in msg, msg


BERT_PAIR_CASES: list[tuple[str, str, dict[str, Any]]] = [
    *CLASSIFIER_CASES,
    # The pair's segments differ only in token type: swapping them changes the score.
    ("score_swapped", "/score", {"text_1": TEXTS[1], "text_2": "what is a fox"}),
    ("score_data", "/score", {"data_1": "paris", "data_2": "the capital of france"}),
    ("score_no_activation", "/score", {"text_1": "a fox", "text_2": TEXTS, "use_activation": False}),
]


@pytest.mark.on_demand  # an engine pair of its own: see tests/conftest.py
class TestBertCrossEncoder:
    """A BERT cross-encoder (one label, WordPiece, token type ids 0 for the query and 1 for the
    document): scores and rankings equal vLLM's."""

    @pytest.fixture(scope="class")
    def pair(self):
        with start_pair(build_tiny_bert_cross_encoder(), args=engine_args(max_model_len=BERT_MAX_LEN),
                        workers=1) as pair:
            yield pair

    def test_scores_equal_vllms(self, pair):
        answers = assert_same_answers(pair, BERT_PAIR_CASES)
        assert answers["score"] is not None and answers["v2_rerank"] is not None
        a = answers["score"]["data"][1]["score"]
        b = answers["score_swapped"]["data"][0]["score"]
        assert a != pytest.approx(b, rel=1e-5, abs=1e-6)  # token types (and order) reach the model

    def test_errors_equal_vllms(self, pair):
        for name, path, body in (("too_long", "/score", {"text_1": "a", "text_2": "fox " * 600}),
                                 ("lengths", "/score", {"text_1": TEXTS[:2], "text_2": TEXTS}),
                                 ("doc_limit", "/rerank", {"query": "a", "documents": ["b"],
                                                           "max_tokens_per_doc": 600})):
            ours, theirs = both(pair, path, {"model": MODEL, **body})
            assert 400 <= theirs.status_code < 500, (name, theirs.text)
            assert ours.status_code == theirs.status_code, (name, ours.text, theirs.status_code)


@pytest.mark.on_demand  # an engine pair of its own: see tests/conftest.py
class TestColBERT:
    """A late-interaction model (`HF_ColBERT`: BERT + a linear projection of every token): vLLM
    scores a pair with MaxSim over the two texts' token embeddings."""

    @pytest.fixture(scope="class")
    def pair(self):
        with start_pair(build_tiny_colbert(), args=engine_args(max_model_len=BERT_MAX_LEN), workers=1) as pair:
            yield pair

    def test_scores_equal_vllms(self, pair):
        cases = [*SCORING_CASES, ("pooling", "/pooling", {"input": "hello world"}),
                 ("pooling_truncate", "/pooling", {"input": TEXTS[1], "truncate_prompt_tokens": 4}),
                 ("score_truncate_left", "/score", {"text_1": "a fox", "text_2": TEXTS[1], "truncate_prompt_tokens": 4,
                                                    "truncation_side": "left"})]
        answers = assert_same_answers(pair, cases)
        assert answers["score"] is not None and answers["rerank"] is not None
