"""An embeddings batch on the real vLLM CPU engine with the tiny pooling model
(`--runner pooling --convert embed`; one engine for the module): the vectors in the output file
equal the same requests' vectors online."""

from __future__ import annotations

import numpy as np
import pytest

from tests.batches.helpers import by_custom_id, client, entries, line, submit, wait
from tests.e2e.tiny_model import ENGINE_ARGS
from tests.e2e.tiny_pooling_model import build_tiny_embed_model
from tests.e2e.vllm_pair import MODEL
from tests.stack import Stack

pytestmark = [pytest.mark.real_engine, pytest.mark.on_demand]  # several engine starts: see tests/conftest.py

TEXTS = ["hello world", "The quick brown fox jumps over the lazy dog.", "bye"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(["--workers", "2", "--shutdown-timeout", "5", "--served-model-name", MODEL, *ENGINE_ARGS,
               "--runner", "pooling", "--convert", "embed", "--files-dir", str(tmp_path_factory.mktemp("files")),
               build_tiny_embed_model()], ready_timeout=600)
    yield s
    assert s.terminate(120) == 0, s.logs()


def test_embeddings_batch_equals_online(stack):
    c = client(stack.base_url)
    bodies = {f"emb-{i}": {"model": MODEL, "input": t} for i, t in enumerate(TEXTS)}
    bodies["emb-many"] = {"model": MODEL, "input": TEXTS, "dimensions": 32}
    batch = submit(c, "/v1/embeddings", [line(k, "/v1/embeddings", v) for k, v in bodies.items()])
    done = wait(c, batch.id, timeout=300)
    assert done.status == "completed" and done.request_counts.completed == len(bodies), done
    out = by_custom_id(entries(c, done.output_file_id))
    for cid, body in bodies.items():
        got = out[cid]["response"]["body"]
        online = c.embeddings.create(**body)
        assert got["object"] == "list" and len(got["data"]) == len(online.data)
        for g, o in zip(got["data"], online.data):
            np.testing.assert_allclose(g["embedding"], o.embedding, rtol=1e-5, atol=1e-6)
        assert got["usage"]["prompt_tokens"] == online.usage.prompt_tokens
