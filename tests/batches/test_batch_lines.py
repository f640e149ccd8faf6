"""Checking a batch input file and shaping its output lines (OpenAI's format), without a server."""

from __future__ import annotations

import json

import msgspec
import pytest

from vllm_pyfrontend.serving.batch_lines import InputError, answer_entry, expired_entry, parse_input

URL = "/v1/chat/completions"


def _parse(lines: list, **kw):
    data = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines).encode()
    return parse_input(data, URL, **{"max_lines": 100, "max_body_bytes": 1000, "priority": 7, **kw})


def test_runnable_lines_carry_the_batch_priority():
    lines = _parse([{"custom_id": "a", "method": "POST", "url": URL, "body": {"model": "m", "priority": -5}},
                    "", "  ", {"custom_id": "b", "url": URL, "body": {"model": "m"}}])
    assert [(x.idx, x.custom_id, x.error) for x in lines] == [(0, "a", None), (1, "b", None)]
    assert msgspec.json.decode(lines[0].body) == {"model": "m", "priority": 7}  # the batch's, not the line's


@pytest.mark.parametrize("raw,custom_id,code", [
    ("{not json", None, "invalid_json"),
    ('["a list"]', None, "invalid_request"),
    ({"url": URL, "body": {}}, None, "missing_custom_id"),
    ({"custom_id": "x", "method": "GET", "url": URL, "body": {}}, "x", "invalid_method"),
    ({"custom_id": "x", "url": "/v1/embeddings", "body": {}}, "x", "mismatched_endpoint"),
    ({"custom_id": "x", "url": URL, "body": "text"}, "x", "invalid_body"),
    ({"custom_id": "x", "url": URL, "body": {"stream": True}}, "x", "invalid_body"),
    ({"custom_id": "x", "url": URL, "body": {"background": True}}, "x", "invalid_body"),
    ({"custom_id": "x", "url": URL, "body": {"messages": "y" * 2000}}, "x", "request_too_large"),
])
def test_a_line_that_cannot_run_is_answered_in_the_error_file(raw, custom_id, code):
    (only,) = _parse([raw])
    assert only.body is None and only.custom_id == custom_id
    entry = json.loads(only.error)
    assert entry["custom_id"] == custom_id and entry["response"] is None and entry["error"]["code"] == code
    assert entry["id"].startswith("batch_req_") and entry["error"]["message"]


def test_repeated_custom_id_and_file_errors():
    ok = {"custom_id": "a", "url": URL, "body": {}}
    lines = _parse([ok, ok])
    assert lines[0].error is None and json.loads(lines[1].error)["error"]["code"] == "duplicate_custom_id"
    with pytest.raises(InputError) as e:
        _parse(["", " "])
    assert e.value.entry["code"] == "empty_file"
    with pytest.raises(InputError) as e:
        _parse([{**ok, "custom_id": str(i)} for i in range(3)], max_lines=2)
    assert e.value.entry["code"] == "too_many_requests" and e.value.entry["line"] == 3


def test_answer_entries():
    line, failed = answer_entry("a", 200, {"id": "chatcmpl-1", "object": "chat.completion"}, None)
    entry = json.loads(line)
    assert not failed and entry["error"] is None and entry["custom_id"] == "a"
    assert entry["response"] == {"status_code": 200, "request_id": "chatcmpl-1",
                                 "body": {"id": "chatcmpl-1", "object": "chat.completion"}}
    line, failed = answer_entry("b", 400, {"error": {"message": "bad", "code": 400}}, None)
    assert failed and json.loads(line)["response"]["body"]["error"]["message"] == "bad"
    assert json.loads(expired_entry("c"))["error"]["code"] == "batch_expired"
