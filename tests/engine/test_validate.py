"""validate_engine_request cross-checked against the real engine's own decode path.

The oracle is what the engine does with our bytes: vLLM's MsgpackDecoder for
EngineCoreRequest (msgspec types + SamplingParams.__post_init__/_verify_args),
Request.from_engine_core_request (e.g. asserts max_tokens is set), and the range
checks vLLM's frontend runs in SamplingParams.verify() (the engine indexes logits
with those ids and does not check them itself).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from vllm.v1.engine import EngineCoreRequest
from vllm.v1.request import Request
from vllm.v1.serial_utils import MsgpackDecoder

from vllm_pyfrontend.engine import wire
from vllm_pyfrontend.engine.types import EngineRequest, InvalidEngineRequest
from vllm_pyfrontend.engine.validate import validate_engine_request

VOCAB = 1000
MAX_LEN = 128
MAX_LOGPROBS = 20
_DECODER = MsgpackDecoder(EngineCoreRequest)
_MODEL_CONFIG = SimpleNamespace(
    max_logprobs=MAX_LOGPROBS, max_model_len=MAX_LEN, is_diffusion=False,
    get_vocab_size=lambda: VOCAB,
)
_BACKENDS = {"xgrammar", "guidance", "outlines", "lm-format-enforcer"}


def _req(sp: dict, prompt: list | None = None) -> EngineRequest:
    return EngineRequest(
        request_id="r-1", prompt_token_ids=[1, 2, 3] if prompt is None else prompt,
        sampling_params=sp, arrival_time=1.0)


def engine_accepts(sp: dict) -> bool:
    """Would the engine (plus vLLM's frontend range checks) take this sampling map?"""
    try:
        payload = wire.encode_add(_req(sp))
    except Exception:
        return False
    try:
        decoded = _DECODER.decode([payload])
        params = decoded.sampling_params
        Request.from_engine_core_request(decoded, None)
        params._validate_logprobs(_MODEL_CONFIG)
        params._validate_logit_bias(_MODEL_CONFIG)
        params._validate_stop_token_ids(_MODEL_CONFIG)
        params._validate_allowed_token_ids(_MODEL_CONFIG)
        so = params.structured_outputs
        if so is not None and not so.all_constraints_none() and so._backend not in _BACKENDS:
            return False  # grammar_init raises "Unsupported structured output backend"
        for seq in params._bad_words_token_ids or []:
            if not seq or min(seq) < 0 or max(seq) >= VOCAB:
                return False
        return True
    except (Exception, AssertionError):
        return False


def we_accept(sp: dict) -> bool:
    try:
        validate_engine_request(_req(sp), max_model_len=MAX_LEN, vocab_size=VOCAB, num_clients=1,
                                max_logprobs=MAX_LOGPROBS)
        return True
    except InvalidEngineRequest:
        return False


def _so(**kw) -> dict:
    base = {"json": None, "regex": None, "choice": None, "grammar": None, "json_object": None,
            "disable_any_whitespace": False, "disable_additional_properties": False,
            "whitespace_pattern": None, "structural_tag": None, "_backend": "xgrammar",
            "_backend_was_auto": False}
    base.update(kw)
    return base


def _deep(n: int) -> dict:
    d: dict = {}
    for _ in range(n):
        d = {"a": d}
    return d


# Each case is merged into {"max_tokens": 16}.
CASES: list[dict] = [
    {},
    {"temperature": 0}, {"temperature": 0.0}, {"temperature": 2}, {"temperature": 2.0001},
    {"temperature": -0.1}, {"temperature": 0.005}, {"temperature": math.nan},
    {"temperature": math.inf}, {"temperature": True}, {"temperature": "1"}, {"temperature": None},
    {"top_p": 1}, {"top_p": 0.5}, {"top_p": 0}, {"top_p": 1.01}, {"top_p": math.nan},
    {"top_k": 0}, {"top_k": -1}, {"top_k": -2}, {"top_k": 50}, {"top_k": 5.0}, {"top_k": True},
    {"min_p": 0}, {"min_p": 1}, {"min_p": 1.5}, {"min_p": -0.1}, {"min_p": math.nan},
    {"presence_penalty": 2}, {"presence_penalty": -2.0}, {"presence_penalty": 2.5},
    {"frequency_penalty": -2.1}, {"frequency_penalty": math.inf}, {"frequency_penalty": 1},
    {"repetition_penalty": 1}, {"repetition_penalty": 0}, {"repetition_penalty": 5.5},
    {"repetition_penalty": math.inf}, {"repetition_penalty": -1.0},
    {"max_tokens": 1}, {"max_tokens": 0}, {"max_tokens": -3}, {"max_tokens": None},
    {"max_tokens": 5.0}, {"max_tokens": True}, {"max_tokens": "5"}, {"max_tokens": 125},
    {"min_tokens": 0}, {"min_tokens": 16}, {"min_tokens": 17}, {"min_tokens": -1},
    {"min_tokens": 1.0},
    {"seed": None}, {"seed": 0}, {"seed": -1}, {"seed": 2**63 - 1}, {"seed": 1.5},
    {"seed": True},
    {"logprobs": None}, {"logprobs": 0}, {"logprobs": 20}, {"logprobs": 21}, {"logprobs": -1},
    {"logprobs": -2}, {"logprobs": True}, {"logprobs": 2.0},
    {"prompt_logprobs": 0}, {"prompt_logprobs": 5}, {"prompt_logprobs": 50},
    {"prompt_logprobs": -3},
    {"stop_token_ids": []}, {"stop_token_ids": [1, 2]}, {"stop_token_ids": [VOCAB]},
    {"stop_token_ids": [-1]}, {"stop_token_ids": [1.0]}, {"stop_token_ids": [True]},
    {"stop_token_ids": None},
    {"_eos_token_id": 2}, {"_eos_token_id": None}, {"_eos_token_id": "2"},
    {"_all_stop_token_ids": [2, 5]}, {"_all_stop_token_ids": ["a"]},
    {"logit_bias": {5: 1.0}}, {"logit_bias": {5: 100}}, {"logit_bias": {VOCAB: 1.0}},
    {"logit_bias": {-1: 1.0}}, {"logit_bias": {5: "x"}}, {"logit_bias": {}},
    {"allowed_token_ids": [1, 2]}, {"allowed_token_ids": []}, {"allowed_token_ids": [VOCAB]},
    {"allowed_token_ids": [1.5]},
    {"_bad_words_token_ids": [[1, 2], [3]]}, {"_bad_words_token_ids": [[VOCAB]]},
    {"ignore_eos": True}, {"ignore_eos": 1}, {"detokenize": False},
    {"skip_special_tokens": False}, {"skip_special_tokens": "no"},
    {"include_stop_str_in_output": True}, {"spaces_between_special_tokens": 0},
    {"stop": ["x"]}, {"stop": "x"}, {"stop": [""]}, {"stop": ["x"], "detokenize": False},
    {"bad_words": ["bad"]}, {"bad_words": [""]},
    {"extra_args": {"a": 1}}, {"extra_args": {"a": [1, {"b": None}]}},
    {"thinking_token_budget": 10}, {"thinking_token_budget": -1}, {"thinking_token_budget": 0},
    {"thinking_token_budget": -2}, {"thinking_token_budget": 1.0},
    {"thinking_token_budget": True},
    {"skip_reading_prefix_cache": True}, {"skip_reading_prefix_cache": None},
    {"repetition_detection": {"max_pattern_size": 4, "min_pattern_size": 1, "min_count": 3}},
    {"repetition_detection": {"max_pattern_size": 4, "min_count": 1}},
    {"repetition_detection": {"max_pattern_size": 2, "min_pattern_size": 3, "min_count": 3}},
    {"logprob_token_ids": [1, 2]}, {"logprob_token_ids": [1, 2], "logprobs": 2},
    {"logprob_token_ids": [1, 2], "logprobs": 3}, {"logprob_token_ids": [VOCAB]},
    {"n": 1}, {"n": 0}, {"n": 1.0},
    {"structured_outputs": _so(regex="a+")},
    {"structured_outputs": _so(json={"type": "object"})},
    {"structured_outputs": _so(json='{"type": "object"}', _backend="guidance")},
    {"structured_outputs": _so(choice=["a", "b"])},
    {"structured_outputs": _so(json_object=True)},
    {"structured_outputs": _so(grammar="root ::= 'a'", _backend="outlines")},
    {"structured_outputs": _so(structural_tag='{"type": "x"}')},
    {"structured_outputs": _so()},
    {"structured_outputs": _so(regex="a", choice=["a"])},
    {"structured_outputs": _so(regex="a", _backend=None)},
    {"structured_outputs": _so(regex="a", _backend="nope")},
    {"structured_outputs": _so(regex=5)},
    {"structured_outputs": {"regex": "a+", "_backend": "xgrammar"}},
    {"structured_outputs": None},
]

# Cases the engine takes but we refuse on purpose (see validate.py for why).
STRICTER = [
    {"n": 2},  # the engine ignores n: fan-out is the frontend's job
    {"seed": 2**64 - 1},  # beyond int64: torch's generator raises inside the engine
    {"logit_bias": {5: 150.0}},  # OpenAI range [-100, 100]; vLLM clamps in its frontend
    {"bogus": 1},  # unknown keys: vLLM drops them silently
    {"output_kind": 1},
    {"structured_outputs": _so(json=_deep(70))},  # vLLM's frontend caps nesting at 64
]


def _label(case: dict) -> str:
    return repr(case)[:80]


@pytest.mark.parametrize("case", CASES, ids=_label)
def test_matches_engine(case):
    sp = {"max_tokens": 16, **case}
    expected = engine_accepts(sp)
    assert we_accept(sp) == expected, f"engine {'accepts' if expected else 'rejects'} {sp}"


@pytest.mark.parametrize("case", STRICTER, ids=_label)
def test_stricter_than_engine_on_purpose(case):
    sp = {"max_tokens": 16, **case}
    assert engine_accepts(sp)
    assert not we_accept(sp)


def test_json_schema_nesting_limit():
    ok = {"max_tokens": 16, "structured_outputs": _so(json=_deep(60))}
    deep = {"max_tokens": 16, "structured_outputs": _so(json=_deep(70))}
    assert we_accept(ok)
    assert not we_accept(deep)


def test_max_tokens_must_be_sent():
    assert engine_accepts({})  # the engine would silently use 16
    with pytest.raises(InvalidEngineRequest) as e:
        validate_engine_request(_req({}), max_model_len=MAX_LEN, vocab_size=VOCAB, num_clients=1)
    assert e.value.param == "max_tokens"


def _check(req: EngineRequest, **kw) -> InvalidEngineRequest | None:
    args = dict(max_model_len=MAX_LEN, vocab_size=VOCAB, num_clients=2)
    args.update(kw)
    try:
        validate_engine_request(req, **args)
    except InvalidEngineRequest as e:
        return e
    return None


def test_prompt_and_request_fields():
    sp = {"max_tokens": 16}
    assert _check(_req(sp)) is None
    assert _check(_req(sp, prompt=[])).param == "messages"
    assert _check(_req(sp, prompt=[1, VOCAB])).param == "messages"
    assert _check(_req(sp, prompt=[1, -1])).param == "messages"
    assert _check(_req(sp, prompt=[1, True])).param == "messages"
    assert _check(_req(sp, prompt=[1, 2.0])).param == "messages"
    assert _check(_req(sp, prompt=[1, VOCAB]), vocab_size=None) is None
    # Context length: prompt alone, then prompt + max_tokens.
    assert _check(_req(sp, prompt=[1] * MAX_LEN)).param == "messages"
    err = _check(_req({"max_tokens": MAX_LEN - 3}))
    assert err is None
    err = _check(_req({"max_tokens": MAX_LEN - 2}))
    assert err.param == "max_tokens" and "maximum context length" in err.message
    # Top-level fields.
    r = _req(sp)
    r.client_index = 2
    assert _check(r).param == "client_index"
    r = _req(sp)
    r.priority = True
    assert _check(r).param == "priority"
    r = _req(sp)
    r.arrival_time = math.nan
    assert _check(r).param == "arrival_time"
    r = _req(sp)
    r.request_id = ""
    assert _check(r).param == "request_id"
    r = _req(sp)
    r.trace_headers = {"a": 1}
    assert _check(r).param == "trace_headers"
    r = _req(sp)
    r.cache_salt = 5
    assert _check(r).param == "cache_salt"


def test_param_names_are_openai_level():
    assert _check(_req({"max_tokens": 16, "temperature": 3})).param == "temperature"
    assert _check(_req({"max_tokens": 0})).param == "max_tokens"
    assert _check(_req({"max_tokens": 16, "logprobs": 30})).param == "top_logprobs"
    assert _check(_req({"max_tokens": 16, "stop_token_ids": [VOCAB]})).param == "stop_token_ids"
    assert _check(_req({"max_tokens": 16, "structured_outputs": _so()})).param == "response_format"
    assert _check(_req({"max_tokens": 16, "bogus": 1})).param == "bogus"


def test_large_prompt_is_fast():
    import time

    req = _req({"max_tokens": 16}, prompt=list(range(VOCAB)) * 10)
    t = time.perf_counter()
    for _ in range(10):
        validate_engine_request(req, max_model_len=100_000, vocab_size=VOCAB, num_clients=1)
    assert (time.perf_counter() - t) / 10 < 0.005
