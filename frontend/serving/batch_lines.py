"""OpenAI's batch input and output lines: checking an input file, and each line's answer.

Input, one JSON object per line: `{"custom_id", "method": "POST", "url", "body"}`. A line that
cannot run (not JSON, no `custom_id`, a repeated one, another endpoint, a streaming body, a body
over the size limit) is answered at once in the error file, with its `custom_id` when it has
one; the others run. Output and error lines have OpenAI's shape:

    {"id": "batch_req_...", "custom_id": ..., "response": {"status_code", "request_id", "body"},
     "error": null}                                           (a 2xx answer: the output file)
    {... "response": {"status_code": 400, ...}, "error": null} (a 4xx/5xx answer: the error file)
    {... "response": null, "error": {"code", "message"}}      (never run: the error file)
"""

from __future__ import annotations

import io
import secrets
from collections.abc import Iterable
from typing import Any

import msgspec

from vllm_pyfrontend.store.batches import NewLine

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
# Statuses after which a line is given back and run again later rather than answered: the
# deployment is full (admission control) or unavailable for now.
RETRY_STATUSES = frozenset((429, 503))

_decoder = msgspec.json.Decoder()


def line_id() -> str:
    return "batch_req_" + secrets.token_hex(16)


def error_entry(custom_id: str | None, code: str, message: str) -> bytes:
    return msgspec.json.encode({"id": line_id(), "custom_id": custom_id, "response": None,
                                "error": {"code": code, "message": message}})


def answer_entry(custom_id: str, status: int, body: Any, request_id: str | None) -> tuple[bytes, bool]:
    """The output (or error) line for an endpoint's answer (its body object, encoded once
    here); whether it goes to the error file."""
    if request_id is None and isinstance(body, dict):
        rid = body.get("id")
        request_id = rid if isinstance(rid, str) else None
    entry = {"id": line_id(), "custom_id": custom_id,
             "response": {"status_code": status, "request_id": request_id or "", "body": body}, "error": None}
    return msgspec.json.encode(entry), status >= 400


def expired_entry(custom_id: str | None) -> bytes:
    return error_entry(custom_id, "batch_expired", "This request could not be executed before the completion "
                                                   "window expired.")


class _CustomId(msgspec.Struct):
    custom_id: str | None = None


def output_too_large_entry(answer: bytes, cap: int, limit: str = "--batch-max-output-bytes") -> bytes:
    """The error line for an answer that would take the batch's output file past `cap` bytes
    (`limit`: what sets the cap)."""
    try:
        custom_id = msgspec.json.decode(answer, type=_CustomId).custom_id
    except (msgspec.DecodeError, msgspec.ValidationError):
        custom_id = None
    return error_entry(custom_id, "output_too_large", f"This request's answer would take the batch's output file "
                                                      f"past its limit of {cap} bytes ({limit}).")


class InputError(Exception):
    """The input file as a whole cannot run (OpenAI's batch `errors`)."""

    def __init__(self, code: str, message: str, line: int | None = None):
        super().__init__(message)
        self.entry = {"code": code, "message": message, "param": None, "line": line}


def parse_input(data: Iterable[bytes] | bytes, endpoint: str, *, max_lines: int, max_body_bytes: int,
                priority: int) -> list[NewLine]:
    """The lines of an input file (an open binary file, read line by line: what this holds
    grows with the requests kept, never with the file's line count), each to run (its body,
    with the batch's engine `priority`) or answered with an error entry; `InputError` when the
    file cannot run at all."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = io.BytesIO(data)
    lines: list[NewLine] = []
    seen: set[str] = set()
    for n, raw in enumerate(data):
        if not raw.strip():
            continue
        if len(lines) >= max_lines:
            raise InputError("too_many_requests", f"The input file has more than {max_lines} requests.", n + 1)
        idx = len(lines)
        try:
            obj = _decoder.decode(raw)
        except msgspec.DecodeError as e:
            lines.append(NewLine(idx, None, None, error_entry(None, "invalid_json", f"Line {n + 1} is not valid JSON: {e}")))
            continue
        custom_id = obj.get("custom_id") if isinstance(obj, dict) else None
        if not isinstance(obj, dict):
            problem = ("invalid_request", f"Line {n + 1} is not a JSON object.")
        elif not isinstance(custom_id, str) or not custom_id:
            custom_id, problem = None, ("missing_custom_id", f"Line {n + 1} has no `custom_id` string.")
        elif custom_id in seen:
            problem = ("duplicate_custom_id", f"Line {n + 1}: the custom_id `{custom_id}` is used more than once.")
        elif obj.get("method", "POST") != "POST":
            problem = ("invalid_method", f"Line {n + 1}: the method must be `POST`.")
        elif obj.get("url") != endpoint:
            problem = ("mismatched_endpoint", f"Line {n + 1}: the url `{obj.get('url')}` is not the batch's "
                                              f"endpoint `{endpoint}`.")
        elif not isinstance(obj.get("body"), dict):
            problem = ("invalid_body", f"Line {n + 1}: `body` must be a JSON object.")
        elif obj["body"].get("stream"):
            problem = ("invalid_body", f"Line {n + 1}: streaming (`stream: true`) is not supported in a batch.")
        elif obj["body"].get("background"):
            problem = ("invalid_body", f"Line {n + 1}: `background` is not supported in a batch.")
        else:
            problem = None
        if problem is not None:
            if custom_id is not None and custom_id not in seen and problem[0] != "duplicate_custom_id":
                seen.add(custom_id)
            lines.append(NewLine(idx, custom_id, None, error_entry(custom_id, *problem)))
            continue
        seen.add(custom_id)
        body = dict(obj["body"])
        body["priority"] = priority
        encoded = msgspec.json.encode(body)
        if len(encoded) > max_body_bytes:
            lines.append(NewLine(idx, custom_id, None, error_entry(
                custom_id, "request_too_large", f"Line {n + 1}: the body exceeds {max_body_bytes} bytes.")))
            continue
        lines.append(NewLine(idx, custom_id, encoded))
    if not lines:
        raise InputError("empty_file", "The input file has no requests.")
    return lines
