"""The derender routes hold what they are given to vLLM's bounds before decoding any of it (vLLM
0.32 `scale_out/derender/serving.py`, `_validate_derender_bounds` and
`_validate_prompt_token_ids`): at most VLLM_MAX_N_SEQUENCES generate responses and choices per
response, at most max_model_len token ids, logprob positions and prompt logprobs, at most
--max-logprobs top logprobs per position, at most max_model_len prompt token ids. Each is a 400
with vLLM's message and no param; the bounds come before the per-choice checks (an empty
choice), and a chat derender passes the generate response's prompt logprobs through.

In process: one worker, `--enable-scale-out`, a 64-token context, `--max-logprobs 3` and
VLLM_MAX_N_SEQUENCES=4 so that every bound is a small payload."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.inprocess import InProcessStack

MODEL = "dsv4"
LEN = 64
CHAT = "/v1/chat/completions/derender"
COMP = "/v1/completions/derender"


@pytest.fixture(scope="module")
def client():
    s = InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002",
                        "--max-model-len", str(LEN), "--max-logprobs", "3", "--enable-scale-out",
                        "--served-model-name", MODEL, "--shutdown-timeout", "5", "demo:deepseek-v4"],
                       env={"VLLM_MAX_N_SEQUENCES": "4"})
    with httpx.Client(base_url=s.base_url, timeout=30) as c:
        yield c
    s.terminate()


def _choice(index: int = 0, n: int = 2, **extra) -> dict:
    return {"index": index, "token_ids": [100 + i for i in range(n)], "finish_reason": "stop", **extra}


def _gen(*choices: dict, request_id: str | None = "r1", **extra) -> dict:
    out = {"choices": list(choices) or [_choice()], **extra}
    if request_id is not None:
        out["request_id"] = request_id
    return out


def _entry(top: int = 0) -> dict:
    return {"token_id": 100, "logprob": -1.0, "top_logprobs": [{"token_id": 100, "logprob": -1.0}] * top}


def _refused(client, path: str, body: dict, message: str) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["message"], err["param"], err["type"]) == (message, None, "BadRequestError")


CHAT_CASES = [
    ("choices", {"generate_response": _gen(*[_choice(i) for i in range(5)])},
     "choices count (5) in response 'r1' exceeds server maximum (4)."),
    ("token_ids", {"generate_response": _gen(_choice(3, LEN + 1))},
     f"token_ids length ({LEN + 1}) in choice 3 exceeds max_model_len ({LEN})."),
    ("logprob_positions", {"generate_response": _gen(_choice(logprobs={"content": [_entry()] * (LEN + 1)}))},
     f"logprobs.content length ({LEN + 1}) in choice 0 exceeds max_model_len ({LEN})."),
    ("top_logprobs", {"generate_response": _gen(_choice(1, 1, logprobs={"content": [_entry(4)]}))},
     "top_logprobs count (4) in choice 1 exceeds max_logprobs (3)."),
    ("prompt_logprobs", {"generate_response": _gen(prompt_logprobs=[None] * (LEN + 1))},
     f"prompt_logprobs length ({LEN + 1}) in response 'r1' exceeds max_model_len ({LEN})."),
    ("prompt_token_ids", {"generate_response": _gen(), "prompt_token_ids": [100] * (LEN + 1)},
     f"prompt_token_ids length ({LEN + 1}) exceeds max_model_len ({LEN})."),
    # the bounds come first: an empty choice before a long one is not what is reported
    ("before_empty_choice", {"generate_response": _gen({"index": 0, "token_ids": []}, _choice(1, LEN + 1))},
     f"token_ids length ({LEN + 1}) in choice 1 exceeds max_model_len ({LEN})."),
    ("stream_total", {"stream": True, "generate_chunk": {"request_id": "s", "choices": [_choice(0, 10)]},
                      "prompt_token_ids": [100] * (LEN - 5)},
     f"prompt_token_ids length ({LEN - 5}) plus output_token_ids length (0) plus delta (10) exceeds "
     f"max_model_len ({LEN})."),
]

COMPLETION_CASES = [
    ("responses", {"generate_responses": [_gen()] * 5},
     "generate_responses count (5) exceeds server maximum (4). Set VLLM_MAX_N_SEQUENCES to increase this limit."),
    ("choices", {"generate_responses": [_gen(), _gen(*[_choice(i) for i in range(5)], request_id="r2")]},
     "choices count (5) in response 'r2' exceeds server maximum (4)."),
    ("token_ids", {"generate_responses": [_gen(), _gen(_choice(1, LEN + 1), request_id="r2")]},
     f"token_ids length ({LEN + 1}) in choice 1 exceeds max_model_len ({LEN})."),
    ("prompt_logprobs", {"generate_responses": [_gen(prompt_logprobs=[None] * (LEN + 1))]},
     f"prompt_logprobs length ({LEN + 1}) in response 'r1' exceeds max_model_len ({LEN})."),
    ("prompt_token_ids", {"generate_responses": [_gen(), _gen()], "prompt_token_ids": [None, [100] * (LEN + 1)]},
     f"prompt_token_ids length ({LEN + 1}) exceeds max_model_len ({LEN})."),
    ("empty", {"generate_responses": []}, "generate_responses must not be empty"),
    ("stream_prompt_token_ids", {"stream": True, "generate_chunk": {"request_id": "s", "choices": [_choice()]},
                                 "prompt_token_ids": [100] * (LEN + 1)},
     f"prompt_token_ids length ({LEN + 1}) exceeds max_model_len ({LEN})."),
]


@pytest.mark.parametrize("body,message", [c[1:] for c in CHAT_CASES], ids=[c[0] for c in CHAT_CASES])
def test_chat_derender_bounds(client, body, message):
    _refused(client, CHAT, body, message)


@pytest.mark.parametrize("body,message", [c[1:] for c in COMPLETION_CASES], ids=[c[0] for c in COMPLETION_CASES])
def test_completion_derender_bounds(client, body, message):
    _refused(client, COMP, body, message)


def test_at_the_bounds_derenders(client):
    """Exactly at every bound: answered."""
    full = _choice(0, LEN, logprobs={"content": [_entry(3)] * LEN})
    r = client.post(CHAT, json={"generate_response": _gen(full, *[_choice(i) for i in range(1, 4)],
                                                          prompt_logprobs=[None] * LEN),
                                "prompt_token_ids": [100] * LEN})
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"]) == 4
    r = client.post(COMP, json={"generate_responses": [_gen(full)] * 4, "prompt_token_ids": [[100] * LEN] * 4})
    assert r.status_code == 200, r.text


def test_unnamed_response_is_named_in_the_message(client):
    """A generate response without a request_id has a random one (vLLM's default), which the
    message and the answer's id name."""
    r = client.post(CHAT, json={"generate_response": _gen(*[_choice(i) for i in range(5)], request_id=None)})
    assert r.status_code == 400
    assert re.fullmatch(r"choices count \(5\) in response '[0-9a-f]{16}' exceeds server maximum \(4\)\.",
                        r.json()["error"]["message"])
    r = client.post(CHAT, json={"generate_response": _gen(request_id=None)})
    assert r.status_code == 200 and re.fullmatch("[0-9a-f]{16}", r.json()["id"])


def test_chat_derender_passes_prompt_logprobs_through(client):
    r = client.post(CHAT, json={"generate_response": _gen(prompt_logprobs=[
        None, {"100": {"logprob": -0.5, "rank": 1, "decoded_token": "x"}, "7": {"logprob": -2.0}}])})
    assert r.status_code == 200, r.text
    assert r.json()["prompt_logprobs"] == [
        None, {"100": {"logprob": -0.5, "rank": 1, "decoded_token": "x"},
               "7": {"logprob": -2.0, "rank": None, "decoded_token": None}}]
