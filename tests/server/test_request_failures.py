"""How a request ends when it fails: the failure kind decides the status, and a pipeline that
raises on the final output still ends its request (it used to hang: the Generation was already
finished and dropped the engine client's report)."""

from __future__ import annotations

import pytest

from vllm_pyfrontend.chat.assistant import AssistantStream
from vllm_pyfrontend.engine.types import EngineOutput, Failure, FailureKind
from vllm_pyfrontend.llm.generation import Generation
from vllm_pyfrontend.serving.formatters import ChatFormatter
from vllm_pyfrontend.serving.request_pipeline import Choice, RequestRun
from vllm_pyfrontend.text.text_stream import TextStream


class _Detok:
    def feed(self, ids):
        return "x" * len(ids)

    def flush(self, emit_incomplete=False):
        return ""


class _FailingAtEnd(AssistantStream):
    __slots__ = ()

    def finish(self):
        raise RuntimeError("parser bug at the end")


class _Client:
    def __init__(self):
        self.aborted = []

    def abort(self, ids):
        self.aborted.extend(ids)


def _run(assistant=None) -> tuple[RequestRun, Generation]:
    choice = Choice(0, TextStream(_Detok(), []), assistant or AssistantStream())
    run = RequestRun(response_id="chatcmpl-t", model="m", created=0, choices=[choice], num_prompt_tokens=3,
                     stream=False, include_usage=False, continuous_usage=False,
                     formatter=ChatFormatter(str, 0))
    gen = Generation("chatcmpl-w0-1", 0, run, _Client(), 3)
    choice.gen = gen
    return run, gen


@pytest.mark.parametrize("kind,status", [
    (FailureKind.ENGINE_DEAD, 503), (FailureKind.ENGINE_STALLED, 503), (FailureKind.SHUTTING_DOWN, 503),
    (FailureKind.REQUEST_FAILED, 500), (FailureKind.INTERNAL, 500),
])
async def test_failure_kind_decides_the_status(kind, status):
    run, gen = _run()
    gen.on_output(EngineOutput("chatcmpl-w0-1", [5, 6]))
    gen.on_failure(Failure(kind, "went wrong"))
    assert run.done.done() and run.error is not None
    assert run.error.status == status and run.error.message == "went wrong"


async def test_engine_error_output_is_a_500():
    run, gen = _run()
    gen.on_output(EngineOutput("chatcmpl-w0-1", [], finish_reason=3, error="bad logits"))
    assert run.done.done() and run.error.status == 500 and "bad logits" in run.error.message


async def test_pipeline_raising_on_the_final_output_still_ends_the_request():
    run, gen = _run(_FailingAtEnd())
    with pytest.raises(RuntimeError):
        gen.on_output(EngineOutput("chatcmpl-w0-1", [5], finish_reason=1))
    assert gen.finished and not run.done.done()
    # What the engine client does with a sink that raised (engine/delivery.py, Delivery._failed):
    gen.on_failure(Failure(FailureKind.INTERNAL, "internal error: parser bug at the end"))
    assert run.done.done() and run.error.status == 500


async def test_a_finished_request_ignores_later_engine_failures():
    run, gen = _run()
    gen.on_output(EngineOutput("chatcmpl-w0-1", [5], finish_reason=0))
    assert run.done.done() and run.error is None
    gen.on_failure(Failure(FailureKind.ENGINE_DEAD, "engine died later"))
    assert run.error is None


class _Letters:
    """Token id t detokenizes to chr(t)."""

    def feed(self, ids):
        return "".join(chr(t) for t in ids)

    def feed_each(self, ids):
        return [chr(t) for t in ids]

    def flush(self, emit_incomplete=False):
        return ""


async def test_tokens_after_a_stop_string_in_one_step_leave_usage_and_logprobs():
    from vllm_pyfrontend.engine.types import Logprobs

    choice = Choice(0, TextStream(_Letters(), ["cd"]), AssistantStream())
    run = RequestRun(response_id="cmpl-t", model="m", created=0, choices=[choice], num_prompt_tokens=3,
                     stream=False, include_usage=False, continuous_usage=False,
                     formatter=ChatFormatter(str, 0), want_logprobs=True, return_token_ids=True)
    client = _Client()
    gen = choice.gen = Generation("cmpl-w0-1", 0, run, client, 3)
    ids = [ord(c) for c in "abcdef"]  # six tokens accepted in one step; "cd" completes at the 4th
    lp = Logprobs([[t] for t in ids], [[-0.5] for _ in ids], [1] * 6)
    gen.on_output(EngineOutput("cmpl-w0-1", ids, new_logprobs=lp))
    assert run.done.done() and run.error is None
    assert "".join(choice.content) == "ab" and choice.token_ids == ids[:4]
    assert len(choice.logprobs[0]) == 4 and run.usage()["completion_tokens"] == 4
    assert gen.finish_reason == "stop" and gen.stop_reason == "cd" and client.aborted == ["cmpl-w0-1"]
