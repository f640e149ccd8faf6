"""The engine requests of one client request, sent together and failed together.

A client request becomes one engine request per choice (n > 1, several prompts). Each gets a
unique engine id carrying the worker index (see `request_ids`), the client's id as
`external_req_id`, and a `Generation` that forwards its outputs to the request's consumer.
Either all of them reach the engine or none stays there: a refusal part-way aborts the ones
already sent.
"""

from __future__ import annotations

import time
from typing import Any

from vllm_pyfrontend.engine.client import EngineClient
from vllm_pyfrontend.engine.types import EngineRequest, InvalidEngineRequest
from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.llm.generation import Generation, GenerationConsumer
from vllm_pyfrontend.llm.request_ids import make_request_id


class Submission:
    def __init__(self, engine: EngineClient, worker_index: int, consumer: GenerationConsumer, id_prefix: str):
        self.engine = engine
        self.worker_index = worker_index
        self.consumer = consumer
        self.id_prefix = id_prefix
        self.requests: list[tuple[EngineRequest, Generation]] = []
        # Requests may move to another engine (engine/migration.py): each Generation keeps its
        # token ids.
        self.keep_outputs = getattr(engine, "migration_limit", 0) > 0
        # The engine client's output clock, which its Generations read (a stand-in engine of a
        # test may have none: they get one at rest).
        self.clock = getattr(engine, "clock", None)

    def add(
        self,
        index: int,
        prompt_ids: list[int],
        sampling: dict[str, Any],
        *,
        external_id: str,
        priority: int = 0,
        cache_salt: str | None = None,
        trace_headers: dict[str, str] | None = None,
        lora_request: list[Any] | None = None,
        multimodal: Any = None,
        data_parallel_rank: int | None = None,
        consumer: GenerationConsumer | None = None,
    ) -> Generation:
        """One engine request for choice `index`; returns the Generation that tracks it (its
        output sink). `consumer`: this choice's own consumer instead of the submission's."""
        engine_id = make_request_id(self.id_prefix, self.worker_index)
        gen = Generation(engine_id, index, consumer or self.consumer, self.engine, len(prompt_ids), self.clock)
        if self.keep_outputs:
            gen.output_ids = []  # what a move to another engine continues from
        req = EngineRequest(
            request_id=engine_id,
            prompt_token_ids=prompt_ids,
            sampling_params=sampling,
            arrival_time=time.time(),
            external_req_id=external_id,
            priority=priority,
            cache_salt=cache_salt,
            trace_headers=trace_headers,
            lora_request=lora_request,
            data_parallel_rank=data_parallel_rank,
        )
        if multimodal is not None:  # frontend/multimodal `Processed`: features + their frames
            req.mm_features = multimodal.features
            req.aux_frames = multimodal.aux
        self.requests.append((req, gen))
        return gen

    def submit(self) -> None:
        """Send every request. Raises InvalidRequestError (a field the engine must not see;
        nothing is left in the engine) or EngineDeadError (no engine can take them now)."""
        send_all(self.engine, self.requests)


def send_all(engine, requests) -> None:
    """Send each (engine request, output sink) pair, all or none: on a failure the ones already
    sent are aborted. Raises InvalidRequestError (a field the engine must not see) or what the
    engine client raised (EngineDeadError)."""
    sent: list[str] = []
    try:
        for req, sink in requests:
            where = engine.add_request(req, sink)
            if where is not None and type(sink) is Generation:
                sink.engines = [where]  # (the request log names the engines a request ran on)
            sent.append(req.request_id)
    except InvalidEngineRequest as e:
        if sent:
            engine.abort(sent)
        raise InvalidRequestError(e.message, e.param) from None
    except Exception:
        if sent:
            engine.abort(sent)
        raise
