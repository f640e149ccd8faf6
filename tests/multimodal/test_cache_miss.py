"""A multimodal processor cache miss (the sender's and the engine's LRUs drifted): a fake engine
speaking vLLM's own msgpack finishes the request with FinishReason.ERROR and the missed
hashes, as EngineCore._handle_mm_cache_miss does. The engine client hands the hashes to the
sender cache (so the retry sends the items in full) and the request gets vLLM's answer for a
generation request: its generic GenerationError, 500 "Internal server error" /
InternalServerError (vLLM builds the retryable "multimodal_cache_miss" RequestError only for
pooling requests, OutputProcessor: `req_state.detokenizer is None`)."""

from __future__ import annotations

from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason

from tests.engine.test_client import _req, _started, on_uvloop, until
from vllm_pyfrontend.chat.assistant import AssistantStream
from vllm_pyfrontend.llm.generation import Generation
from vllm_pyfrontend.serving.formatters import ChatFormatter
from vllm_pyfrontend.serving.request_pipeline import Choice, RequestRun
from vllm_pyfrontend.text.text_stream import TextStream


class _Detok:
    def feed(self, ids):
        return "x" * len(ids)

    def flush(self, emit_incomplete=False):
        return ""


def _vllms_answer() -> dict:
    """vLLM's chat/completions error body for a finish_reason "error" output."""
    from vllm.entrypoints.generate.base.serving import GenerationError

    e = GenerationError("Internal server error")
    return {"message": str(e), "type": "InternalServerError", "param": None, "code": e.status_code}


@on_uvloop
async def test_cache_miss_fails_the_request_as_vllm_and_drops_the_hashes(addresses, zctx):
    client, (eng,), _ = await _started(addresses, zctx)
    missed: list[list[str]] = []
    client.on_mm_cache_miss = missed.append
    try:
        choice = Choice(0, TextStream(_Detok(), []), AssistantStream())
        run = RequestRun(response_id="chatcmpl-t", model="m", created=0, choices=[choice], num_prompt_tokens=3,
                         stream=False, include_usage=False, continuous_usage=False,
                         formatter=ChatFormatter(str, 0))
        gen = choice.gen = Generation("chatcmpl-w0-1", 0, run, client, 3)
        req = _req("chatcmpl-w0-1")
        client.add_request(req, gen)
        await eng.recv()
        eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput(
            request_id=req.request_id, new_token_ids=[], finish_reason=FinishReason.ERROR,
            mm_cache_miss_hashes=["h-image-1", "h-image-2"])]))
        await until(run.done.done)
        assert missed == [["h-image-1", "h-image-2"]]
        assert run.error is not None and run.error.body()["error"] == _vllms_answer()

        # Any other engine error keeps its own message (and the sender cache is not touched).
        choice2 = Choice(0, TextStream(_Detok(), []), AssistantStream())
        run2 = RequestRun(response_id="chatcmpl-u", model="m", created=0, choices=[choice2], num_prompt_tokens=3,
                          stream=False, include_usage=False, continuous_usage=False,
                          formatter=ChatFormatter(str, 0))
        gen2 = choice2.gen = Generation("chatcmpl-w0-2", 0, run2, client, 3)
        client.add_request(_req("chatcmpl-w0-2"), gen2)
        await eng.recv()
        eng.send(EngineCoreOutputs(outputs=[EngineCoreOutput(
            request_id="chatcmpl-w0-2", new_token_ids=[], finish_reason=FinishReason.ERROR)]))
        await until(run2.done.done)
        assert missed == [["h-image-1", "h-image-2"]]
        assert run2.error is not None and run2.error.status == 500
        assert run2.error.message != "Internal server error"
    finally:
        await client.close()
        eng.close()
