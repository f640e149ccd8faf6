"""The Messages routes in `/openapi.json` (request schemas from the msgspec structs)."""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_pyfrontend.api.anthropic.protocol import CountTokensRequest, MessagesRequest

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}


def describe(paths: dict[str, Any], components: dict[str, Any], ref_template: str) -> None:
    """Add /v1/messages and /v1/messages/count_tokens to an OpenAPI document being built."""
    refs, schemas = msgspec.json.schema_components((MessagesRequest, CountTokensRequest), ref_template=ref_template)
    components.update(schemas)
    components["AnthropicErrorResponse"] = ERROR_SCHEMA

    def error(description: str) -> dict[str, Any]:
        ref = {"$ref": ref_template.format(name="AnthropicErrorResponse")}
        return {"description": description, "content": {"application/json": {"schema": ref}}}

    errors = {
        "400": error("Invalid request (error type invalid_request_error)."),
        "401": error("Missing or wrong API key (x-api-key or Authorization: Bearer) with --api-key."),
        "404": error("Unknown model."),
        "413": error("Request body too large."),
        "503": error("The engine is not available, or the server is shutting down."),
    }
    paths["/v1/messages"] = {"post": {
        "operationId": "createMessage",
        "summary": "Create a message (Anthropic Messages API).",
        "requestBody": {"required": True, "content": {"application/json": {"schema": refs[0]}}},
        "responses": {
            "200": {"description": "A message (JSON), or a stream of events (server-sent events) when "
                                   "`stream` is true.",
                    "content": {"application/json": {"schema": {"type": "object"}},
                                "text/event-stream": {"schema": {"type": "string"}}}},
            **errors,
        },
    }}
    paths["/v1/messages/count_tokens"] = {"post": {
        "operationId": "countMessageTokens",
        "summary": "Count the prompt tokens of a Messages request.",
        "requestBody": {"required": True, "content": {"application/json": {"schema": refs[1]}}},
        "responses": {
            "200": {"description": "`input_tokens`.", "content": {"application/json": {"schema": {"type": "object"}}}},
            **errors,
        },
    }}
