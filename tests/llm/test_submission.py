"""Submission: the engine requests of one client request are all sent or none stays."""

from __future__ import annotations

import pytest

from vllm_pyfrontend.engine.types import EngineDeadError, InvalidEngineRequest
from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.llm.generation import DeltaConsumer
from vllm_pyfrontend.llm.submission import Submission


class _Engine:
    def __init__(self, fail_on: int, exc: Exception):
        self.fail_on, self.exc = fail_on, exc
        self.added: list[str] = []
        self.aborted: list[str] = []

    def add_request(self, req, sink) -> None:
        if len(self.added) + 1 == self.fail_on:
            raise self.exc
        self.added.append(req.request_id)

    def abort(self, ids) -> None:
        self.aborted.extend(ids)


class _Consumer(DeltaConsumer):
    def on_delta(self, *a) -> None: ...

    def on_error(self, *a) -> None: ...


def _three(engine) -> Submission:
    sub = Submission(engine, 0, _Consumer(), "chatcmpl")
    for i in range(3):
        sub.add(i, [1, 2, 3], {"max_tokens": 5}, external_id="chatcmpl-x")
    return sub


@pytest.mark.parametrize("exc,raised", [
    (EngineDeadError("engine 0 is not connected"), EngineDeadError),
    (InvalidEngineRequest("bad", "temperature"), InvalidRequestError),
])
def test_a_refusal_part_way_aborts_the_choices_already_sent(exc, raised):
    engine = _Engine(fail_on=3, exc=exc)
    sub = _three(engine)
    with pytest.raises(raised):
        sub.submit()
    assert len(engine.added) == 2 and engine.aborted == engine.added


def test_all_sent():
    engine = _Engine(fail_on=0, exc=RuntimeError())
    sub = _three(engine)
    sub.submit()
    assert len(engine.added) == 3 and len(set(engine.added)) == 3 and engine.aborted == []
