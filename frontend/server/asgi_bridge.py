"""An ASGI app run for an aiohttp request: the request as an ASGI HTTP scope and `receive`,
and what the app sends written back through aiohttp as it comes (a stream stays a stream).

`run_asgi(app, request, root, handler)` is what both ASGI middleware stacks and ASGI endpoints
(a SageMaker customer's /ping or /invocations handler) run through: the scope carries the
aiohttp request and the handler chain past this point, which `asgi_capture.handler_app` (the
bottom of a middleware stack) runs.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from aiohttp import web

from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.server.asgi_capture import AIOHTTP_REQUEST, Handler, Message
from vllm_pyfrontend.server.middleware import error_response

log = logging.getLogger(__name__)

ASGIApp = Callable[[dict, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]
# ASGI 3; HTTP spec 2.4: a disconnect shows as an OSError from `send` (aiohttp cancels the
# handler when its client leaves), so no `receive` is waited on for it.
_ASGI = {"version": "3.0", "spec_version": "2.4"}


def http_scope(request: web.Request, root: str) -> dict[str, Any]:
    """The ASGI HTTP scope of an aiohttp request (Starlette's `Request(scope)` reads it)."""
    raw_path, _, query = request.raw_path.partition("?")
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    sock = transport.get_extra_info("sockname") if transport is not None else None
    return {
        "type": "http",
        "asgi": _ASGI,
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": raw_path.encode("latin-1"),
        "query_string": query.encode("latin-1"),
        "root_path": root,
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": (peer[0], peer[1]) if isinstance(peer, tuple) else None,
        "server": (sock[0], sock[1]) if isinstance(sock, tuple) else None,
        "state": {},
    }


def body_receive(request: web.Request) -> Callable[[], Awaitable[Message]]:
    """ASGI `receive` of the request's body, read from aiohttp as asked for; once the body is
    given, it waits (a client that leaves cancels the handler, and with it this wait)."""
    done = False

    async def receive() -> Message:
        nonlocal done
        if done:
            await asyncio.Event().wait()
        chunk = await request.content.readany()
        more = bool(chunk) and not request.content.at_eof()
        done = not more
        return {"type": "http.request", "body": chunk, "more_body": more}

    return receive


class ResponseSender:
    """ASGI `send` onto an aiohttp StreamResponse for `request`: the head on
    http.response.start, each body part written (and drained) as it comes."""

    def __init__(self, request: web.Request):
        self.request = request
        self.response: web.StreamResponse | None = None

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.response is not None:
                raise RuntimeError("http.response.start sent twice")
            response = web.StreamResponse(status=message["status"])
            for name, value in message.get("headers", ()):
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            self.response = response
            await response.prepare(self.request)
        elif kind == "http.response.body":
            response = self.response
            if response is None:
                raise RuntimeError("http.response.body sent before http.response.start")
            body = message.get("body", b"")
            if body:
                await response.write(body)
            if not message.get("more_body", False):
                await response.write_eof()


async def run_asgi(app: ASGIApp, request: web.Request, root: str, handler: Handler | None,
                   what: str) -> web.StreamResponse:
    """`app` on `request`; `handler`: the aiohttp handler chain the app's bottom runs (None for
    an endpoint). A failure before the answer started is a 500 in the OpenAI error shape,
    logged with `what` failed; after, the connection is dropped (aiohttp's way)."""
    scope = http_scope(request, root)
    scope[AIOHTTP_REQUEST] = (request, handler, list(scope["headers"]))
    send = ResponseSender(request)
    try:
        await app(scope, body_receive(request), send)
    except APIError as e:  # (an endpoint's HTTP error)
        if send.response is not None:
            raise
        return error_response(request, e, root)
    except Exception:
        if send.response is not None:
            raise
        log.exception("%s failed on %s %s", what, request.method, request.path)
        return error_response(request, APIError(500, "Internal server error."), root)
    if send.response is None:
        log.error("%s sent no response on %s %s", what, request.method, request.path)
        return error_response(request, APIError(500, "Internal server error."), root)
    return send.response
