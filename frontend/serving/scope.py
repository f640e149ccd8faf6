"""One client request, one scope: what must hold for every request, owned by the request.

A scope opens when a request arrives, on whichever path it came (an HTTP route, a batch line,
a gRPC call; `RequestScopes.open`, or `RequestScopes.http` on an aiohttp request) and ends
exactly once, whatever ended it (`end`). Between the two it owns:

- who the request is for (`Caller.tenant`) and the tenant's quota lease: admitted when the
  scope opens (a 429 before any work), tokens reserved before engine work is sent (the prompt
  plus every engine request's `max_tokens`), settled to what was used and released at the end;
- admission control (`--max-num-queued-reqs/-tokens`) for its engine requests;
- its engine requests (`submit` for generation, `submit_steps` for beam search's steps,
  `submit_pooling` for pooling) and their abort when the request ends before they do (the
  client went away, a cancel, an error);
- the worker's in-flight count (a graceful drain waits for it; `/load` reports it);
- at its end: each engine request's metrics, the request's tracing span and its log line, and
  the release of what the style built (`on_end`).

A style supplies only its decoding, its lowering and its writer. A background response holds
its scope past its HTTP answer (`hold`) and ends it when its run ends, so its concurrency slot,
its tokens and its span follow the work, not the HTTP exchange.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend.engine.types import EngineDeadError
from vllm_pyfrontend.errors import APIError, client_error
from vllm_pyfrontend.llm.generation import Generation, GenerationConsumer
from vllm_pyfrontend.llm.pooling import PoolingBatch
from vllm_pyfrontend.llm.submission import Submission
from vllm_pyfrontend.serving.admission import Admission
from vllm_pyfrontend.serving.in_flight import InFlight
from vllm_pyfrontend.tenants import ANONYMOUS, TENANT, Tenant
from vllm_pyfrontend.tenants.quotas import Lease, TenantQuota

request_log = logging.getLogger("vllm_pyfrontend.requests")
log = logging.getLogger(__name__)

# Where an HTTP request keeps its scope and its tenant's quota (aiohttp's per-request mapping).
SCOPE: web.RequestKey["RequestScope"] = web.RequestKey("request_scope", object)
QUOTA: web.RequestKey[TenantQuota] = web.RequestKey("tenant_quota", TenantQuota)
# Status for a request whose client went away before the answer (nginx's convention).
CLIENT_CLOSED = 499

# (choice index, prompt ids, engine sampling map, the choice's own consumer or None)
EngineWork = tuple[int, list[int], dict[str, Any], GenerationConsumer | None]


@dataclass(slots=True)
class Caller:
    """Who sent a request and what its transport said about it, decided by the path it came
    on (HTTP headers and the auth middleware, a batch's owner, gRPC metadata)."""

    tenant: Tenant = ANONYMOUS
    quota: TenantQuota | None = None
    path: str = ""  # what the log line names where there are no HTTP fields (a batch line's url, a gRPC method)
    request_id: str | None = None  # the client's X-Request-Id
    trace_headers: dict[str, str] | None = None  # W3C traceparent/tracestate, to the engine
    data_parallel_rank: int | None = None  # vLLM's X-data-parallel-rank
    http: dict[str, Any] | None = None  # what the log line says of the HTTP exchange (`http_log_fields`)


def http_log_fields(request: web.Request, max_log_len: int | None) -> dict[str, Any]:
    """What a request log line says of the HTTP exchange: the log's request id, method, path
    (cut to `--max-log-len`), route pattern, client address and user agent. Never the
    Authorization header or the body."""
    resource = request.match_info.route.resource
    path = request.path
    return {"request_id": request.get("request_id"), "method": request.method,
            "path": path if max_log_len is None else path[:max_log_len],
            "route": resource.canonical if resource is not None else None, "client": request.remote,
            "user_agent": (request.headers.get("User-Agent") or "")[:200] or None}


def caller_of(request: web.Request, log_fields: bool = False, max_log_len: int | None = None) -> Caller:
    """An HTTP request's caller: what the middleware decided (tenant, quota, request id,
    trace headers) and vLLM's `X-data-parallel-rank` header (ignored when not an integer);
    `log_fields`: with what the request log line says of the HTTP exchange."""
    rank = request.headers.get("X-data-parallel-rank")
    try:
        dp_rank = int(rank) if rank is not None else None
    except ValueError:
        dp_rank = None
    return Caller(
        tenant=request.get(TENANT, ANONYMOUS), quota=request.get(QUOTA), request_id=request.headers.get("X-Request-Id"), trace_headers=request.get("trace_headers"),
        data_parallel_rank=dp_rank, http=http_log_fields(request, max_log_len) if log_fields else None)


def status_of(error: BaseException | None) -> int:
    """The HTTP status an exception becomes (the error middleware's mapping)."""
    if error is None:
        return 200
    if isinstance(error, asyncio.CancelledError):
        return CLIENT_CLOSED
    answer = client_error(error)
    if answer is not None:
        return answer.status
    if isinstance(error, web.HTTPException):
        return error.status
    return 500


@dataclass(slots=True)
class _Adopted:
    """What the scope reads of an engine request, for a result that stands for one."""

    prompt_token_ids: list[int]
    sampling_params: dict[str, Any]


class RequestScopes:
    """Built once per worker with what every scope needs; opens them."""

    def __init__(self, *, engine: Any, worker_index: int, metrics: Any, in_flight: InFlight,
                 admission: Admission | None, tracer: Any = None, log_requests: bool = False,
                 max_log_len: int | None = None, draining: Callable[[], bool] = lambda: False):
        self.engine = engine
        self.worker_index = worker_index
        self.metrics = metrics  # WorkerMetrics
        self.in_flight = in_flight
        self.admission = admission
        self.tracer = tracer  # tracing.RequestTracer with --otlp-traces-endpoint, else None
        self.log_requests = log_requests
        self.max_log_len = max_log_len
        self.draining = draining

    def check_engine(self) -> None:
        """503 while the worker drains or the engine is down, or past a queue bound."""
        if self.draining():
            raise APIError(503, "The server is shutting down.")
        if not self.engine.healthy:
            raise APIError(503, "The engine is not available.")
        if self.admission is not None:
            self.admission.check()

    def open(self, caller: Caller, style: str) -> "RequestScope":
        """A new request's scope (raises QuotaExceeded: nothing is held then)."""
        return RequestScope(self, caller, style)

    def open_http(self, request: web.Request, style: str) -> "RequestScope":
        """An HTTP request's scope, kept on the request (the request log middleware reads it);
        the route ends it (`HttpScope` does it for an `async with` block)."""
        scope = request[SCOPE] = RequestScope(
            self, caller_of(request, self.log_requests, self.max_log_len), style)
        return scope

    def http(self, request: web.Request, style: str) -> "HttpScope":
        """`async with scopes.http(request, style) as scope:` around an HTTP route's work."""
        return HttpScope(self, request, style)


class RequestScope:
    __slots__ = ("scopes", "caller", "style", "lease", "arrival", "response_id", "model", "generations",
                 "_steps", "_pooling", "_on_end", "failed", "_followed", "status", "held", "ended")

    def __init__(self, scopes: RequestScopes, caller: Caller, style: str):
        self.scopes = scopes
        self.caller = caller
        self.style = style
        self.lease: Lease | None = caller.quota.admit() if caller.quota is not None else None
        scopes.in_flight.started()
        self.arrival = time.monotonic()
        self.response_id: str | None = None
        self.model: str | None = None
        self.generations: list[tuple[Any, Generation]] = []  # (EngineRequest, Generation)
        self._steps: list[Submission] | tuple = ()  # beam search's step requests
        self._pooling: list[PoolingBatch] | tuple = ()
        self._on_end: list[Callable[[], None]] = []
        self.failed = False  # (the exception itself is not kept: its traceback holds the frames)
        self._followed: Any = None  # what the style runs, whose `error` is the request's
        self.status: int | None = None
        self.held = False
        self.ended = False

    # -- what the style tells the scope ---------------------------------------------------
    def name(self, response_id: str, model: str) -> None:
        """The id the client sees and the model it asked for (the span and the log line)."""
        self.response_id, self.model = response_id, model

    def on_end(self, callback: Callable[[], None]) -> None:
        """Run `callback` when the scope ends (after metrics and the span, before release)."""
        self._on_end.append(callback)

    def hold(self) -> None:
        """The request goes on past its HTTP answer (a background response): `HttpScope` leaves
        the scope open; whoever runs the work calls `end`."""
        self.held = True

    def follow(self, run: Any) -> None:
        """The style's run (its `error`, set when it failed mid-way, fails the request)."""
        self._followed = run

    def end_unless_held(self, error: BaseException | None, status: int) -> None:
        """The HTTP exchange is over: the end of the request, unless its work goes on (`hold`)."""
        if not self.held:
            self.end(error, status)

    def fail(self, error: BaseException) -> None:
        """The request failed with `error` (a cancel is the client gone, not a failure)."""
        if self.status is None:
            self.status = status_of(error)
        if not isinstance(error, asyncio.CancelledError):
            self.failed = True

    # -- gates ------------------------------------------------------------------------------
    def check_engine(self) -> None:
        self.scopes.check_engine()

    # -- engine work --------------------------------------------------------------------------
    def submit(self, consumer: GenerationConsumer, items: Sequence[EngineWork], *, id_prefix: str,
               external_id: str | Sequence[str], priority: int = 0, cache_salt: str | None = None,
               lora_request: list[Any] | None = None, multimodal: Any = None,
               requested_max_tokens: int | None = None, multimodal_per_item: Sequence[Any] | None = None,
               ) -> Submission:
        """One engine request per item, all sent or none: admitted against the queue bounds,
        the tenant's tokens reserved, per-request metrics started. `requested_max_tokens`:
        the client's own `max_tokens` (None: not given), for a named key's limit.
        `external_id`: the client's id of every item, or one per item."""
        scopes = self.scopes
        admission = scopes.admission
        if admission is not None:
            admission.admit(len(items))
        lease = self.lease
        if lease is not None:
            prompt_tokens = sum({id(p): len(p) for _, p, _, _ in items}.values())
            lease.reserve([s for _, _, s, _ in items], requested_max_tokens, prompt_tokens)
        caller = self.caller
        sub = Submission(scopes.engine, scopes.worker_index, consumer, id_prefix)
        metrics = scopes.metrics
        for i, (index, prompt_ids, sampling, own) in enumerate(items):
            ext = external_id if isinstance(external_id, str) else external_id[i]
            gen = sub.add(index, prompt_ids, sampling, external_id=ext, priority=priority,
                          cache_salt=cache_salt, trace_headers=caller.trace_headers, lora_request=lora_request,
                          multimodal=multimodal_per_item[i] if multimodal_per_item is not None else multimodal,
                          data_parallel_rank=caller.data_parallel_rank, consumer=own)
            gen.metrics = metrics.start_request(arrival=self.arrival)
        try:
            sub.submit()
        except EngineDeadError as e:
            raise APIError(503, f"The engine is not available: {e}") from None
        self.generations.extend(sub.requests)
        self._track(sub)
        return sub

    def submit_steps(self, sub: Submission) -> None:
        """One step of a beam search: its engine requests sent and counted in the queue bounds
        (the tenant's tokens are reserved for the whole search, `reserve_tokens`); aborted
        with the scope if they are still running."""
        self._stamp(sub.requests)
        sub.submit()
        if not self._steps:
            self._steps = []
        self._steps.append(sub)
        self._track(sub)

    def submit_pooling(self, batch: PoolingBatch) -> None:
        """A pooling request's engine requests, all sent or none (their prompts reserved)."""
        if self.scopes.admission is not None:
            self.scopes.admission.admit(len(batch.requests))
        if self.lease is not None:
            self.lease.reserve_tokens(batch.num_prompt_tokens)
        self._stamp(batch.requests)
        try:
            batch.submit()
        except EngineDeadError as e:
            raise APIError(503, f"The engine is not available: {e}") from None
        if not self._pooling:
            self._pooling = []
        self._pooling.append(batch)

    def _track(self, sub: Submission) -> None:
        """The sent engine requests still running count in the queue bounds until they end."""
        admission = self.scopes.admission
        if admission is not None:
            for _, gen in sub.requests:
                if not gen.finished:
                    admission.track(gen)

    def _stamp(self, requests: list[tuple[Any, Any]]) -> None:
        """The caller's trace headers and engine choice on engine requests built elsewhere."""
        caller = self.caller
        for req, _ in requests:
            req.trace_headers = caller.trace_headers
            req.data_parallel_rank = caller.data_parallel_rank

    def reserve_tokens(self, tokens: int) -> None:
        """Tokens the request may use that no `submit` reserves (beam search: the prompts and
        every beam's `max_tokens`)."""
        if self.lease is not None:
            self.lease.reserve_tokens(tokens)

    def adopt(self, gen: Generation, prompt_ids: list[int], max_tokens: int | None) -> None:
        """A finished result that stands for an engine request (a beam of a beam search): its
        tokens are settled and its metrics recorded as a generation's."""
        gen.metrics = self.scopes.metrics.start_request(arrival=self.arrival)
        self.generations.append((_Adopted(prompt_ids, {"max_tokens": max_tokens} if max_tokens else {}), gen))

    @property
    def max_tokens_cap(self) -> int | None:
        """The tenant's `max_tokens` limit, where the style applies it itself (beam search)."""
        return self.lease.quota.limits.max_tokens if self.lease is not None else None

    # -- the end ------------------------------------------------------------------------------
    def end(self, error: BaseException | None = None, status: int | None = None) -> None:
        """Once, whatever ended the request: abort what still runs in the engine, then the
        request's metrics, its tokens settled, its span and log line, the style's release,
        and the in-flight count and the tenant's slot given back."""
        if self.ended:
            return
        self.ended = True
        if status is not None:
            self.status = status
        if error is not None:
            self.fail(error)
        followed = self._followed
        if not self.failed and followed is not None and getattr(followed, "error", None) is not None:
            self.failed = True
        try:
            self._abort_unfinished()
            self._record()
            for callback in self._on_end:
                callback()
        finally:
            if self.lease is not None:
                self.lease.release()
            self.scopes.in_flight.finished()

    def _abort_unfinished(self) -> None:
        for _, gen in chain(self.generations, *(sub.requests for sub in self._steps)):
            gen.cancel()  # (a no-op once finished)
            if gen.admission is not None:  # never left counted
                gen.admission.on_end(gen)
        for batch in self._pooling:
            batch.cancel()  # (nothing to abort once every output arrived)

    def _record(self) -> None:
        failed = self.failed
        gens = self.generations
        n = len(gens)
        for i, (req, gen) in enumerate(gens):
            m = gen.metrics
            if m is not None:
                m.on_finished("error" if failed else (gen.finish_reason or "abort"), gen.num_prompt_tokens,
                              gen.num_output_tokens, max_tokens=req.sampling_params.get("max_tokens"),
                              n=n if i == 0 else None, timing=gen.timing)
        metrics = self.scopes.metrics
        for batch in self._pooling:
            for req, item in batch.requests:
                metrics.start_request(arrival=self.arrival).on_finished(
                    "error" if failed or item.output is None else "stop", item.num_prompt_tokens, 0)
        scopes = self.scopes
        if self.lease is None and scopes.tracer is None and not scopes.log_requests:
            return
        # The request's tokens: each prompt once (the choices of one prompt share it), and
        # every choice's output.
        prompt = sum({id(req.prompt_token_ids): gen.num_prompt_tokens for req, gen in gens}.values())
        prompt += sum(item.num_prompt_tokens for batch in self._pooling for _, item in batch.requests)
        completion = sum(gen.num_output_tokens for _, gen in gens)
        if self.lease is not None:
            self.lease.settle(prompt, completion)
        tracer = self.scopes.tracer
        if tracer is not None and (self.generations or self._pooling):
            try:
                self._record_span(tracer, prompt, completion)
            except Exception:  # noqa: BLE001 - tracing never fails a request
                log.exception("could not record the request's span")
        if self.scopes.log_requests:
            self._log_line(prompt, completion)

    def _record_span(self, tracer: Any, prompt: int, completion: int) -> None:
        from vllm_pyfrontend.tracing import request_attributes

        now = time.monotonic()
        gens = self.generations
        firsts = [m.first_token_at for _, g in gens if (m := g.metrics) is not None and m.first_token_at is not None]
        sampling = (gens[0][0].sampling_params if gens else None) or {}
        e2e = now - self.arrival
        start_ns = int((time.time() - e2e) * 1e9)  # (the arrival on the wall clock)
        attrs = request_attributes(
            request_id=self.response_id or self.caller.request_id or "", model=self.model or "",
            prompt_tokens=prompt, completion_tokens=completion, n=len(gens) or len(self._pooling),
            ttft_s=(min(firsts) - self.arrival) if firsts else None, e2e_s=e2e,
            queue_s=max((q for _, g in gens if (q := g.queue_time) is not None), default=None), sampling=sampling,
        )
        engines, _ = self.engines()
        if engines:  # the engines it ran on: a disaggregated request's prefill and decode engines
            attrs["vllm.engines"] = engines
        events = [("request.migrated", int(at * 1e9), {"choice": g.index, "from_engine": -1 if e is None else e,
                                                      "reason": reason})
                  for _, g in gens if g.moves for e, reason, at in g.moves]
        tracer.record(trace_headers=self.caller.trace_headers, start_ns=start_ns, end_ns=start_ns + int(e2e * 1e9),
                      attributes=attrs, events=events)

    def engines(self) -> tuple[list[int], int]:
        """The engines the request ran on, and how often one of its engine requests moved."""
        engines: list[int] = []
        moves = 0
        for _, gen in self.generations:
            if gen.engines:
                engines += [e for e in gen.engines if e not in engines]
            if gen.moves:
                moves += len(gen.moves)
        return engines, moves

    def _log_line(self, prompt: int, completion: int) -> None:
        """One structured (JSON) line per request, never its body or its key."""
        caller = self.caller
        fields = caller.http
        if fields is None:  # (a batch line, a gRPC call)
            max_log_len = self.scopes.max_log_len
            fields = {"request_id": caller.request_id,
                      "path": caller.path if max_log_len is None else caller.path[:max_log_len]}
        record: dict[str, Any] = {"event": "request", **fields,
                                  "status": self.status if self.status is not None else 200,
                                  "duration_ms": round((time.monotonic() - self.arrival) * 1000.0, 3),
                                  "style": self.style}
        if caller.tenant.name:
            record["tenant"] = caller.tenant.name
        if self.response_id is not None:
            record["response_id"] = self.response_id
        if self.generations or self._pooling:
            record["prompt_tokens"] = prompt
            record["completion_tokens"] = completion
        if caller.trace_headers is not None:
            record["traceparent"] = caller.trace_headers.get("traceparent")
        engines, moves = self.engines()
        if engines:  # several when it moved (engine/migration.py)
            record["engines"] = engines
            if moves:
                record["migrations"] = moves
        if self.held:
            record["background"] = True
        request_log.info("%s", msgspec.json.encode(record).decode())


class HttpScope:
    """The scope of an HTTP route's work: opened before the body is read, ended when the
    handler returns or raises (its status taken from what it raised), unless held."""

    __slots__ = ("scopes", "request", "style", "scope")

    def __init__(self, scopes: RequestScopes, request: web.Request, style: str):
        self.scopes = scopes
        self.request = request
        self.style = style
        self.scope: RequestScope | None = None

    async def __aenter__(self) -> RequestScope:
        self.scope = scope = self.scopes.open_http(self.request, self.style)
        return scope

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        assert self.scope is not None
        self.scope.end_unless_held(exc, status_of(exc))
        return False
