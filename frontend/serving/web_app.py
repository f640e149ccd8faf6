"""What every API style mounts on the worker's aiohttp app the same way: an endpoint's HTTP
route (the request body, read in the request's scope, to the endpoint's answer; `Endpoint`: the
HTTP routes and the batch runner call the same ones), and a service the app opens at
startup and closes at cleanup."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from vllm_pyfrontend.serving.responder import Endpoint, write_answer
from vllm_pyfrontend.serving.scope import status_of
from vllm_pyfrontend.serving.state import STATE


def http_route(style: str, endpoint: Endpoint) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The aiohttp handler of `endpoint`, its scope named `style` (logs, metrics, spans)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        scope = state.scopes.open_http(request, style)
        try:
            answer = await endpoint(state, scope, await state.read_body(request))
            resp = await write_answer(request, answer)
        except BaseException as e:
            scope.end_unless_held(e, status_of(e))
            raise
        scope.end_unless_held(None, resp.status)
        return resp

    return handle


def scoped_route(style: str, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                 ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An aiohttp handler whose whole work runs in a request scope, for routes that send no
    engine work of their own (render, derender): the tenant's quota admits them, the drain
    waits for them, and they get the request log line."""

    async def handle(request: web.Request) -> web.StreamResponse:
        async with request.app[STATE].scopes.http(request, style):
            return await handler(request)

    return handle


def app_service(app: web.Application, key: web.AppKey, start: Callable[[web.Application], Awaitable[Any]]) -> None:
    """`start(app)` at the app's startup (it sets `app[key]`); at cleanup, `app[key].close()`
    where it was set."""

    async def stop(app: web.Application) -> None:
        service = app.get(key)
        if service is not None:
            await service.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
