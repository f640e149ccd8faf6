"""Request bodies of the Batch API (msgspec), with OpenAI's limits."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.batch_lines import ENDPOINTS

# OpenAI's metadata limits: 16 pairs, keys up to 64 characters, values up to 512.
MAX_METADATA = 16
_WINDOW = re.compile(r"^([1-9][0-9]{0,5})([smh])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600}


class CreateBatchRequest(msgspec.Struct, kw_only=True):
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, Any] | None = None
    output_expires_after: dict[str, Any] | None = None  # accepted; output files are kept as inputs


def window_seconds(window: str) -> int:
    """`completion_window` in seconds: OpenAI's `24h`, or any `<N>h`, `<N>m`, `<N>s`."""
    m = _WINDOW.match(window)
    if m is None:
        raise APIError(400, f"Invalid completion_window `{window}`: expected `24h` (or `<N>h`, `<N>m`, `<N>s`).",
                       "completion_window")
    return int(m.group(1)) * _UNIT_S[m.group(2)]


def check_create(req: CreateBatchRequest) -> int:
    """The checks OpenAI makes on a new batch; the completion window in seconds."""
    if req.endpoint not in ENDPOINTS:
        raise APIError(400, f"Invalid endpoint `{req.endpoint}`: expected one of {', '.join(ENDPOINTS)}.", "endpoint")
    if req.metadata is not None:
        if len(req.metadata) > MAX_METADATA:
            raise APIError(400, f"metadata may have at most {MAX_METADATA} keys.", "metadata")
        for k, v in req.metadata.items():
            if len(k) > 64 or not isinstance(v, str) or len(v) > 512:
                raise APIError(400, "metadata keys are strings of at most 64 characters and values strings of "
                               "at most 512.", "metadata")
    return window_seconds(req.completion_window)
