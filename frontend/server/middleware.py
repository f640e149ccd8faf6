"""Request hygiene around every route: request ids, trace headers, HTTP metrics, request logs,
CORS and API-key authentication (vLLM's flags and behaviour).

Order, outermost first (`build_middlewares`):

    context  request id, W3C trace headers, HTTP metrics, in-flight gauge, request log
    cors     preflight answers; CORS headers for allowed origins (also on 401s, so a browser
             can read them)
    auth     `--api-key`: Bearer token (or x-api-key) on vLLM's guarded prefixes (/v1, /v2,
             /inference, /cohere); `--api-keys-file`: on every route but the public ones
             (`PUBLIC_ROUTES`); /metrics too with --metrics-require-api-key
    error    (app.py) exceptions -> OpenAI-style error responses

Response headers (X-Request-Id, CORS) are added in `on_response_prepare`, which runs before
the headers go out for every response, streaming ones included: a streaming handler sends its
headers long before a middleware would see its response object.

What a handler can read from the request (aiohttp's per-request mapping):
    request["request_id"]     the X-Request-Id (client's, or a fresh uuid4 hex) when
                              --enable-request-id-headers or --enable-log-requests is on
    request["trace_headers"]  {"traceparent": ..., "tracestate": ...} when the client sent a
                              W3C traceparent: give it to EngineRequest.trace_headers
    request[TENANT]           the key's `Tenant` on guarded paths (read it with
                              `vllm_pyfrontend.tenants.tenant_of`)
    request[QUOTA]            a named key's `TenantQuota` (tenants/quotas.py), which the
                              request's scope admits against (serving/scope.py)

The request log line is the request scope's where the route runs one (it knows the tenant,
the tokens and the engines, and it outlives the HTTP exchange of a background response);
this middleware writes it for the other routes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.metrics import UNINSTRUMENTED_ROUTES, WorkerMetrics
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.server.root_path import normalize_root, route_path
from vllm_pyfrontend.tenants import TENANT
from vllm_pyfrontend.tenants.api_keys import ApiKeys
from vllm_pyfrontend.serving.responder import ERROR_FRAMES
from vllm_pyfrontend.serving.scope import CLIENT_CLOSED, QUOTA, SCOPE, http_log_fields
from vllm_pyfrontend.tenants.key_table import TenantKeys

request_log = logging.getLogger("vllm_pyfrontend.requests")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# vLLM's AuthenticationMiddleware.GUARDED_PREFIX: what `--api-key` alone guards (vLLM's semantics).
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
# With a keys file, the routes anyone may call (liveness, readiness and load probes, the
# version, and /metrics unless --metrics-require-api-key); every other path asks for a key,
# whatever it serves (/invocations, /tokenize, /pooling, /score, the abort routes ...).
PUBLIC_ROUTES = frozenset({"/health", "/ping", "/version", "/load", "/ready", "/metrics"})
_PREFLIGHT_MAX_AGE = "600"
_SAFE_HEADERS = frozenset({"accept", "accept-language", "content-language", "content-type"})


# ---------------------------------------------------------------------------- API keys


def guarded_paths(keys: ApiKeys | TenantKeys, guard_metrics: bool) -> Callable[[str], bool]:
    """Which paths (the root path removed) ask for a key: with a keys file every path but
    `PUBLIC_ROUTES`; with `--api-key` alone vLLM's prefixes. /metrics with --metrics-require-api-key."""
    if isinstance(keys, TenantKeys):
        public = PUBLIC_ROUTES - {"/metrics"} if guard_metrics else PUBLIC_ROUTES
        return lambda path: path not in public
    prefixes = GUARDED_PREFIXES + (("/metrics",) if guard_metrics else ())
    return lambda path: path.startswith(prefixes)


def auth_middleware(keys: ApiKeys | TenantKeys, guard_metrics: bool, root: str = ""):
    """Authentication with `--api-key` (`ApiKeys`: a tenant, no quota) or a keys file
    (`--api-keys-file`, `TenantKeys`): the key's tenant, and for a named key its quota, which
    the request's scope admits against (serving/scope.py: a 429 before any work, the lease
    held until the request's work ends, on every path)."""
    guarded = guarded_paths(keys, guard_metrics)

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "OPTIONS" and guarded(route_path(request, root)):
            found = keys.lookup(request.headers.get("Authorization"), request.headers.get("x-api-key"))
            if found is None:
                return _unauthorized(request, root)
            tenant, quota = found
            request[TENANT] = tenant
            if quota is not None:
                request[QUOTA] = quota
        return await handler(request)

    return auth


def error_response(request: web.Request, error: APIError, root: str = "") -> web.Response:
    """`error` as the answer to `request`, in the shape of the API style whose routes the path
    is under (`ERROR_FRAMES`: Anthropic's under /v1/messages), else OpenAI's: framed once."""
    frames = request.app.get(ERROR_FRAMES)
    if frames:
        path = route_path(request, root)
        for prefix, frame in frames.items():
            if path == prefix or path.startswith(prefix + "/"):
                return error.to_response(frame(error))
    return error.to_response()


def _unauthorized(request: web.Request, root: str) -> web.Response:
    resp = error_response(request, APIError(401, "Unauthorized: a valid API key is required."), root)
    resp.headers["WWW-Authenticate"] = "Bearer"
    return resp


# ---------------------------------------------------------------------------- CORS


class CorsPolicy:
    """Starlette's CORSMiddleware semantics (what vLLM uses) for the four vLLM flags."""

    def __init__(self, origins: list[str], methods: list[str], headers: list[str], credentials: bool):
        self.any_origin = "*" in origins
        self.origins = frozenset(origins)
        self.any_method = "*" in methods
        self.methods = [m.upper() for m in methods] if not self.any_method else [
            "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"]
        self.any_header = "*" in headers
        self.headers = frozenset(h.lower() for h in headers) | _SAFE_HEADERS
        self.credentials = credentials

    def origin_allowed(self, origin: str) -> bool:
        return self.any_origin or origin in self.origins

    def simple_headers(self, origin: str) -> dict[str, str]:
        """Headers for an actual (non-preflight) response to an allowed origin."""
        h: dict[str, str] = {}
        if self.any_origin and not self.credentials:
            h["Access-Control-Allow-Origin"] = "*"
        else:
            h["Access-Control-Allow-Origin"] = origin
            h["Vary"] = "Origin"
        if self.credentials:
            h["Access-Control-Allow-Credentials"] = "true"
        return h

    def preflight(self, request: web.Request, origin: str) -> web.Response:
        method = request.headers.get("Access-Control-Request-Method", "")
        wanted = request.headers.get("Access-Control-Request-Headers", "")
        failures = []
        if not self.origin_allowed(origin):
            failures.append("origin")
        if not self.any_method and method.upper() not in self.methods:
            failures.append("method")
        if not self.any_header:
            for h in (x.strip().lower() for x in wanted.split(",")):
                if h and h not in self.headers:
                    failures.append("headers")
                    break
        headers = {
            "Access-Control-Allow-Methods": ", ".join(self.methods),
            "Access-Control-Max-Age": _PREFLIGHT_MAX_AGE,
            "Vary": "Origin",
        }
        if self.any_header and wanted:
            headers["Access-Control-Allow-Headers"] = wanted
        elif not self.any_header:
            headers["Access-Control-Allow-Headers"] = ", ".join(sorted(self.headers))
        if self.credentials:
            headers["Access-Control-Allow-Credentials"] = "true"
        if failures:
            return web.Response(status=400, text=f"Disallowed CORS {', '.join(failures)}", headers=headers)
        headers["Access-Control-Allow-Origin"] = "*" if self.any_origin and not self.credentials else origin
        return web.Response(status=200, text="OK", headers=headers)


def cors_middleware(policy: CorsPolicy):
    @web.middleware
    async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if origin is None:
            return await handler(request)
        if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
            return policy.preflight(request, origin)
        if policy.origin_allowed(origin):
            request["cors_headers"] = policy.simple_headers(origin)
        return await handler(request)

    return cors


# ---------------------------------------------------------------------------- context


def _route_name(request: web.Request) -> str | None:
    """The route's pattern (bounded label values); None for unmatched paths."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else None


def context_middleware(config: WorkerConfig, metrics: WorkerMetrics | None):
    policy = config.policy
    want_id = policy.enable_request_id_headers or policy.enable_log_requests
    log_requests = policy.enable_log_requests
    max_log_len = policy.max_log_len

    @web.middleware
    async def context(request: web.Request, handler: Handler) -> web.StreamResponse:
        t0 = time.monotonic()
        headers = request.headers
        if want_id:
            request["request_id"] = headers.get("X-Request-Id") or uuid.uuid4().hex
        traceparent = headers.get("traceparent")
        if traceparent is not None:
            trace = {"traceparent": traceparent}
            tracestate = headers.get("tracestate")
            if tracestate is not None:
                trace["tracestate"] = tracestate
            request["trace_headers"] = trace
        route = _route_name(request)
        counted = metrics is not None and route is not None and route.startswith("/v1")
        if counted:
            metrics.in_flight.inc()
        status = 500
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        except web.HTTPException as e:
            status = e.status
            raise
        except BaseException:
            # Cancelled (the client went away) or a failure the error middleware let through.
            status = CLIENT_CLOSED if request.transport is None or request.transport.is_closing() else 500
            raise
        finally:
            elapsed = time.monotonic() - t0
            if counted:
                metrics.in_flight.dec()
            if metrics is not None and route not in UNINSTRUMENTED_ROUTES:
                metrics.observe_http(request.method, route or "none", status, elapsed)
            if log_requests and SCOPE not in request:  # (a request's scope writes its own line)
                _log_request(request, status, elapsed, max_log_len)

    return context


def _log_request(request: web.Request, status: int, elapsed: float, max_log_len: int | None) -> None:
    """One structured (JSON) line per request. Never the Authorization header or the body."""
    record = {"event": "request", **http_log_fields(request, max_log_len), "status": status,
              "duration_ms": round(elapsed * 1000.0, 3)}
    trace = request.get("trace_headers")
    if trace is not None:
        record["traceparent"] = trace["traceparent"]
    request_log.info("%s", msgspec.json.encode(record).decode())


# ---------------------------------------------------------------------------- assembly


def _response_hook(echo_request_id: bool):
    async def on_response_prepare(request: web.Request, response: web.StreamResponse) -> None:
        if echo_request_id:
            rid = request.get("request_id")
            if rid is not None:
                response.headers["X-Request-Id"] = rid
        cors = request.get("cors_headers")
        if cors:
            for k, v in cors.items():
                if k == "Vary" and "Vary" in response.headers:
                    continue
                response.headers.setdefault(k, v)

    return on_response_prepare


def build_middlewares(config: WorkerConfig, metrics: WorkerMetrics | None,
                      keys: TenantKeys | ApiKeys | None = None) -> list:
    """The middlewares to put before app.py's error middleware (outermost first). `keys`: the
    worker's key lookup (`ServerState.keys`: the keys file's table, or the `--api-key` keys);
    without it, the configuration's `--api-key` keys."""
    mws: list = [context_middleware(config, metrics)]
    policy = config.policy
    if policy.allowed_origins:
        mws.append(cors_middleware(CorsPolicy(
            policy.allowed_origins, policy.allowed_methods, policy.allowed_headers,
            policy.allow_credentials)))
    if keys is None and any(config.api_keys):
        keys = ApiKeys(config.api_keys)
    if keys is not None:
        mws.append(auth_middleware(keys, policy.metrics_require_api_key, normalize_root(policy.root_path)))
    return mws


def install(app: web.Application, config: WorkerConfig) -> None:
    """Response-header hooks (call once on the app built with `build_middlewares`); none when
    no response gets such headers (request id echo and CORS both off, the defaults): a hook
    costs every response a signal dispatch and a coroutine."""
    policy = config.policy
    if policy.enable_request_id_headers or policy.allowed_origins:
        app.on_response_prepare.append(_response_hook(policy.enable_request_id_headers))
