"""SageMaker's hosting contract, as vLLM serves it on every deployment: `GET|POST /ping` answers
like /health, and `POST /invocations` runs a chat completion when the body is one, else a text
completion, else 400 (vLLM 0.32 `entrypoints/serve/sagemaker`).

/invocations dispatches to the chat and completion handlers the application registers with
`add_routes`, so this module imports no other route.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp import web

from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.state import STATE

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The chat and completion handlers the app registers, which /invocations dispatches to.
INVOCATION_HANDLERS = web.AppKey("invocation_handlers", tuple)

_EXPECTED = "Cannot find suitable handler for request. Expected one of: ['ChatCompletionRequest', 'CompletionRequest']"


async def handle_ping(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.Response(status=200 if state.engine.healthy else 503)


async def handle_invocations(request: web.Request) -> web.StreamResponse:
    chat, completion = request.app[INVOCATION_HANDLERS]
    raw = await request.app[STATE].read_body(request)  # aiohttp keeps the body for the handler
    try:
        body = json.loads(raw or b"null")
    except ValueError as e:
        raise APIError(400, f"JSON decode error: {e}") from None
    if isinstance(body, dict) and isinstance(body.get("messages"), list):
        return await chat(request)
    if isinstance(body, dict) and body.get("prompt") not in (None, "", []):
        return await completion(request)
    raise APIError(400, _EXPECTED)


def add_routes(app: web.Application, *, chat: Handler, completion: Handler) -> None:
    """/ping and /invocations; `chat` and `completion`: the handlers /invocations runs for a chat
    body and for a completion body."""
    app[INVOCATION_HANDLERS] = (chat, completion)
    app.router.add_get("/ping", handle_ping)
    app.router.add_post("/ping", handle_ping)
    app.router.add_post("/invocations", handle_invocations)
