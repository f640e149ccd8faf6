"""The one way an engine output reaches its request's sink.

`Delivery.deliver` walks the raw outputs of one engine message, in order; every output that
reaches a sink goes through it:

- the common output, a running request's new token ids and nothing else, goes to
  `sink.on_tokens(ids)` as it is, without an `EngineOutput` being built (the per-token path: no
  call between the loop and the sink);
- any other output is decoded in full (a final one takes its request out of the in-flight
  table first), then goes to `sink.on_output(output)`.

While the output reader works through a backlog it passes a `gathering` dict: the common steps
are then added to their stream's entry instead of being delivered, and come back through the
same loop at the end of the drain (`deliver_gathered`), one stream's steps as one output. A
sink that raises fails its request (`_failed`); an output nobody here waits for is an orphan.

Each engine message delivered (not the gathered replays) is also one engine iteration for
vLLM's `vllm:iteration_tokens_total`: the loop adds up the new token ids and the prompt tokens
the engine computed (`num_computed_tokens`, sent with a request's first output) of the outputs
that reach a sink, and `on_iteration(engine, tokens)` is called once at the message's end.
"""

from __future__ import annotations

import logging
from typing import Callable

from .aborts import Aborts
from .inflight import InFlight, fail_sink
from .sending import Outbox
from .types import EngineOutput, Failure, FailureKind, OutputSink
from .wire import ProtocolError, WireLayout, decode_output, plain_running

log = logging.getLogger(__name__)


class OutputClock:
    """`time.monotonic()` when the engine output batch being delivered now arrived; 0.0 outside
    a delivery. Per-token consumers (ITL metrics) read it instead of the clock: one clock read
    per engine step, not per token, and every output of one step stamped alike.

    One per engine client (`EngineClient.clock`): its output reader and delivery set it, and
    the sinks it delivers to read it (`llm.Generation.clock`, given by whoever creates them).

    A delivery may carry several engine steps of one stream (a backlog drained at once, see
    `OutputReader.drain`): `steps` says how many, `now` is when the first of them arrived and
    `last` when the last did (`last == now` for one step). `engine` is the message's own
    timestamp (`EngineCoreOutputs.timestamp`, the engine's clock), 0.0 for gathered steps."""

    __slots__ = ("now", "last", "steps", "engine")

    def __init__(self) -> None:
        self.now = 0.0
        self.last = 0.0
        self.steps = 1
        self.engine = 0.0


class Delivery:
    """Hands outputs to the sinks of `inflight`, stamped by `clock` (the output reader sets it
    per message). `mark_dead` is called with a message when an output cannot be decoded (its
    request would hang); `on_iteration`, when given, once per engine message with outputs:
    (engine index, tokens of the iteration), as vLLM's IterationStats counts them (the
    client's observer, frontend/metrics); `on_mm_cache_miss`, when set, gets an output's
    mm_cache_miss_hashes (frontend/multimodal's sender cache)."""

    def __init__(self, engine_indices: list[int], inflight: InFlight, outbox: Outbox, aborts: Aborts,
                 mark_dead: Callable[[str], None], clock: OutputClock,
                 on_iteration: Callable[[int, int], None] | None = None):
        self._engines = frozenset(engine_indices)
        self._inflight = inflight
        self._outbox = outbox
        self._aborts = aborts
        self._mark_dead = mark_dead
        self.clock = clock
        self.on_mm_cache_miss: Callable[[list[str]], None] | None = None
        self.on_iteration = on_iteration

    def deliver(self, outputs: list, frames: list | None, layout: WireLayout, engine: int | None,
                gathering: dict[str, list] | None) -> None:
        """Every output of one message (`outputs`, as `wire.decode_message` leaves them; `frames`
        for the out-of-band parts of a full decode) from `engine` (None: steps gathered here).
        Every output decoded in full carries the message's engine timestamp (`clock.engine`)
        on as `EngineOutput.engine_time`.

        `gathering`, during a backlog: rid -> [token ids, steps, first arrival, last arrival],
        where common steps are added instead of delivered. A stream's gathered steps go to
        its sink before anything else of it (its finish, logprobs, an error)."""
        inflight = self._inflight
        sinks = inflight.sinks
        requests = inflight.requests
        plain_tail = layout.plain_tail
        error_index = layout.error_index
        clock = self.clock
        now = clock.now
        engine_time = clock.engine or None
        tokens = 0  # of this iteration (see the module's docstring)
        for o in outputs:
            # The common step, a running request's new token ids and nothing else (`is_plain`,
            # inlined): straight to its sink, without an EngineOutput.
            if type(o) is list and (len(o) == 2 or o[2:] == plain_tail or plain_running(o, error_index)):
                rid = o[0]
                ids = o[1]
                sink = sinks.get(rid)
                if sink is not None:
                    tokens += len(ids)
                    if gathering is not None:  # a backlog: delivered at the drain's end
                        entry = gathering.get(rid)
                        if entry is None:
                            gathering[rid] = [ids, 1, now, now]
                        else:
                            entry[0] += ids
                            entry[1] += 1
                            entry[3] = now
                        continue
                    try:
                        sink.on_tokens(ids)
                    except Exception as e:
                        self._failed(rid, sink, ids, e)
                    continue
                out = EngineOutput(rid, ids)
            else:
                try:
                    out = decode_output(o, frames, layout)
                except ProtocolError as e:
                    self._mark_dead(f"Undecodable message from the engine: {e}")
                    return
                out.engine_time = engine_time
            rid = out.request_id
            if gathering and rid in gathering:  # its steps gathered so far go first
                self.deliver_gathered({rid: gathering.pop(rid)}, layout)
            sink = sinks.get(rid)
            if sink is None:
                self._orphan(engine, out)
                continue
            tokens += len(out.new_token_ids)
            if out.num_computed_tokens:
                tokens += out.num_computed_tokens
            if out.finish_reason is not None:
                del sinks[rid]
                owner = inflight.owner.pop(rid, None)
                if owner is not None:
                    inflight.count[owner] -= 1
                if requests:
                    requests.pop(rid, None)
            if out.mm_cache_miss_hashes is not None and self.on_mm_cache_miss is not None:
                self.on_mm_cache_miss(out.mm_cache_miss_hashes)
            try:
                sink.on_output(out)
            except Exception as e:
                self._failed(rid, sink, out, e)
        if engine is not None and outputs and self.on_iteration is not None:
            try:
                self.on_iteration(engine, tokens)
            except Exception:  # metrics never stop the output path
                log.exception("iteration metrics failed")

    def deliver_gathered(self, gathered: dict[str, list], layout: WireLayout) -> None:
        """Each stream's gathered steps as one common output, through `deliver`: the streams in
        the order they were gathered, one message per run of streams with the same clock (the
        streams of one backlog mostly share it), with the output clock set to that clock for
        the delivery and put back after it. A stream that ended meanwhile (aborted here, its
        engine down) gets nothing more."""
        oc = self.clock
        clock = oc.now, oc.last, oc.steps, oc.engine
        oc.engine = 0.0
        try:
            run: list[list] = []
            steps = first = last = None
            for rid, entry in gathered.items():
                # (The streams of one message share its arrival time, the same float object: the
                # identity test is enough to find a run, and cheaper.)
                if entry[3] is not last or entry[2] is not first or entry[1] != steps:
                    if run:
                        self.deliver(run, None, layout, None, None)
                        run = []
                    _, steps, first, last = entry
                    oc.steps, oc.now, oc.last = steps, first, last
                run.append([rid, entry[0]])
            if run:
                self.deliver(run, None, layout, None, None)
        finally:
            oc.now, oc.last, oc.steps, oc.engine = clock

    def _orphan(self, engine: int | None, out: EngineOutput) -> None:
        """An output nobody here waits for: aborted just now, left by a predecessor, or steps
        gathered for a stream that ended before they were delivered (`engine` None)."""
        rid = out.request_id
        if engine is None or out.finish_reason is not None or self._aborts.was_aborted(rid):
            return
        if engine not in self._engines:
            log.warning("output from unknown engine %d for request %s", engine, rid)
            return
        log.info("aborting orphaned request %s on engine %d", rid, engine)
        self._aborts.queue(engine, rid)
        self._outbox.schedule()

    def _failed(self, rid: str, sink: OutputSink, out: EngineOutput | list[int], exc: Exception) -> None:
        """`sink` raised on `out` (an output, or a common step's token ids). A sink without
        `on_tokens` (it is optional) takes the step as an output; any other error fails the
        request: it is aborted, and the layer above ends it with an error instead of hanging,
        even when the output it failed on was the final one."""
        if type(out) is list:
            out = EngineOutput(rid, out)
            if isinstance(exc, AttributeError) and not hasattr(sink, "on_tokens"):
                try:
                    sink.on_output(out)
                    return
                except Exception as e:
                    exc = e
        log.error("output sink of request %s failed; aborting it", rid, exc_info=exc)
        if out.finish_reason is None:
            self._outbox.abort((rid,))
        fail_sink(sink, Failure(FailureKind.INTERNAL, f"internal error: {exc}"))
