"""Request bodies decoded by msgspec in one compiled pass, for every API style.

A body that does not decode is a 400 naming the field (msgspec's `$.path`), an empty body or
invalid JSON a 400 saying so; the request structs themselves belong to their API style.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from vllm_pyfrontend.errors import APIError


_PATH_RE = re.compile(r"`\$\.?([^`]*)`")


def _param_from_error(text: str) -> str | None:
    """msgspec says "... - at `$.stream_options.include_usage`": report the field path."""
    m = _PATH_RE.search(text)
    if not m:
        return None
    path = m.group(1)
    return path or None


_decoders: dict[type, msgspec.json.Decoder] = {}


def decode_body(body: bytes, cls: type) -> Any:
    dec = _decoders.get(cls)
    if dec is None:
        dec = _decoders[cls] = msgspec.json.Decoder(cls)
    if not body:
        raise APIError(400, "The request body is empty; expected a JSON object.")
    try:
        return dec.decode(body)
    except msgspec.ValidationError as e:
        text = str(e)
        param = _param_from_error(text)
        if text.startswith("Object missing required field"):
            m = re.search(r"`(\w+)`", text)
            param = m.group(1) if m else param
        return _raise(text, param)
    except msgspec.DecodeError as e:
        raise APIError(400, f"Invalid JSON in request body: {e}") from None
    except RecursionError:
        raise APIError(400, "The request body is nested too deeply.") from None


def _raise(text: str, param: str | None):
    raise APIError(400, text, param)
