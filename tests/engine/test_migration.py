"""Which requests continue on another engine, and as what (frontend/engine/migration.py)."""

from __future__ import annotations

from vllm_pyfrontend.engine.migration import continuation, moved_id
from vllm_pyfrontend.engine.types import EngineRequest


class Sink:
    def __init__(self, output_ids, prompt_logprobs=None):
        self.output_ids = output_ids
        self.prompt_logprobs = prompt_logprobs


def _req(**sampling) -> EngineRequest:
    params = {"temperature": 0.0, "max_tokens": 10, "min_tokens": 4, "seed": None, "logprobs": 2,
              "_all_stop_token_ids": [1], **sampling}
    return EngineRequest("chatcmpl-w0-abc", [5, 6, 7], params, 123.0, client_index=1, external_req_id="x",
                         priority=2, cache_salt="s", lora_request=["a", 1, "/p"], trace_headers={"t": "1"})


def test_a_greedy_request_continues_from_its_tokens():
    req = _req()
    cont = continuation(req, Sink([8, 9, 10]), "chatcmpl-w0-abc-m1")
    assert cont.request_id == "chatcmpl-w0-abc-m1"
    assert cont.prompt_token_ids == [5, 6, 7, 8, 9, 10]
    assert cont.sampling_params["max_tokens"] == 7 and cont.sampling_params["min_tokens"] == 1
    assert {k: v for k, v in cont.sampling_params.items() if k not in ("max_tokens", "min_tokens")} == \
        {k: v for k, v in req.sampling_params.items() if k not in ("max_tokens", "min_tokens")}
    for field in ("arrival_time", "client_index", "external_req_id", "priority", "cache_salt", "lora_request",
                  "trace_headers", "data_parallel_rank"):
        assert getattr(cont, field) == getattr(req, field), field
    assert req.prompt_token_ids == [5, 6, 7] and req.sampling_params["max_tokens"] == 10  # untouched


def test_min_tokens_past_are_zero():
    assert continuation(_req(min_tokens=2), Sink([8, 9, 10]), "n").sampling_params["min_tokens"] == 0


def test_nothing_generated_yet_is_sent_again_whole():
    req = _req(seed=7, temperature=1.0, presence_penalty=0.5)
    cont = continuation(req, Sink([]), "n")
    assert cont.prompt_token_ids == req.prompt_token_ids and cont.sampling_params == req.sampling_params


def test_requests_that_cannot_continue_exactly():
    # A seeded sampler would start its random stream again; penalties count output tokens;
    # a grammar would start again; media sent by hash may not be in the new engine's cache.
    assert continuation(_req(seed=7, temperature=0.8), Sink([8]), "n") is None
    assert continuation(_req(presence_penalty=0.5), Sink([8]), "n") is None
    assert continuation(_req(frequency_penalty=0.5), Sink([8]), "n") is None
    assert continuation(_req(structured_outputs={"json": {}}), Sink([8]), "n") is None
    mm = _req()
    mm.mm_features = [{"identifier": "h"}]
    assert continuation(mm, Sink([8]), "n") is None
    # A sink that keeps no tokens (not a Generation) is not moved.
    assert continuation(_req(), Sink(None), "n") is None


def test_seeded_greedy_and_unseeded_sampling_continue():
    assert continuation(_req(seed=7, temperature=0.0), Sink([8]), "n") is not None
    assert continuation(_req(temperature=0.8), Sink([8]), "n") is not None


def test_prompt_logprobs_are_not_asked_again():
    cont = continuation(_req(prompt_logprobs=1), Sink([8], prompt_logprobs=object()), "n")
    assert cont.sampling_params["prompt_logprobs"] is None
    # Part of the prompt's rows delivered and no token yet: they would come again.
    assert continuation(_req(prompt_logprobs=1), Sink([], prompt_logprobs=object()), "n") is None


def test_moved_ids_keep_the_original():
    assert moved_id("chatcmpl-w3-abc", 1) == "chatcmpl-w3-abc-m1"
    assert moved_id("chatcmpl-w3-abc-m1", 2) == "chatcmpl-w3-abc-m2"
