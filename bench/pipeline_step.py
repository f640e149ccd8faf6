"""Per-token cost of this frontend's output path, without network, engine or load generator.

    .venv/bin/python bench/pipeline_step.py --streams 512 --steps 400 --repeat 5
    .venv/bin/python bench/pipeline_step.py --stop '###' --stop '</answer>'   # the stop path
    .venv/bin/python bench/pipeline_step.py --metrics   # with the per-step Prometheus histogram

One worker's path from an engine output message to the bytes a stream writes: `--steps`
simulated-engine messages (`supervisor.sim.wire.pack_outputs`, one token per stream per step,
items written at full length as the simulated engine writes them) go through
`OutputReader.on_readable`-style handling (`frontend/engine/outputs.py`; drain hooks on, so one
write per stream per step), `Generation`, the choice's `ChoiceStep` (plain streamed chat content,
DeepSeek V4 tokenizer's detokenizer) and `SSEWriter` into a transport that only counts bytes.
Prints CPU µs per token (process time, best of `--repeat`), which on a shared machine is far
steadier than the HTTP benchmark. The loop stands in for the socket (no zmq recv). Run the same
script against another build with PYTHONPATH pointing at its `vllm_pyfrontend/` to compare
(bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class _Transport:
    def __init__(self) -> None:
        self.bytes = 0
        self.writes = 0

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data) -> None:
        self.bytes += len(data)
        self.writes += 1


def drain_hooks():
    """(begin, end) of one drain of the engine's output, as the worker registers them (the
    `StreamDrain` of serving/state.py), and the drain the writers join."""
    from vllm_pyfrontend.serving.sse import StreamDrain

    drain = StreamDrain()
    return drain.hooks, drain


def attach_stream(client, rid: str, text, assistant, include_usage: bool, transport=None, drain=None,
                  stream_interval: int = 1):
    """One streamed chat request as the worker builds it (Generation -> the choice's step ->
    SSEWriter, the writer in `drain`), registered with the engine client; its writes go to
    `transport` (default: a new counting one), which is returned."""
    from vllm_pyfrontend.llm.generation import Generation
    from vllm_pyfrontend.serving import sse as sse_mod
    from vllm_pyfrontend.serving.formatters import ChatFormatter
    from vllm_pyfrontend.serving.request_pipeline import Choice, RequestRun

    choice = Choice(0, text, assistant)
    run_ = RequestRun(response_id=rid, model="m", created=1, choices=[choice], num_prompt_tokens=3,
                      stream=True, include_usage=include_usage, continuous_usage=False,
                      formatter=ChatFormatter(lambda t: "", 0),
                      # (only when set: an earlier build, compared through PYTHONPATH, has no such option)
                      **({"stream_interval": stream_interval} if stream_interval != 1 else {}))
    run_.sse = sse_mod.SSEWriter(rid, "m", 1)
    if drain is not None:
        run_.sse.drain = drain
    t = transport if transport is not None else _Transport()
    run_.sse.attach(t, b"")
    # The consumer and the sink the server registers for it (serving/responder.py submit_choices).
    step = getattr(run_, "step", None)
    gen = Generation(rid, 0, step(choice) if step is not None else run_, client, 3)
    choice.gen = gen
    client._inflight.track(rid, gen, 0)
    return t


async def run(args) -> dict:
    import vllm_pyfrontend
    from vllm_pyfrontend.chat.assistant import AssistantStream
    from vllm_pyfrontend.engine.client import EngineClient
    from vllm_pyfrontend.engine.wire import layout_for_version
    from vllm_pyfrontend.supervisor.sim import wire as sim_wire
    from vllm_pyfrontend.text.text_stream import TextStream
    from vllm_pyfrontend.text.tokenizer import Tokenizer

    from bench.run import bench_model_dir

    tok = Tokenizer.load(bench_model_dir())
    client = EngineClient(client_index=0, input_address="inproc://x", output_address="inproc://y",
                          engine_indices=[0], vocab_size=tok.vocab_size)
    rng = random.Random(0)
    # Tokens that are complete words (the common case); the prose of a model's output.
    words = [i for i in range(1000, 60000) if (t := tok.decode([i])) and t.isascii() and t.strip().isalpha()]
    layout = sim_wire.Layout("0.32.0")
    # The field layout the handshake would pick for this engine version (the installed vLLM's).
    client._connection.layout = layout_for_version(layout.vllm_version)
    if args.metrics:  # as the worker installs it (metrics.install_stats_tap)
        from vllm_pyfrontend.metrics import WorkerMetrics

        client.on_iteration = WorkerMetrics("m", [0], 4096).observe_iteration
    best = None
    for _ in range(args.repeat):
        transports = []
        hooks, drain = drain_hooks()
        for s in range(args.streams):
            text = TextStream(tok.new_detokenizer([1, 2, 3]), list(args.stop))
            transports.append(attach_stream(client, f"chatcmpl-{s}", text, AssistantStream(), include_usage=True,
                                            drain=drain, stream_interval=args.stream_interval))
        msgs = [[sim_wire.pack_outputs(0, [sim_wire.output_item(layout, f"chatcmpl-{s}", [rng.choice(words)])
                                           for s in range(args.streams)], 1.0)]
                for _ in range(args.steps)]
        k = args.steps_per_drain
        t0 = time.process_time()
        for i in range(0, len(msgs), k):
            hooks[0]()
            for frames in msgs[i:i + k]:
                client._outputs.handle_message(frames)
            hooks[1]()
        dt = time.process_time() - t0
        us = dt / (args.streams * args.steps) * 1e6
        best = us if best is None else min(best, us)
        client._inflight.drop_all()
    if args.stream_interval == 1:  # one write per stream per drain (the runs never finish here)
        assert sum(t.writes for t in transports) == args.streams * -(-args.steps // args.steps_per_drain)
    return {"package": str(Path(vllm_pyfrontend.__file__).parent), "us_per_token": best,
            "bytes_per_token": sum(t.bytes for t in transports) / (args.streams * args.steps)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=512)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps-per-drain", type=int, default=1,
                    help="engine steps handled per drain: 1 while the worker keeps up, more when "
                         "it is behind (the frontend-bound workloads)")
    ap.add_argument("--stop", action="append", default=[],
                    help="a stop string every stream carries (repeatable; the words never hold "
                         "one, so every token is checked and none matches): the stop workload's path")
    ap.add_argument("--stream-interval", type=int, default=1,
                    help="vLLM's stream interval: a running chunk waits for this many tokens")
    ap.add_argument("--metrics", action="store_true",
                    help="observe vllm:iteration_tokens_total per engine message, as a worker does")
    args = ap.parse_args()
    r = asyncio.run(run(args))
    print(f"{r['us_per_token']:.2f} µs CPU per token (best of {args.repeat}), "
          f"{r['bytes_per_token']:.0f} bytes per token written; {r['package']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
