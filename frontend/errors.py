"""The errors that cross layers, at the bottom of the package so that every layer can raise them.

- `APIError`: an answer with an HTTP status in OpenAI's error shape
  (`{"error": {"message", "type", "param", "code"}}`, as vLLM shapes it). Any layer that knows
  the status the client must get raises it; the server writes it.
- `InvalidRequestError`: a request the `llm` layer cannot lower for the engine. It is always the
  client's doing (a bad value, a prompt too long, a constraint that does not parse), so every API
  style answers it as its own "bad request"; `param` names the field.
- `MediaError`: what a client did wrong with a media item, with the status the server answers.
"""

from __future__ import annotations

from http import HTTPStatus

import msgspec

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

    def headers(self) -> dict[str, str]:
        """Response headers that go with the error whatever shape its body has (Retry-After)."""
        return {}

    def to_response(self, body: bytes | None = None):
        """The answer as an aiohttp response: OpenAI's shape, or `body` when an API style frames
        its errors its own way (aiohttp is imported by the server before any call)."""
        from aiohttp import web

        return web.Response(status=self.status, body=self.to_bytes() if body is None else body,
                            headers=self.headers() or None, content_type="application/json")


def client_error(error: BaseException) -> APIError | None:
    """The answer to a request whose handling raised `error` when it is the client's doing: an
    APIError as it is, the lowering's InvalidRequestError as a 400, and a RecursionError (msgspec
    decodes free-form fields recursively: a body nested thousands of levels deep) as a 400;
    None for anything else."""
    if isinstance(error, APIError):
        return error
    if isinstance(error, InvalidRequestError):
        return APIError(400, error.message, error.param)
    if isinstance(error, RecursionError):
        return APIError(400, "The request body is nested too deeply.")
    return None


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param)


_NO_VALUE = object()


def with_parameter(message: str, parameter: str | None = None, value: object = _NO_VALUE) -> str:
    """A message as vLLM's `VLLMValidationError` writes itself (and so every answer it becomes):
    the text, then ` (parameter=P, value=V)` for what it names (a None value is not named)."""
    extras = []
    if parameter is not None:
        extras.append(f"parameter={parameter}")
    if value is not _NO_VALUE and value is not None:
        extras.append(f"value={value}")
    return f"{message} ({', '.join(extras)})" if extras else message


def validation_error(message: str, parameter: str | None = None, value: object = _NO_VALUE) -> APIError:
    """vLLM's `VLLMValidationError` as an answer: 400, the message with its ` (parameter=...)`
    suffix, `param` the parameter."""
    return APIError(400, with_parameter(message, parameter, value), parameter)


class InvalidRequestError(ValueError):
    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


class MediaError(Exception):
    """A media item that cannot be used, with the status the server answers.

    Statuses (vLLM answers most of these with 400 or 422, some with 500):
    - 400: bad input: a malformed URL or data URL, invalid base64, a corrupt or truncated file,
      an upstream HTTP error, a redirect loop, a fetch that did not finish in time (vLLM's
      fetch time-outs; a 408/504 would blame the wrong party), more items than the limit;
    - 403: a refused destination: a private/loopback/link-local/reserved address, a domain not
      in --allowed-media-domains, a file:// URL without or outside --allowed-local-media-path;
    - 413: too large: more bytes than the size limit, more pixels than the image limit
      (a decompression bomb);
    - 415: not a supported media type: bytes that no allowed decoder recognizes;
    - 500: the server cannot decode this modality (a decoding package is missing).
    """

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def __repr__(self) -> str:
        return f"MediaError({self.status}, {self.message!r})"

    def __reduce__(self):  # picklable (a process pool sends it back)
        return (MediaError, (self.status, self.message, self.param))
