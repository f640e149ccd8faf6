"""Fault injection for `bench/soak.py --fault-rate R` (never installed; the soak puts this folder
on the workers' PYTHONPATH, and Python imports `sitecustomize` at start-up).

In each worker process (`python -m vllm_pyfrontend.server.worker`), every engine output handed
to a request (`Generation.on_output`, or `Generation.on_tokens` for a running step with nothing
but new token ids) arms, with probability R, one fault at a layer drawn at random; that layer's
next call raises. The layers are the request pipeline's boundaries, the same as
tests/reliability/test_fault_injection.py (`TextStream.feed_one` is the text stream's common
step, which does the detokenizer's and the stop matcher's part inline). Other processes are
left alone.
"""

from __future__ import annotations

import os
import random
import sys

RATE = float(os.environ.get("SOAK_FAULT_RATE") or 0)


class InjectedFault(RuntimeError):
    pass


def _install() -> None:
    from vllm_pyfrontend.llm.generation import Generation
    from vllm_pyfrontend.parsers.pipeline import AssistantPipeline
    from vllm_pyfrontend.serving.formatters import ChatFormatter
    from vllm_pyfrontend.serving.request_pipeline import ChoiceStep
    from vllm_pyfrontend.serving.sse import SSEWriter
    from vllm_pyfrontend.text.detokenizer import IncrementalDetokenizer
    from vllm_pyfrontend.text.text_stream import TextStream

    arming = {(Generation, "on_output"), (Generation, "on_tokens")}
    layers = [(Generation, "on_output"), (Generation, "on_tokens"), (ChoiceStep, "on_delta"),
              (TextStream, "feed"), (TextStream, "feed_one"), (IncrementalDetokenizer, "feed"),
              (AssistantPipeline, "feed"), (AssistantPipeline, "finish"),
              (ChatFormatter, "stream_delta"), (ChatFormatter, "body"), (SSEWriter, "write")]
    armed: set[tuple[type, str]] = set()
    rng = random.Random(os.getpid())

    def wrap(cls: type, name: str) -> None:
        original = getattr(cls, name)
        key = (cls, name)

        def method(self, *args, **kwargs):
            if key in armed:
                armed.discard(key)
                raise InjectedFault(f"injected fault in {cls.__name__}.{name}")
            if key in arming and rng.random() < RATE:
                armed.add(rng.choice(layers))
            return original(self, *args, **kwargs)

        setattr(cls, name, method)

    for cls, name in layers:
        wrap(cls, name)


if RATE > 0 and "vllm_pyfrontend.server.worker" in " ".join(sys.argv[:1] + sys.orig_argv[:4]):
    _install()
