"""The `VllmEngine` RPCs over this worker's engine client, and the `grpc.health.v1` service.

Generate follows vLLM's servicer (smg-grpc-servicer, what `vllm serve --grpc` runs): with
`stream`, one `chunk` per engine step and choice (the step's new token ids), and when a choice
finishes a `complete` carrying that last step's ids again; without `stream`, one `complete`
per choice with all its ids, once every choice has finished. `finish_reason` is stop | length
| abort; a stop token or stop string is `matched_token_id` / `matched_stop_str`.

Failures: a request this worker must not send (bad field, id out of vocabulary, value out of
range) is INVALID_ARGUMENT and never reaches the engine; no engine available, the worker
draining, or the engine aborting the request on its own (its shutdown aborts what is in flight)
is UNAVAILABLE (the gateway retries those elsewhere; vLLM's servicer answers the last with a
`complete` whose finish_reason is abort, which a gateway passes on as an empty answer); the
engine failing a request is INTERNAL. A cancelled call aborts its engine requests, as an HTTP
client that leaves does; an Abort RPC ends the call's choices with finish_reason abort.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import os
import time
import zipfile
from collections import deque
from datetime import datetime, timezone
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from smg_grpc_proto import vllm_engine_pb2 as pb
from smg_grpc_proto import vllm_engine_pb2_grpc as pb_grpc
from smg_grpc_proto.generated import common_pb2

from vllm_pyfrontend.api.grpc import kv_stream
from vllm_pyfrontend.engine.kv_events import KvEventsConfig
from vllm_pyfrontend.engine.types import Failure, FailureKind, Logprobs
from vllm_pyfrontend.api.grpc.lowering import Lowered, engine_limits, lower_generate
from vllm_pyfrontend.errors import APIError, InvalidRequestError
from vllm_pyfrontend.llm.generation import DeltaConsumer, Generation
from vllm_pyfrontend.serving.scope import Caller, RequestScope
from vllm_pyfrontend.tenants import ANONYMOUS
from vllm_pyfrontend.tenants.quotas import QuotaExceeded
from vllm_pyfrontend.text.text_stream import TextStream

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["VllmEngine"].full_name

# The tokenizer files GetTokenizer bundles (what a gateway needs to build the tokenizer).
_TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json",
    "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model", "tiktoken.model",
    "chat_template.json", "chat_template.jinja",
)  # fmt: skip
_CHUNK = 64 * 1024


_ENGINE_ABORTED = Failure(FailureKind.SHUTTING_DOWN,
                          "The engine aborted the request (it is shutting down or paused); retry it.")


class _Call(DeltaConsumer):
    """The `GenerationConsumer` of one Generate call: engine deltas queued for the handler."""

    __slots__ = ("events", "wake", "texts", "choices_metrics")

    def __init__(self, texts: list[TextStream] | None):
        self.events: deque = deque()
        self.wake = asyncio.Event()
        self.texts = texts  # per choice, only with stop strings (matched here, as vLLM's detokenizer)
        self.choices_metrics: list = []

    def on_delta(self, gen: Generation, token_ids, logprobs, finish_reason, stop_reason) -> None:
        if finish_reason == "abort":
            # The engine's own abort (its shutdown, or a pause with mode=abort): the aborts this
            # worker asks for finish the choice before any later output could reach it. Not a
            # result: a retryable error, so a gateway serves the request elsewhere instead of
            # passing on an empty answer.
            self.on_error(gen, _ENGINE_ABORTED)
            return
        if token_ids:
            m = self.choices_metrics[gen.index]
            if m is not None:
                m.on_output()
        texts = self.texts
        if texts is not None and token_ids:
            _, matched = texts[gen.index].feed(token_ids, finish_reason == "stop")
            if matched is not None:
                gen.stop_early("stop", matched)
                finish_reason, stop_reason = "stop", matched
                kept = texts[gen.index].num_kept
                if kept < len(token_ids):
                    gen.num_output_tokens -= len(token_ids) - kept
                    token_ids = token_ids[:kept]
                    if logprobs is not None:
                        logprobs = logprobs.head(kept)
        self.events.append((gen, token_ids, logprobs, finish_reason, stop_reason))
        self.wake.set()

    def on_error(self, gen: Generation, failure: Failure) -> None:
        self.events.append((gen, None, None, "error", failure))
        self.wake.set()

    def abort(self, gen: Generation) -> None:
        """Abort RPC: finish the choice here (the engine sends nothing back for an abort)."""
        if not gen.finished:
            gen.cancel()
            self.events.append((gen, [], None, "abort", None))
            self.wake.set()


def metadata_of(pairs) -> dict[str, str]:
    """A call's text metadata (binary values left out)."""
    return {k: v for k, v in pairs or () if isinstance(v, str)}


def key_entry(keys: Any, md: dict[str, str]):
    """The (tenant, quota) of the API key a call presents as HTTP does (`authorization: Bearer
    <key>` or `x-api-key` metadata), None when it presents none that is known."""
    return keys.lookup(md.get("authorization"), md.get("x-api-key"))


def _output_logprobs(lp: Logprobs | None, num: int | None) -> pb.OutputLogProbs | None:
    """vLLM's servicer: the sampled token's logprob per position, and the first `num` entries
    of the position's logprob map (the sampled token, then the top-k, without repeats)."""
    if lp is None or not lp.token_ids:
        return None
    out = pb.OutputLogProbs()
    for ids, values in zip(lp.token_ids, lp.logprobs):
        out.token_ids.append(ids[0])
        out.token_logprobs.append(values[0])
        if num:
            top = pb.TopLogProbs()
            seen: set[int] = set()
            for tid, v in zip(ids, values):
                if tid in seen:
                    continue
                seen.add(tid)
                top.token_ids.append(tid)
                top.values.append(v)
                if len(top.token_ids) >= num:
                    break
            out.top_logprobs.append(top)
    return out


def _merge_logprobs(parts: list[Logprobs]) -> Logprobs | None:
    if not parts:
        return None
    return Logprobs([r for p in parts for r in p.token_ids], [r for p in parts for r in p.logprobs],
                    [r for p in parts for r in p.sampled_ranks])


def _status_for(failure: Failure) -> grpc.StatusCode:
    if failure.kind.engine_unavailable:
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


class VllmEngineServicer(pb_grpc.VllmEngineServicer):
    """One per worker. `state` is the worker's ServerState (engine client, tokenizer, limits,
    metrics, in-flight count and drain flag, shared with HTTP)."""

    def __init__(self, state: Any):
        self.state = state
        self.limits = engine_limits(state.limits)
        self.start_time = time.time()
        self.last_receive = 0.0
        self._calls: dict[str, list[tuple[_Call, list[Generation]]]] = {}
        self._tokenizer_zip: tuple[bytes, str] | None = None

    # ------------------------------------------------------------------ Generate
    async def Generate(self, request, context):  # noqa: N802 - the RPC's name
        state = self.state
        self.last_receive = time.time()
        try:
            scope = state.scopes.open(self._caller(context), "grpc")
        except QuotaExceeded as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, e.message)
        error: BaseException | None = None
        try:
            async for response in self._generate(scope, request, context):
                yield response
        except BaseException as e:
            error = e
            raise
        finally:
            scope.end(error)

    def _caller(self, context) -> Caller:
        """The call's tenant (its key was checked by `server.KeyCheck`) and trace headers."""
        md = metadata_of(context.invocation_metadata())
        tenant, quota = ANONYMOUS, None
        keys = self.state.keys
        if keys is not None:
            tenant, quota = key_entry(keys, md) or (ANONYMOUS, None)
        trace = {k: md[k] for k in ("traceparent", "tracestate") if k in md} or None
        return Caller(tenant=tenant, quota=quota, path=f"/{SERVICE_NAME}/Generate",
                      request_id=md.get("x-request-id"), trace_headers=trace)

    async def _generate(self, scope: RequestScope, request, context):
        state = self.state
        if state.draining:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "The server is shutting down.")
        if not state.engine.healthy:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "The engine is not available.")
        try:
            lowered: Lowered = lower_generate(request, self.limits, self._encode)
        except InvalidRequestError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, e.message)
        opts = lowered.opts
        n = len(lowered.samplings)
        texts = None
        if opts.stop:
            texts = [
                TextStream(state.tokenizer.new_detokenizer(
                    lowered.prompt_ids, skip_special_tokens=opts.skip_special_tokens,
                    spaces_between_special_tokens=opts.spaces_between_special_tokens),
                    opts.stop, include_stop_str_in_output=opts.include_stop_str_in_output,
                    min_tokens=opts.min_tokens)
                for _ in range(n)
            ]
        call = _Call(texts)
        external = request.request_id or None
        scope.name(external or "grpc", state.model_names[0])
        requested = request.sampling_params.max_tokens if request.sampling_params.HasField("max_tokens") else None
        try:
            sub = scope.submit(call, [(i, lowered.prompt_ids, s, None) for i, s in enumerate(lowered.samplings)],
                               id_prefix="grpc", external_id=external or "", requested_max_tokens=requested)
        except InvalidRequestError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, e.message)
        except QuotaExceeded as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, e.message)
        except APIError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT if e.status < 500 else grpc.StatusCode.UNAVAILABLE,
                                e.message)
        gens = [gen for _, gen in sub.requests]
        call.choices_metrics = [gen.metrics for gen in gens]
        if external:
            self._calls.setdefault(external, []).append((call, gens))
        error: Failure | None = None
        try:
            async for response in self._responses(call, gens, lowered, bool(request.stream)):
                if isinstance(response, Failure):
                    error = response
                    break
                yield response
        finally:
            if external:
                entries = self._calls.get(external)
                if entries is not None:
                    entries[:] = [e for e in entries if e[0] is not call]
                    if not entries:
                        del self._calls[external]
        if error is not None:
            scope.fail(APIError(503 if error.kind.engine_unavailable else 500, error.message))
            await context.abort(_status_for(error), error.message)

    async def _responses(self, call: _Call, gens: list[Generation], lowered: Lowered, stream: bool):
        num_prompt = len(lowered.prompt_ids)
        num_lp = lowered.logprobs
        want_lp = num_lp is not None
        pending = len(gens)
        done: set[int] = set()
        # Non-streaming: every choice's ids (and logprobs) until all have finished.
        all_ids: list[list[int]] = [[] for _ in gens]
        all_lp: list[list[Logprobs]] = [[] for _ in gens]
        finals: dict[int, tuple[str, Any]] = {}
        while pending:
            if not call.events:
                call.wake.clear()
                await call.wake.wait()
            while call.events:
                gen, ids, lp, finish, stop_reason = call.events.popleft()
                index = gen.index
                if index in done:
                    continue
                if finish == "error":
                    yield stop_reason  # the Failure
                    return
                cached = gen.num_cached_tokens or 0
                if stream:
                    if ids or finish != "abort":  # vLLM: a chunk for every output
                        yield pb.GenerateResponse(chunk=pb.GenerateStreamChunk(
                            token_ids=ids, prompt_tokens=num_prompt, completion_tokens=len(ids),
                            cached_tokens=cached, index=index,
                            output_logprobs=_output_logprobs(lp, num_lp) if want_lp else None,
                        ))
                    if finish is not None:
                        yield _complete(ids, lp if want_lp else None, num_lp, finish, stop_reason,
                                        num_prompt, cached, index)
                else:
                    all_ids[index].extend(ids)
                    if want_lp and lp is not None:
                        all_lp[index].append(lp)
                    if finish is not None:
                        finals[index] = (finish, stop_reason)
                if finish is not None:
                    done.add(index)
                    pending -= 1
        if not stream:
            for gen in gens:
                finish, stop_reason = finals[gen.index]
                yield _complete(all_ids[gen.index], _merge_logprobs(all_lp[gen.index]) if want_lp else None,
                                num_lp, finish, stop_reason, num_prompt, gen.num_cached_tokens or 0, gen.index)

    def _encode(self, text: str) -> list[int]:
        return self.state.tokenizer.encode(text, add_special_tokens=True)

    # ------------------------------------------------------------------ Abort
    async def Abort(self, request, context):  # noqa: N802
        for rid in request.request_ids:
            for call, gens in self._calls.get(rid, ()):
                for gen in gens:
                    call.abort(gen)
        return pb.AbortResponse()

    # ------------------------------------------------------------------ info and health
    async def HealthCheck(self, request, context):  # noqa: N802
        healthy = self.state.engine.healthy
        return pb.HealthCheckResponse(healthy=healthy, message="Health" if healthy else "Engine is not alive")

    async def GetModelInfo(self, request, context):  # noqa: N802
        state = self.state
        config = _read_json(os.path.join(state.config.model, "config.json"))
        text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
        eos = config.get("eos_token_id", text_config.get("eos_token_id"))
        eos_ids = [eos] if isinstance(eos, int) else [e for e in (eos or []) if isinstance(e, int)]
        pad = config.get("pad_token_id")
        bos = config.get("bos_token_id")
        return pb.GetModelInfoResponse(
            model_path=state.config.model,
            is_generation=True,
            max_context_length=state.max_model_len,
            vocab_size=state.limits.vocab_size,
            supports_vision=False,
            served_model_name=state.model_names[0],
            tokenizer_path=state.config.tokenizer or state.config.model,
            model_type=str(config.get("model_type") or ""),
            architectures=[str(a) for a in config.get("architectures") or []],
            eos_token_ids=eos_ids,
            pad_token_id=pad if isinstance(pad, int) else 0,
            bos_token_id=bos if isinstance(bos, int) else 0,
            max_req_input_len=state.max_model_len,
            default_sampling_params_json=json.dumps(state.limits.defaults.sampling),
        )

    async def GetServerInfo(self, request, context):  # noqa: N802
        state = self.state
        infos = state.engine.engine_infos
        max_num_seqs = next((i.max_num_seqs for i in infos if i.max_num_seqs), 0) or 0
        return pb.GetServerInfoResponse(
            active_requests=state.in_flight,
            is_paused=state.draining,
            last_receive_timestamp=self.last_receive,
            uptime_seconds=time.time() - self.start_time,
            server_type="vllm-grpc",
            data_parallel_size=len(state.engine.engine_indices),
            max_num_seqs=max_num_seqs,
        )

    async def GetLoads(self, request, context):  # noqa: N802
        """One entry per engine, from the scheduler stats this worker last received (as /load)."""
        engine = self.state.engine
        stats = engine.scheduler_stats
        infos = {i.engine_index: i for i in engine.engine_infos}
        loads = []
        for idx in engine.engine_indices:
            s = stats.get(idx) or {}
            running = int(s.get("num_running_reqs", 0) or 0)
            waiting = int(s.get("num_waiting_reqs", 0) or 0)
            info = infos.get(idx)
            loads.append(pb.SchedulerLoad(
                dp_rank=idx, num_running_reqs=running, num_waiting_reqs=waiting,
                num_total_reqs=running + waiting, token_usage=float(s.get("kv_cache_usage", 0.0) or 0.0),
                max_running_requests=(info.max_num_seqs or 0) if info is not None else 0,
            ))
        return pb.GetLoadsResponse(timestamp=datetime.now(timezone.utc).isoformat(), version=engine.vllm_version,
                                   dp_rank_count=len(loads), loads=loads)

    async def SubscribeKvEvents(self, request, context):  # noqa: N802
        """Every engine's KV cache events (api/grpc/kv_stream.py), for a gateway's cache-aware
        routing; UNIMPLEMENTED when the engines publish none, as vLLM answers."""
        config = self.state.config
        events = KvEventsConfig.from_engine_args(config.engine_args)
        if events is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED,
                                "KV cache events not enabled. Start the engines with --kv-events-config "
                                '\'{"enable_kv_cache_events": true, "publisher": "zmq"}\'')
        sources = events.sources(config.engine_indices, config.policy.kv_events_host)
        async for batch in kv_stream.relay(sources, request.start_sequence_number, context):
            yield batch

    async def GetTokenizer(self, request, context):  # noqa: N802
        if self._tokenizer_zip is None:
            directory = self.state.config.tokenizer or self.state.config.model
            self._tokenizer_zip = await asyncio.get_running_loop().run_in_executor(None, _zip_tokenizer, directory)
        data, digest = self._tokenizer_zip
        for start in range(0, len(data), _CHUNK):
            last = start + _CHUNK >= len(data)
            yield common_pb2.GetTokenizerChunk(data=data[start:start + _CHUNK], sha256=digest if last else "")


class HealthServicer(health_pb2_grpc.HealthServicer):
    """`grpc.health.v1`: SERVING while the engine takes requests and the worker is not
    draining, for the server ("") and for the VllmEngine service."""

    def __init__(self, state: Any):
        self.state = state

    def _status(self, service: str) -> int:
        if service not in ("", SERVICE_NAME):
            return -1
        state = self.state
        if state.draining or not state.engine.healthy:
            return health_pb2.HealthCheckResponse.NOT_SERVING
        return health_pb2.HealthCheckResponse.SERVING

    async def Check(self, request, context):  # noqa: N802
        status = self._status(request.service)
        if status < 0:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request, context):  # noqa: N802
        last = None
        while True:
            status = self._status(request.service)
            if status < 0:
                status = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
            if status != last:
                last = status
                yield health_pb2.HealthCheckResponse(status=status)
            await asyncio.sleep(1.0)


def _complete(ids, lp, num_lp, finish, stop_reason, num_prompt, cached, index) -> pb.GenerateResponse:
    kwargs: dict[str, Any] = {}
    if isinstance(stop_reason, int):
        kwargs["matched_token_id"] = stop_reason
    elif isinstance(stop_reason, str):
        kwargs["matched_stop_str"] = stop_reason
    return pb.GenerateResponse(complete=pb.GenerateComplete(
        output_ids=ids, finish_reason=finish or "stop", prompt_tokens=num_prompt, completion_tokens=len(ids),
        cached_tokens=cached, index=index, output_logprobs=_output_logprobs(lp, num_lp), **kwargs,
    ))


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _zip_tokenizer(directory: str) -> tuple[bytes, str]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in _TOKENIZER_FILES:
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                zf.write(path, name)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


__all__ = ["VllmEngineServicer", "HealthServicer", "SERVICE_NAME", "FailureKind"]
