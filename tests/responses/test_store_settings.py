"""The response store's settings, end to end (a worker in the test process, tests/inprocess.py,
on the simulated engine; `openai` SDK):
byte bounds per record and in all, `--response-store none`, and vLLM's
`VLLM_ENABLE_RESPONSES_API_STORE=0`."""

from __future__ import annotations

import os

import openai
import pytest

from vllm_pyfrontend.store import store_disabled
from tests.responses.helpers import client
from tests.inprocess import InProcessStack

SIM = ["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002", "--max-model-len", "8192",
       "--served-model-name", "dsv4", "--shutdown-timeout", "5"]
MODEL = "demo:deepseek-v4"


def _store_bytes(path: str) -> int:
    return sum(os.path.getsize(path + s) for s in ("", "-wal", "-shm") if os.path.exists(path + s))


def test_byte_bounds(tmp_path):
    path = str(tmp_path / "responses.db")
    args = [*SIM, "--response-store", f"sqlite:///{path}", "--response-store-max-bytes", "300000",
            "--response-store-max-record-bytes", "100000", MODEL]
    with InProcessStack(args) as s:
        c = client(s.base_url)
        c.responses.create(model="dsv4", input="warm", max_output_tokens=2)
        before = _store_bytes(path)
        # Three requests with 10 MB of metadata each: refused up front, nothing stored or run.
        for _ in range(3):
            with pytest.raises(openai.BadRequestError) as e:
                c.responses.create(model="dsv4", input="x", max_output_tokens=2, metadata={"k": "x" * 10_000_000})
            assert "bound of 100000" in str(e.value)
        assert _store_bytes(path) - before < 1_000_000
        # store: false is not bounded by the store
        assert c.responses.create(model="dsv4", input="x", max_output_tokens=2, store=False,
                                  metadata={"k": "x" * 200_000}).status == "incomplete"

        # In all: 60 kB records, 300 kB kept: the oldest go first.
        ids = [c.responses.create(model="dsv4", input=f"r{i}", max_output_tokens=2,
                                  metadata={"k": "x" * 60_000}).id for i in range(8)]
        kept = []
        for rid in ids:
            try:
                kept.append(c.responses.retrieve(rid).id)
            except openai.NotFoundError:
                pass
        assert 3 <= len(kept) <= 4 and kept == ids[-len(kept):], (ids, kept)

        # An output that takes the record over its bound: the client gets it, the store keeps
        # the response as failed (never a conversation cut short).
        big = c.responses.create(model="dsv4", input="long", max_output_tokens=2000, extra_body={"ignore_eos": True},
                                 metadata={"k": "x" * 96_000})
        assert big.status == "incomplete" and big.usage.output_tokens == 2000 and len(big.output_text) > 4000
        stored = c.responses.retrieve(big.id)
        assert stored.status == "failed" and stored.error.code == "response_too_large" and stored.output == []


def test_response_store_none():
    with InProcessStack([*SIM, "--response-store", "none", MODEL]) as s:
        _check_store_off(s.base_url)


def test_env_var_turns_the_default_store_off_and_the_flag_wins(tmp_path):
    with InProcessStack([*SIM, MODEL], env={"VLLM_ENABLE_RESPONSES_API_STORE": "0"}) as s:
        _check_store_off(s.base_url)
    assert store_disabled(None, {"VLLM_ENABLE_RESPONSES_API_STORE": "0"})
    assert not store_disabled(None, {"VLLM_ENABLE_RESPONSES_API_STORE": "1"})
    assert not store_disabled(None, {})  # the default: on
    assert not store_disabled(f"sqlite:///{tmp_path}/x.db", {"VLLM_ENABLE_RESPONSES_API_STORE": "0"})
    assert store_disabled("none", {"VLLM_ENABLE_RESPONSES_API_STORE": "1"})


def _check_store_off(base_url: str) -> None:
    """vLLM's behaviour without its store: `store: true` is served and not stored, background is
    refused with vLLM's message, GET, cancel and previous_response_id are 404."""
    c = client(base_url)
    r = c.responses.create(model="dsv4", input="Hello", max_output_tokens=5)
    assert r.output_text
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.cancel(r.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model="dsv4", input="More", previous_response_id=r.id, max_output_tokens=5)
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="dsv4", input="bg", background=True, max_output_tokens=5)
    assert "VLLM_ENABLE_RESPONSES_API_STORE=1" in str(e.value)
