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


_decoders: dict[tuple[type, bool], msgspec.json.Decoder] = {}

# msgspec's range errors ("Expected `int` >= -9223372036854775808 - at `$.seed`") in pydantic's
# words and error types, which vLLM's answers carry (`greater_than_equal`, ...).
_RANGE_RE = re.compile(r"^Expected `(\w+)[^`]*` (>=|<=|>|<) (\S+)")
_RANGE_WORDS = {
    ">=": ("greater than or equal to", "greater_than_equal"),
    "<=": ("less than or equal to", "less_than_equal"),
    ">": ("greater than", "greater_than"),
    "<": ("less than", "less_than"),
}


def decode_body(body: bytes, cls: type, *, lax: bool = False) -> Any:
    """The body as `cls`. `lax`: pydantic's lax coercions, as vLLM's OpenAI request models
    accept them ("5" for 5, "true" for true, 2.0 for 2); otherwise types are exact."""
    dec = _decoders.get((cls, lax))
    if dec is None:
        dec = _decoders[(cls, lax)] = msgspec.json.Decoder(cls, strict=not lax)
    if not body:
        raise APIError(400, "The request body is empty; expected a JSON object.")
    try:
        return dec.decode(body)
    except msgspec.ValidationError as e:
        before = getattr(cls, "check_before_fields", None)
        if before is not None:  # a check vLLM makes before any field's (a "before" model validator)
            before(body)
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
    m = _RANGE_RE.match(text)
    if m:
        words, kind = _RANGE_WORDS[m.group(2)]
        text = f"Input should be {words} {m.group(3)} [type={kind}]{text[m.end():]}"
    raise APIError(400, text, param)
