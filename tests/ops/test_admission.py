"""Admission control (`--max-num-queued-reqs` / `--max-num-queued-tokens`, vLLM's meaning):
past a bound new requests get a fast 503 with Retry-After and OpenAI's error shape, counted in
vllm:admission_rejections; /ready turns 503 "overloaded" and /load shows the queue; admitted
requests finish untouched. The counts are deployment-wide (one slot per worker, summed)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

from tests.reliability.helpers import (
    chat_body, open_stream, read_until, request, sim_args, sse_events, wait_all_serving, wait_for,
)
from tests.inprocess import InProcessStack
from tests.stack import Stack
from vllm_pyfrontend.serving.admission import Admission, OverloadedError


class _Gen:
    def __init__(self, rid: str, prompt: int):
        self.request_id, self.num_prompt_tokens, self.admission = rid, prompt, None


def test_counts_are_summed_over_workers(tmp_path):
    w0 = Admission(str(tmp_path), 0, 2, max_reqs=3, max_tokens=None)
    w1 = Admission(str(tmp_path), 1, 2, max_reqs=3, max_tokens=None)
    a, b = _Gen("a", 10), _Gen("b", 5)
    w0.track(a)
    w1.track(b)
    assert w0.totals() == w1.totals() == (2, 15)
    w0.admit(1)  # 2 + 1 <= 3
    with pytest.raises(OverloadedError) as e:
        w1.admit(2)  # n = 2 takes two slots
    assert e.value.reason == "max_num_queued_reqs"
    w0.on_output(a)  # first output: out of prefill, still unfinished
    assert w1.totals() == (2, 5)
    w0.on_end(a)
    assert a.admission is None and w1.totals() == (1, 5)
    # A restarted worker starts from an empty slot.
    Admission(str(tmp_path), 1, 2, max_reqs=3, max_tokens=None)
    assert w0.totals() == (0, 0)


def test_token_bound(tmp_path):
    rejected: list[str] = []
    adm = Admission(str(tmp_path), 0, 1, max_reqs=None, max_tokens=8, on_reject=rejected.append)
    adm.admit(1)
    adm.track(_Gen("a", 8))
    assert adm.overloaded() == "max_num_queued_tokens"
    with pytest.raises(OverloadedError):
        adm.check()
    assert rejected == ["max_num_queued_tokens"]
    resp = OverloadedError("max_num_queued_tokens").to_response()
    assert resp.status == 503 and resp.headers["Retry-After"] == "1"


def _get(stack: Stack, path: str):
    try:
        with urllib.request.urlopen(stack.base_url + path, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def _post_chat(stack: Stack, body: bytes):
    req = urllib.request.Request(stack.base_url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def _assert_overloaded(status, headers, body, reason: str) -> None:
    assert status == 503, (status, body)
    assert headers["Retry-After"] == "1"
    err = json.loads(body)["error"]
    assert err["code"] == 503 and err["type"] == "ServiceUnavailableError"
    assert ("busy" if reason == "max_num_queued_reqs" else "backlog") in err["message"]


def _rejections(stack: Stack, reason: str) -> float:
    text = request(stack, "/metrics").body.decode()
    m = re.search(r'^vllm:admission_rejections_total\{[^}]*reason="%s"[^}]*\} (\S+)$' % reason, text, re.M)
    return float(m.group(1)) if m else 0.0


LONG = dict(stream=True, max_tokens=60, ignore_eos=True)


def test_request_bound_end_to_end():
    with Stack(sim_args("--max-num-seqs", "1", "--max-num-queued-reqs", "2", step=0.02)) as stack:
        wait_all_serving(stack)
        assert _get(stack, "/ready")[0] == 200
        # Two long streams fill the bound: one running in the engine, one waiting there.
        streams = [open_stream(stack, chat_body(**LONG)) for _ in range(2)]
        firsts = [read_until(s, b"data: ") for s in streams]
        # Whichever worker answers, the count is the deployment's.
        for _ in range(4):
            _assert_overloaded(*_post_chat(stack, chat_body()), "max_num_queued_reqs")
            status, _, body = _get(stack, "/ready")
            assert status == 503 and json.loads(body)["reason"] == "overloaded"
            queue = json.loads(_get(stack, "/load")[2])["queue"]
            assert queue["num_unfinished_reqs"] == 2 and queue["max_num_queued_reqs"] == 2
        wait_for(lambda: _rejections(stack, "max_num_queued_reqs") >= 4, 10, "the rejection counter", stack)
        # The admitted requests were not affected: both finish with all their tokens.
        for s, first in zip(streams, firsts):
            raw = first + read_until(s, b"data: [DONE]")
            events = sse_events(raw)
            s.close()
            assert events[-1] == "[DONE]"
            usage = [json.loads(e)["usage"] for e in events[:-1] if json.loads(e).get("usage")]
            assert not usage or usage[-1]["completion_tokens"] == 60
            text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                           for e in events[:-1] if json.loads(e).get("choices"))
            assert text
        # Drained: ready again, and served.
        wait_for(lambda: _get(stack, "/ready")[0] == 200, 10, "/ready back to 200", stack)
        status, _, body = _post_chat(stack, chat_body(n=2))
        assert status == 200, body
        # n counts n slots: 3 choices never fit a bound of 2.
        _assert_overloaded(*_post_chat(stack, chat_body(n=3)), "max_num_queued_reqs")
        # Clients that leave mid-stream give their slots back.
        gone = [open_stream(stack, chat_body(**LONG)) for _ in range(2)]
        for s in gone:
            read_until(s, b"data: ")
            s.close()
        wait_for(lambda: all(json.loads(_get(stack, "/load")[2])["queue"]["num_unfinished_reqs"] == 0
                             for _ in range(4)), 10, "the slots given back", stack)
        assert _get(stack, "/ready")[0] == 200


def test_token_bound_end_to_end():
    with Stack(sim_args("--max-num-seqs", "1", "--max-num-queued-tokens", "1", step=0.02)) as stack:
        wait_all_serving(stack)
        running = open_stream(stack, chat_body(**LONG))
        first = read_until(running, b'"delta":{"content"')  # past its prefill: its prompt no longer counts
        waiting = open_stream(stack, chat_body(**LONG))  # admitted, queued in the engine
        wait_for(lambda: json.loads(_get(stack, "/load")[2])["queue"]["num_prefill_tokens"] > 0, 10,
                 "the second request queued in prefill", stack)
        _assert_overloaded(*_post_chat(stack, chat_body()), "max_num_queued_tokens")
        status, _, body = _get(stack, "/ready")
        assert status == 503 and json.loads(body)["reason"] == "overloaded"
        for s, raw in ((running, first), (waiting, b"")):
            raw += read_until(s, b"data: [DONE]")
            s.close()
            assert b"data: [DONE]" in raw, raw[-2000:]
        assert _rejections(stack, "max_num_queued_tokens") >= 1
        wait_for(lambda: _get(stack, "/ready")[0] == 200, 10, "/ready back to 200", stack)


def test_no_bound_no_queue_report():
    with InProcessStack(sim_args(workers=1)) as stack:
        load = json.loads(_get(stack, "/load")[2])
        assert "queue" not in load
