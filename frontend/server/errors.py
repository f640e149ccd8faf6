"""OpenAI-style errors: {"error": {"message", "type", "param", "code"}} as vLLM shapes them."""

from __future__ import annotations

from http import HTTPStatus

import msgspec
from aiohttp import web

_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    413: "RequestEntityTooLarge",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, err_type: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.err_type = err_type or _TYPES.get(status) or HTTPStatus(status).phrase.replace(" ", "")

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": self.param,
                "code": self.status,
            }
        }

    def to_bytes(self) -> bytes:
        return msgspec.json.encode(self.body())

    def to_response(self) -> web.Response:
        return web.Response(
            status=self.status, body=self.to_bytes(), content_type="application/json"
        )


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param)


SCALE_OUT_DISABLED = ("Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to "
                      "enable them.")


async def scale_out_disabled(request: web.Request) -> web.Response:
    """vLLM's answer on a scale-out route (generate, render, derender) of a server started
    without --enable-scale-out."""
    raise APIError(403, SCALE_OUT_DISABLED, err_type="PermissionDeniedError")
