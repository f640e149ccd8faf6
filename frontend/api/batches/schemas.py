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
# OpenAI's expiration policy of a file (`expires_after` at upload, a batch's
# `output_expires_after`): anchored at the file's creation, an hour to 30 days after it.
EXPIRY_ANCHOR = "created_at"
MIN_EXPIRY_S, MAX_EXPIRY_S = 3600, 2592000


class CreateBatchRequest(msgspec.Struct, kw_only=True):
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, Any] | None = None
    output_expires_after: dict[str, Any] | None = None  # {anchor, seconds}: `expiry_seconds`


def window_seconds(window: str) -> int:
    """`completion_window` in seconds: OpenAI's `24h`, or any `<N>h`, `<N>m`, `<N>s`."""
    m = _WINDOW.match(window)
    if m is None:
        raise APIError(400, f"Invalid completion_window `{window}`: expected `24h` (or `<N>h`, `<N>m`, `<N>s`).",
                       "completion_window")
    return int(m.group(1)) * _UNIT_S[m.group(2)]


def expiry_seconds(anchor: Any, seconds: Any, param: str, sep: tuple[str, str] = (".", "")) -> int:
    """An expiration policy's seconds, checked as OpenAI does; errors name `param` with the
    field (`sep`: how the request writes a field of it: `.anchor`, or `[anchor]` in a form)."""
    name = {f: f"{param}{sep[0]}{f}{sep[1]}" for f in ("anchor", "seconds")}
    if anchor != EXPIRY_ANCHOR:
        raise APIError(400, f"Invalid `{name['anchor']}` {anchor!r}: the supported anchor is `{EXPIRY_ANCHOR}`.",
                       name["anchor"])
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not MIN_EXPIRY_S <= seconds <= MAX_EXPIRY_S:
        raise APIError(400, f"Invalid `{name['seconds']}` {seconds!r}: an integer number of seconds between "
                            f"{MIN_EXPIRY_S} (1 hour) and {MAX_EXPIRY_S} (30 days).", name["seconds"])
    return seconds


def form_expiry(fields: dict[str, str]) -> int | None:
    """An upload's `expires_after[anchor]` and `expires_after[seconds]` form fields: the file's
    lifetime in seconds, or None when neither is given."""
    anchor, seconds = fields.get("expires_after[anchor]"), fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return None
    value: Any = int(seconds) if seconds is not None and seconds.isascii() and seconds.isdigit() else seconds
    return expiry_seconds(anchor, value, "expires_after", ("[", "]"))


def check_create(req: CreateBatchRequest) -> tuple[int, int | None]:
    """The checks OpenAI makes on a new batch; the completion window and the output files'
    lifetime (None: kept until deleted), in seconds."""
    if req.endpoint not in ENDPOINTS:
        raise APIError(400, f"Invalid endpoint `{req.endpoint}`: expected one of {', '.join(ENDPOINTS)}.", "endpoint")
    if req.metadata is not None:
        if len(req.metadata) > MAX_METADATA:
            raise APIError(400, f"metadata may have at most {MAX_METADATA} keys.", "metadata")
        for k, v in req.metadata.items():
            if len(k) > 64 or not isinstance(v, str) or len(v) > 512:
                raise APIError(400, "metadata keys are strings of at most 64 characters and values strings of "
                               "at most 512.", "metadata")
    expires_s = None
    if req.output_expires_after is not None:
        extra = set(req.output_expires_after) - {"anchor", "seconds"}
        if extra:
            raise APIError(400, f"Unknown field `output_expires_after.{min(extra)}`: expected `anchor` and `seconds`.",
                           "output_expires_after")
        expires_s = expiry_seconds(req.output_expires_after.get("anchor"), req.output_expires_after.get("seconds"),
                                   "output_expires_after")
    return window_seconds(req.completion_window), expires_s
