"""Pooling requests (embed, classify, ...): the engine requests of one client request, their
`pooling_params` and their pooled outputs.

A pooling client request with several inputs becomes one engine request per input, sent
together (all or none reach the engine), answered in input order once every one has finished,
and all aborted if the client leaves. The engine sends one final output per request, carrying
the pooled tensor (`engine.types.PooledTensor`, a view into the received frame).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from vllm_pyfrontend.engine.client import EngineClient
from vllm_pyfrontend.engine.types import (
    FINISH_ERROR,
    EngineOutput,
    EngineRequest,
    Failure,
    FailureKind,
    PooledTensor,
)
from vllm_pyfrontend.llm.request_ids import make_request_id
from vllm_pyfrontend.llm.submission import send_all

_OUTPUT_KIND_FINAL_ONLY = 2  # vLLM's RequestOutputKind.FINAL_ONLY, the only kind pooling takes


def pooling_params(
    task: str,
    *,
    use_activation: bool | None = None,
    dimensions: int | None = None,
    extra_kwargs: dict[str, Any] | None = None,
) -> list[Any]:
    """vLLM's `PoolingParams` as the engine decodes it (an `array_like` struct, so a positional
    array: use_activation, dimensions, step_tag_id, returned_token_ids, task,
    requires_token_ids, skip_reading_prefix_cache, late_interaction_params, extra_kwargs,
    output_kind). The values are the ones `PoolingParams.verify` leaves after merging the
    pooler's defaults (the frontend's job in vLLM too): `use_activation` true unless the
    client or the pooler config turns it off, the prefix cache read except for per-token tasks."""
    if use_activation is None:
        use_activation = True
    skip_prefix_cache = task in ("token_embed", "token_classify")
    return [use_activation, dimensions, None, None, task, False, skip_prefix_cache, None,
            extra_kwargs or None, _OUTPUT_KIND_FINAL_ONLY]


class PoolingFailed(Exception):
    """A pooling request ended without a result; `failure.kind` says whose fault."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure


class Pooled:
    """One engine request of a pooling batch (the engine client's `OutputSink`)."""

    __slots__ = ("request_id", "index", "batch", "num_prompt_tokens", "output", "finished")

    def __init__(self, request_id: str, index: int, batch: "PoolingBatch", num_prompt_tokens: int):
        self.request_id = request_id
        self.index = index
        self.batch = batch
        self.num_prompt_tokens = num_prompt_tokens
        self.output: PooledTensor | None = None
        self.finished = False

    def on_output(self, output: EngineOutput) -> None:
        if self.finished or output.finish_reason is None:
            return
        self.finished = True
        if output.finish_reason == FINISH_ERROR or output.pooling_output is None:
            message = output.error or "The engine returned no pooled output for this request."
            self.batch._fail(Failure(FailureKind.REQUEST_FAILED, message))
            return
        self.output = output.pooling_output
        self.batch._one_done()

    def on_failure(self, failure: Failure) -> None:
        self.finished = True
        self.batch._fail(failure)


class PoolingBatch:
    """The engine requests of one pooling client request."""

    def __init__(self, engine: EngineClient, worker_index: int, id_prefix: str, external_id: str):
        self.engine = engine
        self.worker_index = worker_index
        self.id_prefix = id_prefix
        self.external_id = external_id
        self.requests: list[tuple[EngineRequest, Pooled]] = []
        self._left = 0
        self._done: asyncio.Future | None = None

    def add(self, prompt_ids: list[int], params: list[Any], *, priority: int = 0,
            cache_salt: str | None = None, trace_headers: dict[str, str] | None = None) -> Pooled:
        engine_id = make_request_id(self.id_prefix, self.worker_index)
        item = Pooled(engine_id, len(self.requests), self, len(prompt_ids))
        req = EngineRequest(
            request_id=engine_id, prompt_token_ids=prompt_ids, sampling_params=None,
            pooling_params=params, arrival_time=time.time(), external_req_id=self.external_id,
            priority=priority, cache_salt=cache_salt, trace_headers=trace_headers,
        )
        self.requests.append((req, item))
        return item

    @property
    def num_prompt_tokens(self) -> int:
        return sum(item.num_prompt_tokens for _, item in self.requests)

    def submit(self) -> None:
        """Send every request. Raises InvalidRequestError (nothing is left in the engine) or
        EngineDeadError."""
        self._done = asyncio.get_running_loop().create_future()
        self._left = len(self.requests)
        send_all(self.engine, self.requests)

    async def results(self) -> list[PooledTensor]:
        """The pooled outputs in input order; raises PoolingFailed. Cancelled (the client
        left), it aborts every request still in the engine."""
        assert self._done is not None, "submit() first"
        try:
            await self._done
        except BaseException:
            self.cancel()
            raise
        return [item.output for _, item in self.requests]  # type: ignore[misc]

    def cancel(self) -> None:
        ids = [req.request_id for req, item in self.requests if not item.finished]
        for _, item in self.requests:
            item.finished = True
        if ids:
            self.engine.abort(ids)

    def _one_done(self) -> None:
        self._left -= 1
        if self._left == 0 and self._done is not None and not self._done.done():
            self._done.set_result(None)

    def _fail(self, failure: Failure) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_exception(PoolingFailed(failure))
        self.cancel()
