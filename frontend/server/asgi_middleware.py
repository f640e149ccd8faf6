"""ASGI HTTP middleware (Starlette's, as vLLM's FastAPI app runs it) on this aiohttp server:
vLLM's `--middleware` and a SageMaker customer script's hooks (sagemaker_hooks.py).

Each middleware is installed as vLLM installs it: an `async def mw(request, call_next)` as
Starlette's `BaseHTTPMiddleware(app, dispatch=mw)` (`app.middleware("http")`), a class as
`cls(app)` (`app.add_middleware(cls)`: a BaseHTTPMiddleware subclass, or any pure ASGI
middleware). The stack is Starlette's own, built once per worker; its bottom app is this
server's handler chain (asgi_capture.py), and each request runs through it with
asgi_bridge.py's `run_asgi`. So `call_next(request)` answers with a Starlette streaming
response (SSE streams still stream), sees the scope's headers and a body the middleware read or
set (`request._body = ...`), and a middleware may answer on its own without calling it.

Where they run among the aiohttp middleware (`arrange`), as in vLLM's stack:

    context  (request ids, metrics, request log)
    outer    SageMaker throttle, then --middleware (the last one given outermost)
    cors, auth
    inner    SageMaker pre_post_process (input / output formatters)
    error    exceptions -> OpenAI-style errors (so middleware see error answers)
    routes   SageMaker custom GET /ping and POST /invocations handlers

With nothing configured none of this is installed, nor Starlette imported.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from dataclasses import dataclass

from aiohttp import web

from vllm_pyfrontend.config import WorkerPolicy
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.server.asgi_bridge import ASGIApp, run_asgi
from vllm_pyfrontend.server.asgi_capture import handler_app
from vllm_pyfrontend.server.root_path import normalize_root

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Middleware:
    name: str  # where it comes from, for messages: "--middleware pkg.mod.fn"
    target: object  # an async function (request, call_next), or an ASGI middleware class


def check_kind(name: str, target: object) -> Middleware:
    """`target` as a Middleware, or ValueError saying why it cannot be one (vLLM's rule:
    a class, or an async function)."""
    if inspect.iscoroutinefunction(target):
        return Middleware(name, target)
    if inspect.isclass(target):
        try:
            inspect.signature(target).bind(handler_app)
        except TypeError as e:
            raise ValueError(f"{name}: a middleware class must take the app alone (vLLM installs it "
                             f"with app.add_middleware(cls)): {e}") from None
        except ValueError:  # (no signature to read: its construction tells)
            pass
        return Middleware(name, target)
    raise ValueError(f"{name}: must be an async function (request, call_next) or an ASGI middleware "
                     f"class taking the app, got {type(target).__name__}")


def import_middleware(path: str) -> Middleware:
    """`--middleware module.path.name`, imported (ValueError naming the flag when it cannot be)."""
    module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise ValueError(f"--middleware {path}: expected an import path, module.name")
    try:
        target = getattr(importlib.import_module(module), attr)
    except Exception as e:  # the user's module: any error stops the start
        raise ValueError(f"--middleware {path}: {type(e).__name__}: {e}") from e
    return check_kind(f"--middleware {path}", target)


def build_stack(chain: list[Middleware]) -> ASGIApp:
    """Starlette's middleware stack over this server's handler chain (`chain`: outermost first)."""
    from starlette.middleware.base import BaseHTTPMiddleware

    app: ASGIApp = handler_app
    for mw in reversed(chain):
        try:
            app = mw.target(app) if inspect.isclass(mw.target) else BaseHTTPMiddleware(app, dispatch=mw.target)
        except Exception as e:
            raise ValueError(f"{mw.name}: cannot be installed: {type(e).__name__}: {e}") from e
        if not callable(app):
            raise ValueError(f"{mw.name}: not an ASGI middleware (its instances are not callable)")
    return app


def stack_middleware(chain: list[Middleware], root: str):
    """An aiohttp middleware running each request through `chain`."""
    stack = build_stack(chain)
    what = "middleware " + ", ".join(mw.name for mw in chain)

    @web.middleware
    async def asgi_middleware(request: web.Request, handler) -> web.StreamResponse:
        return await run_asgi(stack, request, root, handler, what)

    return asgi_middleware


def endpoint_app(path: str, method: str, endpoint) -> ASGIApp:
    """A FastAPI endpoint function as an ASGI app, by FastAPI's own route machinery (its
    parameters injected, its return value encoded); its HTTP errors become APIErrors."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
    from fastapi.routing import APIRoute
    from starlette.exceptions import HTTPException

    # (the exit stack FastAPI's app gives its routes: the endpoint's file and dependency cleanup)
    route_app = AsyncExitStackMiddleware(APIRoute(path, endpoint, methods=[method]).app)

    async def app(scope, receive, send) -> None:
        try:
            await route_app(scope, receive, send)
        except HTTPException as e:
            raise APIError(e.status_code, str(e.detail)) from None
        except RequestValidationError as e:
            raise APIError(400, str(e.errors())) from None

    return app


def endpoints_middleware(endpoints: dict[tuple[str, str], ASGIApp], root: str):
    """An aiohttp middleware answering the routes in `endpoints` ((method, route path) -> ASGI
    app) with their app instead of the route's own handler."""

    @web.middleware
    async def asgi_endpoints(request: web.Request, handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        app = endpoints.get((request.method, resource.canonical)) if resource is not None else None
        if app is None:
            return await handler(request)
        return await run_asgi(app, request, root, None, f"the custom {request.method} {resource.canonical} handler")

    return asgi_endpoints


def arrange(middlewares: list, error_middleware, policy: WorkerPolicy, *, announce: bool = True) -> list:
    """The app's aiohttp middleware: `middlewares` (server/middleware.py's `build_middlewares`,
    context first) and `error_middleware`, with the ASGI middleware configured (`--middleware`,
    a SageMaker customer script's hooks) placed as the module docstring shows. `announce`: log
    what is installed, and warn about SageMaker hooks that are not supported (one worker says it)."""
    from vllm_pyfrontend.server import sagemaker_hooks

    outer = [import_middleware(path) for path in reversed(policy.middleware)]
    inner: list[Middleware] = []
    endpoints: dict[tuple[str, str], ASGIApp] = {}
    hooks = sagemaker_hooks.load(announce) if sagemaker_hooks.configured() else None
    if hooks is not None:
        outer[:0] = hooks.throttle
        inner = hooks.pre_post_process
        endpoints = {key: endpoint_app(key[1], key[0], fn) for key, fn in hooks.endpoints.items()}
    if not (outer or inner or endpoints):
        return [*middlewares, error_middleware]
    root = normalize_root(policy.root_path)
    context, guards = middlewares[:1], middlewares[1:]
    if outer and inner and not guards:  # nothing between them: one stack
        outer, inner = outer + inner, []
    arranged = list(context)
    if outer:
        arranged.append(stack_middleware(outer, root))
    arranged += guards
    if inner:
        arranged.append(stack_middleware(inner, root))
    arranged.append(error_middleware)
    if endpoints:
        arranged.append(endpoints_middleware(endpoints, root))
    if announce:
        names = [mw.name for mw in outer + inner] + [f"custom {m} {p} handler" for m, p in endpoints]
        log.info("ASGI middleware installed: %s", "; ".join(names))
    return arranged
