"""Sampling lowering gives the engine the same values vLLM's own frontend would."""

from __future__ import annotations

import json

import pytest

from vllm_pyfrontend.llm.request_ids import make_request_id, worker_of
from vllm_pyfrontend.llm.sampling import (
    ContextLengthError,
    GenerationDefaults,
    SamplingOptions,
    lower_sampling,
    resolve_max_tokens,
)

vllm_protocol = pytest.importorskip("vllm.entrypoints.openai.chat_completion.protocol")

EOS = 1


def _vllm_params(body: dict, max_tokens: int, defaults: GenerationDefaults):
    req = vllm_protocol.ChatCompletionRequest(messages=[{"role": "user", "content": "x"}], **body)
    sp = req.to_sampling_params(max_tokens, dict(defaults.sampling))
    sp.update_from_generation_config({"eos_token_id": defaults.eos_token_ids} if defaults.eos_token_ids else {}, EOS)
    return sp


def _ours(body: dict, max_tokens: int, defaults: GenerationDefaults) -> dict:
    opts = SamplingOptions(
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        top_k=body.get("top_k"),
        min_p=body.get("min_p"),
        seed=body.get("seed"),
        presence_penalty=body.get("presence_penalty"),
        frequency_penalty=body.get("frequency_penalty"),
        repetition_penalty=body.get("repetition_penalty"),
        min_tokens=body.get("min_tokens", 0),
        stop_token_ids=body.get("stop_token_ids", []),
        ignore_eos=body.get("ignore_eos", False),
    )
    return lower_sampling(opts, max_tokens=max_tokens, eos_token_id=EOS, defaults=defaults)


CASES = [
    {},
    {"temperature": 0.0},
    {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 3},
    {"presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.2},
    {"stop_token_ids": [5, 6], "min_tokens": 2},
    {"ignore_eos": True},
    {"ignore_eos": True, "stop_token_ids": [9]},
]
DEFAULTS = [
    GenerationDefaults(),
    GenerationDefaults(sampling={"temperature": 0.6, "top_p": 0.95}, eos_token_ids=[1, 7]),
]


@pytest.mark.parametrize("defaults", DEFAULTS)
@pytest.mark.parametrize("body", CASES)
def test_lowering_matches_vllm(body, defaults):
    sp = _vllm_params(body, 32, defaults)
    ours = _ours(body, 32, defaults)
    for key in ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                "repetition_penalty", "max_tokens", "min_tokens"):
        assert ours[key] == getattr(sp, key), key
    assert ours.get("seed") == sp.seed
    assert ours.get("_eos_token_id") == sp.eos_token_id
    assert sorted(ours["stop_token_ids"]) == sorted(sp.stop_token_ids)
    assert sorted(ours["_all_stop_token_ids"]) == sorted(sp.all_stop_token_ids)


def test_max_tokens_resolution():
    d = GenerationDefaults()
    assert resolve_max_tokens(None, 10, 100, d) == 90
    assert resolve_max_tokens(500, 10, 100, d) == 90  # vLLM clamps to the room left
    assert resolve_max_tokens(5, 10, 100, d) == 5
    assert resolve_max_tokens(None, 10, 100, GenerationDefaults(sampling={"max_tokens": 20})) == 20
    with pytest.raises(ContextLengthError) as e:
        resolve_max_tokens(None, 100, 100, d)
    assert "100" in e.value.message


def test_generation_config_loading(tmp_path):
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 64, "eos_token_id": [1, 2], "do_sample": True})
    )
    d = GenerationDefaults.load(str(tmp_path))
    assert d.sampling == {"temperature": 0.6, "top_p": 0.95, "max_tokens": 64}
    assert d.eos_token_ids == [1, 2]
    assert GenerationDefaults.load(str(tmp_path), "vllm").sampling == {}
    assert GenerationDefaults.load(str(tmp_path / "missing")).sampling == {}


def test_request_ids_are_unique_and_carry_the_worker():
    ids = {make_request_id("chatcmpl", 3) for _ in range(1000)}
    assert len(ids) == 1000
    assert {worker_of(i) for i in ids} == {3}
    assert worker_of("user-supplied") is None


def test_a_forked_process_makes_request_ids_of_its_own():
    """Workers are forked from one template (server/preload.py): a restarted worker with the
    same index must not repeat its predecessor's ids (a duplicate in-flight id kills vLLM's
    engine), so the random tag is drawn again in every forked process."""
    import os

    from vllm_pyfrontend.llm.request_ids import make_request_id

    read, write = os.pipe()
    ids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            try:
                os.write(write, (make_request_id("chatcmpl", 0) + "\n").encode())
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    os.close(write)
    with os.fdopen(read) as f:
        ids = f.read().split()
    assert len(ids) == 2 and ids[0] != ids[1], ids
