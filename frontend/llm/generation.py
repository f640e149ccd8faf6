"""One engine request seen from above: token deltas in, finish state tracked.

A `Generation` is the `OutputSink` the engine client pushes outputs into. It keeps the counts
usage and admission need and the finish state, and forwards each step synchronously to its
consumer (the text/chat/server pipeline of one choice: `server.request_pipeline.ChoiceStep`). Finishing early (a stop string matched above) aborts the engine
request; the engine sends nothing back for a client abort, so the finish is local.
"""

from __future__ import annotations

import time
from typing import Protocol

from vllm_pyfrontend.engine.types import (
    FINISH_ABORT,
    FINISH_ERROR,
    FINISH_REASON_NAMES,
    EngineOutput,
    Failure,
    FailureKind,
    Logprobs,
)
from vllm_pyfrontend.engine.delivery import OutputClock
from vllm_pyfrontend.metrics import EngineTiming


class GenerationConsumer(Protocol):
    """Hears every step of its generations: `on_delta` for each output (a running step with
    nothing but new token ids is `on_delta(gen, token_ids, None, None, None)`, the per-token
    path), `on_error` for a failure."""

    def on_delta(
        self,
        gen: "Generation",
        token_ids: list[int],
        logprobs: Logprobs | None,
        finish_reason: str | None,
        stop_reason: int | str | None,
    ) -> None: ...

    def on_error(self, gen: "Generation", failure: Failure) -> None: ...


class DeltaConsumer:
    """Base of a GenerationConsumer (every step comes to its `on_delta`)."""

    __slots__ = ()


class _Ended:
    """The consumer of a generation whose request is over (`Generation.detach`): hears nothing."""

    __slots__ = ()

    def on_delta(self, gen, token_ids, logprobs, finish_reason, stop_reason) -> None:
        pass

    def on_error(self, gen, failure) -> None:
        pass


ENDED: GenerationConsumer = _Ended()


class EngineSubmitter(Protocol):
    def abort(self, request_ids) -> None: ...


class Generation:
    __slots__ = (
        "request_id",
        "index",
        "consumer",
        "client",
        "num_prompt_tokens",
        "num_output_tokens",
        "num_cached_tokens",
        "num_cache_creation_tokens",
        "finished",
        "finish_reason",
        "stop_reason",
        "admission",
        "metrics",
        "queue_time",
        "timing",
        "prompt_logprobs",
        "output_ids",
        "moves",
        "engines",
        "clock",
    )

    def __init__(
        self,
        request_id: str,
        index: int,
        consumer: GenerationConsumer,
        client: EngineSubmitter,
        num_prompt_tokens: int,
        clock: OutputClock | None = None,
    ):
        self.request_id = request_id
        self.index = index
        self.consumer = consumer
        self.client = client
        # The output clock of the engine client that delivers to this generation
        # (`EngineClient.clock`): when the output being delivered arrived, read by its consumer
        # for inter-token latency. A generation no client feeds gets one at rest.
        self.clock = clock if clock is not None else OutputClock()
        self.num_prompt_tokens = num_prompt_tokens
        self.num_output_tokens = 0
        self.num_cached_tokens: int | None = None
        self.num_cache_creation_tokens: int | None = None  # prompt tokens this request wrote to the prefix cache
        self.finished = False
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        # Admission control's counts (serving/admission.py), only with a queue bound set.
        self.admission = None
        # Its per-request metrics (frontend/metrics RequestMetrics), started by the request's
        # scope when it is sent (serving/scope.py); None: not recorded.
        self.metrics = None
        self.queue_time: float | None = None  # the engine's QUEUED -> SCHEDULED (seconds)
        # The engine's events and step times of this request (vLLM's request phases), from its
        # outputs decoded in full (they carry `engine_time`); None until the first of them.
        self.timing: EngineTiming | None = None
        # Prompt logprobs (sampling `prompt_logprobs`): the rows of every chunk so far.
        self.prompt_logprobs: Logprobs | None = None
        # The token ids delivered so far, kept when the request may move to another engine
        # (engine/migration.py: its continuation is the prompt followed by these); None: not kept.
        self.output_ids: list[int] | None = None
        # Each move to another engine: (engine left, reason, time.time()); None: never moved.
        self.moves: list[tuple[int | None, str, float]] | None = None
        # The engines it was sent to, in order (None: not known, e.g. waiting for one).
        self.engines: list[int] | None = None

    # -- OutputSink -------------------------------------------------------------------
    def on_output(self, output: EngineOutput) -> None:
        if self.finished:
            return
        if self.admission is not None:
            self.admission.on_output(self)
        if output.queue_time is not None and self.queue_time is None:
            self.queue_time = output.queue_time
        at = output.engine_time
        if at is not None:
            self._timed(output, at)
        if output.num_cached_tokens is not None:
            self.num_cached_tokens = output.num_cached_tokens
            self.num_cache_creation_tokens = output.num_cache_creation_tokens
        if output.new_prompt_logprobs is not None:
            self._add_prompt_logprobs(output.new_prompt_logprobs)
        self.num_output_tokens += len(output.new_token_ids)
        kept = self.output_ids
        if kept is not None:
            kept += output.new_token_ids
        code = output.finish_reason
        if code == FINISH_ERROR:
            self._finish("error", None)
            message = output.error or "The engine failed this request."
            if output.mm_cache_miss_hashes:
                # A multimodal item sent by hash only that the engine's cache no longer holds:
                # vLLM answers a generation request with its generic GenerationError (500
                # "Internal server error"; its retryable "multimodal_cache_miss" RequestError is
                # for pooling requests only). The engine client has dropped the hashes from the
                # sender cache already, so the client's retry sends the items in full.
                message = "Internal server error"
            self.consumer.on_error(self, Failure(FailureKind.REQUEST_FAILED, message))
            return
        finish = None if code is None else FINISH_REASON_NAMES.get(code, "stop")
        if finish is not None:
            self._finish(finish, output.stop_reason)
        self.consumer.on_delta(self, output.new_token_ids, output.new_logprobs, finish, output.stop_reason)

    def on_tokens(self, token_ids: list[int]) -> None:
        """`on_output` of a running output with nothing but new token ids (the per-token path):
        the same accounting, and the step to the consumer without an EngineOutput."""
        if self.finished:
            return
        if self.admission is not None:
            self.admission.on_output(self)
        self.num_output_tokens += len(token_ids)
        kept = self.output_ids
        if kept is not None:
            kept += token_ids
        self.consumer.on_delta(self, token_ids, None, None, None)

    def _timed(self, output: EngineOutput, at: float) -> None:
        """An output decoded in full, sent by the engine at `at` (its clock): the first and the
        last output of a request always are (prefill stats, finish), and so is any carrying
        events. vLLM's `RequestStateStats`, kept the same way."""
        t = self.timing
        if t is None:
            t = self.timing = EngineTiming()
        if output.scheduled_at is not None and t.scheduled_at is None:
            t.scheduled_at = output.scheduled_at
            t.queue_time = output.queue_time
        if t.first_token_at is None:
            t.first_token_at = at
        t.last_token_at = at
        if output.preemptions:
            t.preemptions += output.preemptions
        if output.finish_reason is not None:
            t.finished = True

    def on_moved(self, request_id: str, engine: int | None, reason: str) -> None:
        """The engine client moved this request off `engine` (it went down) under a new engine
        request id; aborts from here on name that one."""
        if self.admission is not None:
            self.admission.on_output(self)  # (its prefill count is keyed by the old id)
        self.request_id = request_id
        self.timing = None  # another engine's clock: its phases start over there
        moves = self.moves
        if moves is None:
            moves = self.moves = []
        moves.append((engine, reason, time.time()))

    def on_sent(self, engine: int) -> None:
        """The engine client sent it (again, after a move or a wait) to `engine`."""
        engines = self.engines
        if engines is None:
            self.engines = [engine]
        else:
            engines.append(engine)

    def _add_prompt_logprobs(self, rows: Logprobs) -> None:
        """Chunked prefill sends the prompt's rows in pieces, in order."""
        have = self.prompt_logprobs
        if have is None:
            self.prompt_logprobs = Logprobs(list(rows.token_ids), list(rows.logprobs), list(rows.sampled_ranks))
        else:
            have.token_ids.extend(rows.token_ids)
            have.logprobs.extend(rows.logprobs)
            have.sampled_ranks.extend(rows.sampled_ranks)

    def on_failure(self, failure: Failure) -> None:
        if self.finished:
            if failure.kind is not FailureKind.INTERNAL:
                return
            # The pipeline raised on this request's final output: its consumer has not ended
            # the request yet and must hear of it (else the client waits forever).
        else:
            self._finish("error", None)
        self.consumer.on_error(self, failure)

    # -- control from above ------------------------------------------------------------
    def stop_early(self, finish_reason: str, stop_reason: int | str | None, unused_tokens: int = 0) -> None:
        """Finish now (stop string matched): abort the engine request. `unused_tokens`: tokens
        of the last step after the one that completed the stop string (several tokens per
        step), which are not part of the output nor of its usage (vLLM)."""
        self.num_output_tokens -= unused_tokens
        if self.finished:
            return
        t = self.timing
        if t is not None:  # finished here, as vLLM's output processor finishes it: at this step
            if self.clock.engine:
                t.last_token_at = self.clock.engine
            t.finished = True
        self._finish(finish_reason, stop_reason)
        self.client.abort((self.request_id,))

    def cancel(self) -> None:
        """The client went away: abort in the engine, deliver nothing more."""
        if self.finished:
            return
        self._finish(FINISH_REASON_NAMES[FINISH_ABORT], None)
        self.client.abort((self.request_id,))

    def detach(self) -> None:
        """The request is answered: let go of its consumer. The consumer (a RequestRun) holds
        this generation, so the two form a reference cycle that only the cyclic collector
        frees, and with it everything the request built (detokenizer, writer, parsers): under
        1024 streams ~900 ended requests per worker waited for it, ~40% of the worker's
        growth in memory. Outputs that still arrive are dropped (it is finished by then)."""
        self.consumer = ENDED

    def _finish(self, reason: str, stop_reason: int | str | None) -> None:
        self.finished = True
        self.finish_reason = reason
        self.stop_reason = stop_reason
        if self.admission is not None:
            self.admission.on_end(self)
