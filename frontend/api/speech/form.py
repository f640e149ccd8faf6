"""The multipart/form-data body of /v1/audio/transcriptions and /v1/audio/translations.

vLLM's routes take `Annotated[TranscriptionRequest, Form()]` (FastAPI + pydantic): every field
arrives as a string (or a list of them, for `timestamp_granularities[]`) and pydantic's lax
mode converts it; a field sent as an empty string takes its default. The fields, defaults and
checks here are vLLM's (vllm/entrypoints/speech_to_text/{transcription,translation}/protocol.py,
the model validator included: stream options without `stream`, `vllm_xargs` as JSON). Failures
are `FormError`s, answered 400 as vLLM answers its validation errors. Pure Python, no imports
of vLLM: the route parses before anything heavy runs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}

AUDIO_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
TRANSCRIPTION_FORMATS = (*AUDIO_FORMATS, "diarized_json")


class FormError(ValueError):
    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass
class SpeechRequest:
    """One speech-to-text request, typed (the fields of vLLM's TranscriptionRequest /
    TranslationRequest; the translation route has no `timestamp_granularities`)."""

    task: str  # "transcribe" | "translate"
    file: bytes = b""
    filename: str | None = None
    model: str | None = None
    language: str | None = None
    hotwords: str | None = None
    prompt: str = ""
    response_format: str = "json"
    timestamp_granularities: list[str] = field(default_factory=list)
    stream: bool = False
    stream_include_usage: bool = False
    stream_continuous_usage_stats: bool = False
    vllm_xargs: dict[str, Any] | None = None
    to_language: str | None = None
    use_beam_search: bool = False
    n: int = 1
    length_penalty: float = 1.0
    include_stop_str_in_output: bool = False
    temperature: float = 0.0
    watermarking: bool | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    frequency_penalty: float | None = 0.0
    repetition_penalty: float | None = None
    presence_penalty: float | None = 0.0
    max_completion_tokens: int | None = None


_STR = ("model", "language", "hotwords", "to_language")
_BOOL = ("stream", "stream_include_usage", "stream_continuous_usage_stats", "use_beam_search",
         "include_stop_str_in_output", "watermarking")
_INT = ("n", "top_k", "seed", "max_completion_tokens")
_FLOAT = ("length_penalty", "temperature", "top_p", "min_p", "frequency_penalty", "repetition_penalty",
          "presence_penalty")


def _error(kind: str, name: str, msg: str, value: Any) -> FormError:
    # vLLM's validation-error message: "1 validation error:\n  {...}" with param body.<field>.
    detail = {"type": kind, "loc": f"body.{name}", "msg": msg, "input": value}
    return FormError(f"1 validation error:\n  {detail!r}", f"body.{name}")


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise _error("bool_parsing", name, "Input should be a valid boolean, unable to interpret input", value)


def _int(name: str, value: str) -> int:
    v = value.strip().replace("_", "")
    try:
        return int(v)
    except ValueError:
        pass
    try:
        f = float(v)
    except ValueError:
        raise _error("int_parsing", name, "Input should be a valid integer, unable to parse string as an integer",
                     value) from None
    if not math.isfinite(f) or f != int(f):
        raise _error("int_from_float", name, "Input should be a valid integer, got a number with a fractional part",
                     value)
    return int(f)


def _float(name: str, value: str) -> float:
    try:
        return float(value.strip())
    except ValueError:
        raise _error("float_parsing", name, "Input should be a valid number, unable to parse string as a number",
                     value) from None


def parse_form(task: str, fields: list[tuple[str, Any]]) -> SpeechRequest:
    """`fields`: the form's (name, value) pairs in order; the file part's value is a
    `(filename, bytes)` pair, every other value a string."""
    req = SpeechRequest(task=task)
    given: dict[str, Any] = {}
    granularities: list[str] = []
    for name, value in fields:
        if name == "file":
            if isinstance(value, str):
                # vLLM: HTTPException 422 from its model validator.
                raise FormError("Expected 'file' to be a file-like object, not 'str'.", "file")
            given["file"] = value
        elif name == "timestamp_granularities[]" and task == "transcribe":
            granularities.append(value)
        else:
            given[name] = value  # the last one wins, as for FastAPI's scalar form fields
    if "file" not in given:
        raise _error("missing", "file", "Field required", f"<dict of {len(given)} items>")
    req.filename, req.file = given.pop("file")
    for name, value in given.items():
        if not isinstance(value, str) or value == "":
            continue  # an empty form field: the default
        if name in _STR:
            setattr(req, name, value)
        elif name == "prompt":
            req.prompt = value
        elif name in _BOOL:
            setattr(req, name, _bool(name, value))
        elif name in _INT:
            setattr(req, name, _int(name, value))
        elif name in _FLOAT:
            setattr(req, name, _float(name, value))
        elif name == "response_format":
            allowed = TRANSCRIPTION_FORMATS if task == "transcribe" else AUDIO_FORMATS
            if value not in allowed:
                shown = ", ".join(f"'{f}'" for f in allowed[:-1]) + f" or '{allowed[-1]}'"
                raise _error("literal_error", name, f"Input should be {shown}", value)
            req.response_format = value
        elif name == "vllm_xargs":
            try:
                xargs = json.loads(value)
            except json.JSONDecodeError as e:
                raise FormError(f"Failed to parse vllm_xargs. Must be valid JSON: {e} (parameter=vllm_xargs)",
                                "vllm_xargs") from None
            if not isinstance(xargs, dict):
                raise _error("dict_type", name, "Input should be a valid dictionary", value)
            req.vllm_xargs = xargs
        # anything else: ignored, as vLLM's models ignore extra fields
    for g in granularities:
        if g not in ("word", "segment"):
            raise _error("literal_error", "0", "Input should be 'word' or 'segment'", g)
    req.timestamp_granularities = granularities
    if req.seed is not None and not _LONG_MIN <= req.seed <= _LONG_MAX:
        raise _error("less_than_equal" if req.seed > 0 else "greater_than_equal", "seed",
                     "Input should be within the range of a 64-bit integer", str(req.seed))
    if (req.stream_include_usage or req.stream_continuous_usage_stats) and not req.stream:
        param = "stream_include_usage" if req.stream_include_usage else "stream_continuous_usage_stats"
        raise FormError(f"Stream options can only be defined when `stream=True`. (parameter={param})", param)
    return req


def check_request(req: SpeechRequest, *, supports_verbose: bool, supports_diarized: bool, model: str) -> None:
    """vLLM's checks in `_create_speech_to_text` that come before any audio work (after the
    model name check), in its order. Raises FormError (400)."""
    if req.stream and req.use_beam_search:
        raise FormError("Streaming is not currently supported with beam search")
    if req.response_format not in ("text", "json", "verbose_json", "diarized_json"):
        raise FormError("Currently only support response_format: `text`, `json`, `verbose_json` or `diarized_json`")
    if req.response_format == "verbose_json" and not supports_verbose:
        raise FormError(f"Currently do not support verbose_json for {model}")
    if req.response_format == "diarized_json" and not supports_diarized:
        raise FormError(f"Currently do not support diarized_json for {model}")
    if req.response_format in ("verbose_json", "diarized_json") and req.stream:
        raise FormError(f"{req.response_format} format doesn't support streaming case")
