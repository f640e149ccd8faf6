"""Prefill/decode disaggregation: a request's prompt computed on a prefill engine, its tokens
generated on a decode engine, with the KV cache passed between them by the engines' own KV
connector (vLLM's `--kv-transfer-config`: NixlConnector, ExampleConnector, ...).

The engines of one client are split by role (`Roles`: the first data parallel ranks prefill,
the rest decode). A generation request whose prompt is long enough (`min_prompt_tokens`) runs
in two phases, each one ordinary engine request under the same request id:

1. **prefill**: a copy of it that asks for one token and for remote decode
   (`extra_args.kv_transfer_params = {"do_remote_decode": True, ...}`, as vLLM's connectors
   expect) goes to a prefill engine, chosen by the router's policy among the prefill engines
   (prefix-aware when the engines publish KV events: the prompt goes where its blocks are).
   Its output goes to a `PrefillSink`, never to the client.
2. **decode**: when the prefill engine's final output arrives, the original request goes to a
   decode engine (the least loaded), carrying the `kv_transfer_params` the prefill engine
   returned (where to read the prompt's KV from; a connector that shares KV by prompt, like
   ExampleConnector, returns none and the decode engine finds it anyway). From then on its
   outputs go straight to the client's sink: the client sees one ordinary request, usage,
   logprobs, stop strings and parsing unchanged.

Any other request (a short prompt, a pooling or multimodal request, one pinned to a rank, one
asking for prompt logprobs or for a single token) goes to a decode engine whole.

Failures end well: a prefill phase whose engine goes down moves to another prefill engine like
any request (engine/migration.py; the router keeps it in the prefill pool) or, when it cannot
move, runs whole on a decode engine, as does a prefill that ends with an error or abort. A
decode engine that cannot load the KV recomputes it there (`kv_load_failure_policy` "recompute"),
or ends the request with an error before its first token ("fail", vLLM's default): it then runs
again whole on a decode engine. A request moved off a decode engine continues without transfer
parameters (the prefill engine's blocks may be gone): its new engine computes the prompt.

What the two phases take is reported to the client's observer: the prefill phase (sent to the
prefill engine until its output is here) and the decode phase's first token (sent to the decode
engine until its first token: the KV transfer and the first step), by engine, and how each
request went (`two_phase`, `short`: whole on a decode engine, `fallback`: whole on a decode
engine after its prefill failed, `recomputed`: whole again after its decode engine could not load
the KV).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, Callable, Iterable

from .types import FINISH_ERROR, FINISH_LENGTH, FINISH_STOP, EngineOutput, EngineRequest, Failure, FailureKind, OutputSink

log = logging.getLogger(__name__)

ROLE_PREFILL = "prefill"
ROLE_DECODE = "decode"

# What a prefill request asks its engine's connector for, in the form vLLM's proxies send it.
REMOTE_DECODE = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                 "remote_block_ids": None, "remote_host": None, "remote_port": None}

PATH_TWO_PHASE = "two_phase"
PATH_SHORT = "short"
PATH_FALLBACK = "fallback"
PATH_RECOMPUTED = "recomputed"


class Roles:
    """Which engines prefill and which decode (each list non-empty, together the client's)."""

    __slots__ = ("prefill", "decode", "_of")

    def __init__(self, prefill: Iterable[int], decode: Iterable[int]):
        self.prefill = sorted(prefill)
        self.decode = sorted(decode)
        if not self.prefill or not self.decode:
            raise ValueError("disaggregated serving needs at least one prefill and one decode engine")
        if set(self.prefill) & set(self.decode):
            raise ValueError("an engine cannot be both a prefill and a decode engine")
        self._of = {e: ROLE_PREFILL for e in self.prefill} | {e: ROLE_DECODE for e in self.decode}

    @classmethod
    def first_prefill(cls, engine_indices: list[int], count: int) -> "Roles":
        """The first `count` engines (by rank) prefill, the others decode."""
        ranks = sorted(engine_indices)
        if not 0 < count < len(ranks):
            raise ValueError(f"--prefill-engines must be between 1 and {len(ranks) - 1} "
                             f"(the data parallel size less one), got {count}")
        return cls(ranks[:count], ranks[count:])

    def role(self, engine: int) -> str:
        return self._of.get(engine, ROLE_DECODE)

    def pool(self, req: EngineRequest) -> list[int]:
        """The engines that may take `req`: the prefill engines for a prefill phase."""
        return self.prefill if is_prefill_phase(req) else self.decode

    def other(self, pool: list[int]) -> list[int]:
        return self.decode if pool is self.prefill else self.prefill


def _asks(req: EngineRequest, flag: str) -> bool:
    """`req`'s kv_transfer_params (in its sampling params' extra_args) set `flag` true."""
    sp = req.sampling_params
    extra = sp.get("extra_args") if sp else None
    kv = extra.get("kv_transfer_params") if extra else None
    return type(kv) is dict and kv.get(flag) is True


def is_prefill_phase(req: EngineRequest) -> bool:
    """`req` asks its engine to compute the prompt for a remote decode."""
    return _asks(req, "do_remote_decode")


def has_remote_prefill(req: EngineRequest) -> bool:
    """`req` asks its engine to read the prompt's KV computed elsewhere."""
    return _asks(req, "do_remote_prefill")


def with_kv_transfer(req: EngineRequest, params: dict[str, Any] | None, request_id: str) -> EngineRequest:
    """`req` under `request_id`, carrying `params` as its kv_transfer_params (None: none)."""
    sp = dict(req.sampling_params or {})
    extra = dict(sp.get("extra_args") or {})
    extra.pop("kv_transfer_params", None)
    if params is not None:
        extra["kv_transfer_params"] = params
    sp["extra_args"] = extra or None
    return replace(req, request_id=request_id, sampling_params=sp)


def prefill_request(req: EngineRequest) -> EngineRequest:
    """The prefill phase of `req`: one token, nothing the client reads, remote decode asked."""
    out = with_kv_transfer(req, dict(REMOTE_DECODE), req.request_id)
    sp = out.sampling_params
    sp["max_tokens"] = 1
    sp["min_tokens"] = 0
    for name in ("logprobs", "prompt_logprobs", "structured_outputs", "guided_decoding", "logits_processors"):
        if sp.get(name) is not None:
            sp[name] = None
    return out


class Disaggregation:
    """Splits the requests of one engine client into phases (see the module's docstring).

    `send(req, sink)` tracks and queues an engine request on an engine the router picks (by the
    request's phase) and returns the engine; `live()` the engines taking requests now;
    `observer` hears the phase times and paths (`observe_disaggregation(path)`,
    `observe_prefill_phase(engine, seconds)`, `observe_decode_first_token(engine, seconds)`)."""

    def __init__(self, roles: Roles, min_prompt_tokens: int, send: Callable[[EngineRequest, OutputSink], int],
                 live: Callable[[], list[int]], sinks: dict[str, OutputSink], observer: Any = None):
        self.roles = roles
        self.min_prompt_tokens = max(0, min_prompt_tokens)
        self._send = send
        self._live = live
        self._sinks = sinks  # the client's in-flight table (rid -> sink)
        self._observer = observer

    def split(self, req: EngineRequest, sink: OutputSink) -> tuple[EngineRequest, OutputSink]:
        """What to send now for `req`: its prefill phase and the sink that starts its decode
        phase, or `req` and `sink` themselves (it runs whole on a decode engine)."""
        sp = req.sampling_params
        if (sp is None or req.pooling_params is not None or req.mm_features or req.data_parallel_rank is not None
                or len(req.prompt_token_ids) < self.min_prompt_tokens or sp.get("prompt_logprobs") is not None
                or sp.get("max_tokens") == 1 or "kv_transfer_params" in (sp.get("extra_args") or ())):
            self._count(PATH_SHORT)
            return req, sink
        if not self._prefill_up():
            self._count(PATH_FALLBACK)
            return req, sink
        return prefill_request(req), PrefillSink(self, req, sink)

    # -- the phases' ends (PrefillSink) ------------------------------------------------
    def prefilled(self, phase: "PrefillSink", params: dict[str, Any] | None) -> None:
        """The prefill engine computed the prompt: the decode phase goes out."""
        now = time.monotonic()
        self._observe("observe_prefill_phase", phase.engine, now - phase.sent_at)
        self._count(PATH_TWO_PHASE)
        decode = with_kv_transfer(phase.req, params, phase.request_id)
        self._dispatch(decode, FirstToken(self, phase.sink, decode, now))

    def prefill_failed(self, phase: "PrefillSink", why: str) -> None:
        """The prefill phase ended without KV to pass on: the request runs whole on a decode
        engine."""
        log.info("request %s: prefill on engine %s failed (%s); it runs whole on a decode engine",
                 phase.request_id, phase.engine, why)
        self._count(PATH_FALLBACK)
        self._dispatch(with_kv_transfer(phase.req, None, phase.request_id), phase.sink)

    def load_failed(self, probe: "FirstToken", error: str | None) -> None:
        """The decode engine ended the request before its first token (a KV load that failed):
        it runs whole on a decode engine, which computes the prompt."""
        log.info("request %s: engine %s could not load its KV (%s); it runs whole",
                 probe.request_id, probe.engine, error or "error")
        self._count(PATH_RECOMPUTED)
        self._dispatch(with_kv_transfer(probe.req, None, probe.request_id), probe.sink)

    def moving(self, req: EngineRequest, phase: "PrefillSink") -> tuple[EngineRequest, OutputSink]:
        """A prefill phase moved off an engine that went down (engine/migration.py): to another
        prefill engine when one is up, else whole to a decode engine."""
        if self._prefill_up():
            return req, phase
        self._count(PATH_FALLBACK)
        return with_kv_transfer(phase.req, None, req.request_id), phase.sink

    def first_token(self, probe: "FirstToken") -> None:
        """The decode phase's first output is here: hand the request's outputs to its own sink
        from now on, and report the wait."""
        if self._sinks.get(probe.request_id) is probe:
            self._sinks[probe.request_id] = probe.sink
        self._observe("observe_decode_first_token", probe.engine, time.monotonic() - probe.sent_at)

    def _dispatch(self, req: EngineRequest, sink: OutputSink) -> None:
        """Send the next phase (or the whole request) to `sink`; the sink hears which engine
        took it (one that waits for an engine hears it when sent), or fails when none can."""
        try:
            engine = self._send(req, sink)
        except Exception as e:  # noqa: BLE001 - no engine takes it (all down, the client closing)
            _fail(sink, e)
            return
        if engine >= 0:
            _sent(sink, engine)

    def _prefill_up(self) -> bool:
        live = self._live()
        return any(e in live for e in self.roles.prefill)

    def _count(self, path: str) -> None:
        self._observe("observe_disaggregation", path)

    def _observe(self, name: str, *args: Any) -> None:
        method = getattr(self._observer, name, None) if self._observer is not None else None
        if method is not None:
            try:
                method(*args)
            except Exception:  # metrics never stop the output path
                log.exception("disaggregation metrics failed")


class _Phase:
    """What both phases' sinks are: the client's sink (`sink`) under the request id it is in
    flight with now (`request_id`), on `engine` since `sent_at`. A move to another engine is
    passed on to the client's sink, so the client's aborts name the new id."""

    __slots__ = ("_pd", "sink", "req", "request_id", "engine", "sent_at")

    def __init__(self, pd: Disaggregation, sink: OutputSink, req: EngineRequest, sent_at: float):
        self._pd = pd
        self.sink = sink
        self.req = req
        self.request_id = req.request_id
        self.engine: int | None = None
        self.sent_at = sent_at

    def on_moved(self, request_id: str, engine: int | None, reason: str) -> None:
        self.request_id = request_id
        on_moved = getattr(self.sink, "on_moved", None)
        if on_moved is not None:
            on_moved(request_id, engine, reason)

    def on_sent(self, engine: int) -> None:
        """Sent to `engine` (again, after a move or a wait): the phase's time starts there."""
        self.engine = engine
        self.sent_at = time.monotonic()
        _sent(self.sink, engine)


class PrefillSink(_Phase):
    """The sink of a prefill phase: its final output starts the decode phase (or, when it
    brings no usable KV, the whole request on a decode engine). It stands for the client's sink
    while the prefill phase is in flight: moves to another engine and the engines it is sent to
    are passed on to it, so the client's aborts name the right request id."""

    __slots__ = ()

    def __init__(self, pd: Disaggregation, req: EngineRequest, sink: OutputSink):
        super().__init__(pd, sink, req, time.monotonic())  # (`req`: the client's, sent whole in the decode phase)

    # Nothing delivered yet: a move continues the prefill phase from its start.
    output_ids: list[int] = []
    prompt_logprobs = None

    @property
    def moves(self):
        return getattr(self.sink, "moves", None)

    def on_tokens(self, token_ids: list[int]) -> None:
        pass  # the prefill phase's token is not the client's

    def on_output(self, output) -> None:
        if output.finish_reason is None:
            return
        if output.finish_reason in (FINISH_STOP, FINISH_LENGTH) and output.error is None:
            self._pd.prefilled(self, output.kv_transfer_params)
        else:
            self._pd.prefill_failed(self, output.error or f"finish reason {output.finish_reason}")

    def on_failure(self, failure: Failure) -> None:
        if failure.kind in (FailureKind.INTERNAL, FailureKind.SHUTTING_DOWN):
            _fail(self.sink, failure)
            return
        self._pd.prefill_failed(self, failure.message)


class FirstToken(_Phase):
    """The client's sink for the decode phase (`req`, as sent) until its first output: it times
    the wait, then puts the client's sink itself in the in-flight table (the per-token path
    stays direct)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:  # output_ids, moves, ...: the client sink's
        return getattr(self.sink, name)

    def on_tokens(self, token_ids: list[int]) -> None:
        self._pd.first_token(self)
        on_tokens = getattr(self.sink, "on_tokens", None)
        if on_tokens is None:  # (it is optional)
            self.sink.on_output(EngineOutput(self.request_id, token_ids))
        else:
            on_tokens(token_ids)

    def on_output(self, output) -> None:
        if output.finish_reason == FINISH_ERROR and not output.new_token_ids:
            # The decode engine could not load the prompt's KV (its kv_load_failure_policy
            # "fail", vLLM's default): the request runs again whole, computing its prompt.
            self._pd.load_failed(self, output.error)
            return
        self._pd.first_token(self)
        self.sink.on_output(output)

    def on_failure(self, failure: Failure) -> None:
        self.sink.on_failure(failure)


def client_sink(sink: OutputSink) -> OutputSink:
    """The client's own sink behind a phase's (`PrefillSink`, `FirstToken`), or `sink`."""
    return sink.sink if type(sink) is PrefillSink or type(sink) is FirstToken else sink


def _sent(sink: OutputSink, engine: int) -> None:
    on_sent = getattr(sink, "on_sent", None)
    if on_sent is not None:
        on_sent(engine)


def _fail(sink: OutputSink, e: Exception | Failure) -> None:
    failure = e if isinstance(e, Failure) else getattr(e, "failure", None)
    if failure is None:
        failure = Failure(FailureKind.INTERNAL, f"The request could not be sent: {e}")
    try:
        sink.on_failure(failure)
    except Exception:
        log.exception("output sink failed in on_failure")
