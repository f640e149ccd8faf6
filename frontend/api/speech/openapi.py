"""The speech-to-text routes in /openapi.json (multipart/form-data bodies, vLLM's fields)."""

from __future__ import annotations

from typing import Any

_NUM = {"type": "number"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_INT = {"type": "integer"}


def _form(task: str) -> dict[str, Any]:
    formats = ["json", "text", "srt", "verbose_json", "vtt"] + (["diarized_json"] if task == "transcribe" else [])
    props: dict[str, Any] = {
        "file": {"type": "string", "format": "binary", "description": "The audio file (wav, flac, ogg, ...)."},
        "model": _STR, "language": _STR, "prompt": _STR, "hotwords": _STR, "to_language": _STR,
        "response_format": {"type": "string", "enum": formats},
        "temperature": _NUM, "top_p": _NUM, "top_k": _INT, "min_p": _NUM, "seed": _INT,
        "frequency_penalty": _NUM, "presence_penalty": _NUM, "repetition_penalty": _NUM,
        "max_completion_tokens": _INT, "stream": _BOOL, "stream_include_usage": _BOOL,
        "stream_continuous_usage_stats": _BOOL, "vllm_xargs": {"type": "string", "description": "A JSON object."},
    }
    if task == "transcribe":
        props["timestamp_granularities[]"] = {"type": "array", "items": {"type": "string", "enum": ["word", "segment"]}}
    return {"type": "object", "required": ["file"], "properties": props}


def describe(paths: dict[str, Any], error: Any) -> None:
    """Add /v1/audio/transcriptions and /v1/audio/translations to `paths`; `error(description)`
    is the OpenAI error response object."""
    for path, task, op_id, summary in (
        ("/v1/audio/transcriptions", "transcribe", "createTranscription", "Transcribe audio (speech-to-text models)."),
        ("/v1/audio/translations", "translate", "createTranslation", "Translate audio into English text."),
    ):
        paths[path] = {"post": {
            "operationId": op_id,
            "summary": summary,
            "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": _form(task)}}},
            "responses": {
                "200": {"description": "The text (JSON), or a stream of chunks (server-sent events) when "
                                       "`stream` is true.",
                        "content": {"application/json": {"schema": {"type": "object"}},
                                    "text/event-stream": {"schema": {"type": "string"}}}},
                "400": error("Invalid request: a bad form field, audio that cannot be decoded, a file over "
                             "the size limit, an unsupported language or format."),
                "404": error("Unknown model, or the model is not a speech-to-text model."),
                "422": error("`file` sent as a plain form field."),
                "503": error("The engine is not available, or the server is shutting down."),
            },
        }}
