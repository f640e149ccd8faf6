"""The OpenAPI 3.1 description of this server, served at `GET /openapi.json`.

The request body schemas are generated from the msgspec structs that validate requests
(`schemas.py`), so the description cannot drift from what the server accepts: schemathesis
fuzzes the server from it (`tests/reliability/test_schemathesis.py`). Responses are described
loosely (an object, or an event stream); every error has the OpenAI error shape, except on the
Anthropic Messages routes (`anthropic/openapi.py`), whose errors have Anthropic's.
"""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_pyfrontend import __version__
from vllm_pyfrontend.api.openai import schemas
from vllm_pyfrontend.api.anthropic import openapi as anthropic_openapi
from vllm_pyfrontend.api.speech import openapi as speech_openapi

_REF = "#/components/schemas/{name}"

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": "integer"},
            },
        }
    },
}


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF.format(name="ErrorResponse")}}},
    }


def _json_ok(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"type": "object"}}}}


def build_openapi() -> dict[str, Any]:
    """The whole document (built once per worker; it depends only on the structs)."""
    # Request structs by route; a struct the schemas module does not have (yet) is skipped.
    bodies = {
        "/v1/chat/completions": ("ChatCompletionRequest", "createChatCompletion", "Create a chat completion."),
        "/v1/completions": ("CompletionRequest", "createCompletion", "Create a text completion."),
        "/tokenize": ("TokenizeRequest", "tokenize", "Token ids of a prompt or chat."),
        "/detokenize": ("DetokenizeRequest", "detokenize", "Text of token ids."),
    }
    present = {path: getattr(schemas, spec[0]) for path, spec in bodies.items() if hasattr(schemas, spec[0])}
    refs, components = msgspec.json.schema_components(tuple(present.values()), ref_template=_REF)
    components["ErrorResponse"] = ERROR_SCHEMA
    generation_responses = {
        "200": {
            "description": "A completion (JSON), or a stream of chunks (server-sent events) "
            "when `stream` is true.",
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "text/event-stream": {"schema": {"type": "string"}},
            },
        },
        "400": _error("Invalid request (the offending field is in `param`)."),
        "404": _error("Unknown model."),
        "413": _error("Request body too large."),
        "503": _error("The engine is not available, or the server is shutting down."),
        "504": _error("The engine did not answer within the request deadline."),
    }
    simple = {
        "/v1/models": ("listModels", "Served models.", _json_ok("The model list.")),
        "/metrics": ("metrics", "Prometheus metrics.", {"description": "Metrics in the text format."}),
        "/ready": ("ready", "Readiness.", {"description": "Ready to serve."}),
        "/version": ("getVersion", "Engine and frontend versions.", _json_ok("Versions.")),
        "/load": ("getLoad", "In-flight requests and engine scheduler stats.", _json_ok("Load.")),
    }
    paths: dict[str, Any] = {}
    for (path, _struct), ref in zip(present.items(), refs):
        _, op_id, summary = bodies[path]
        streams = path in ("/v1/chat/completions", "/v1/completions")
        paths[path] = {
            "post": {
                "operationId": op_id,
                "summary": summary,
                "requestBody": {"required": True, "content": {"application/json": {"schema": ref}}},
                "responses": generation_responses if streams else {
                    "200": _json_ok("The result."),
                    **{k: v for k, v in generation_responses.items() if k != "200"},
                },
            }
        }
    paths |= {
        "/health": {
            "get": {
                "operationId": "health",
                "summary": "Liveness of the engine behind this worker.",
                "responses": {
                    "200": {"description": "Serving."},
                    "503": {"description": "The engine is down or the server is draining."},
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document.",
                "responses": {"200": _json_ok("The OpenAPI description.")},
            }
        },
    }
    for path, (op_id, summary, ok) in simple.items():
        paths[path] = {"get": {"operationId": op_id, "summary": summary, "responses": {"200": ok}}}
    anthropic_openapi.describe(paths, components, _REF)
    _add_responses_paths(paths, components, generation_responses)
    speech_openapi.describe(paths, _error)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "vllm-pyfrontend",
            "version": __version__,
            "description": "OpenAI-compatible API in front of vLLM's EngineCore.",
        },
        "paths": paths,
        "components": {"schemas": components},
    }


def _add_responses_paths(paths: dict[str, Any], components: dict[str, Any],
                         generation_responses: dict[str, Any]) -> None:
    """The Responses API (api/responses): create, retrieve, cancel."""
    from vllm_pyfrontend.api.responses.schemas import ResponsesRequest

    (ref,), more = msgspec.json.schema_components((ResponsesRequest,), ref_template=_REF)
    components.update(more)
    param = [{"name": "response_id", "in": "path", "required": True,
              "schema": {"type": "string", "minLength": 1, "maxLength": 200}}]
    missing = _error("No stored response with this id.")
    paths["/v1/responses"] = {"post": {
        "operationId": "createResponse", "summary": "Create a model response (OpenAI Responses API).",
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref}}},
        "responses": {**generation_responses, "404": _error("Unknown model or previous_response_id.")},
    }}
    paths["/v1/responses/{response_id}"] = {"get": {
        "operationId": "getResponse", "summary": "A stored response.", "parameters": param,
        "responses": {"200": _json_ok("The response object."), "404": missing},
    }}
    paths["/v1/responses/{response_id}/cancel"] = {"post": {
        "operationId": "cancelResponse", "summary": "Cancel a background response.", "parameters": param,
        "responses": {"200": _json_ok("The response object, cancelled."), "400": _error("Not a background response."),
                      "404": missing},
    }}


_cached: bytes | None = None


def openapi_bytes() -> bytes:
    global _cached
    if _cached is None:
        _cached = msgspec.json.encode(build_openapi())
    return _cached
