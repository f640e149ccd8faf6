"""Per-request cost of this frontend's tool-call path, without network, engine or load generator.

    .venv/bin/python bench/toolcall_step.py --streams 256 --repeat 5

The `toolcall` workload's requests (bench/workloads.py: one tool, `tool_choice: auto`, the
simulated engine's scripted DeepSeek V4 DSML call of ~60 tokens, then EOS), one worker's share:

- `setup`: what a request builds for its tools: the tools decoded from the request body (fresh
  dicts, as every request has), the tool plan, and the choice's assistant stream
  (`ParserSelection.new_assistant_stream`, `--tool-call-parser deepseek_v4`);
- `output`: the engine's steps (`supervisor.sim.wire.pack_outputs`, one token per stream per
  step, the last with EOS and finish reason stop) through `OutputReader.handle_message`
  (drain hooks on), `Generation`, the choice's `ChoiceStep` (detokenizer with special tokens,
  the tool parser, chat SSE chunks) into a transport that only counts bytes;
- `render`: the chat template with the tool and the prompt's tokenization.

Prints CPU µs per request for each (process time, best of `--repeat`) and checks the streamed
tool call against the script. Compare builds with PYTHONPATH (bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class _Transport:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data) -> None:
        self.chunks.append(bytes(data))


def _tool_call_of(chunks: list[bytes]) -> tuple[str, str, str | None]:
    """(name, arguments, finish_reason) from a stream's writes (HTTP chunked framing: the
    size line, then SSE frames)."""
    name, args, finish = "", "", None
    for chunk in chunks:
        for frame in chunk.split(b"\r\n", 1)[1].split(b"\n\n"):
            if not frame.startswith(b"data: {"):
                continue
            for c in json.loads(frame[6:]).get("choices", []):
                for tc in (c.get("delta") or {}).get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    name += fn.get("name") or ""
                    args += fn.get("arguments") or ""
                finish = c.get("finish_reason") or finish
    return name, args, finish


async def run(args) -> dict:
    import vllm_pyfrontend
    from vllm_pyfrontend.chat.template import load_chat_template
    from vllm_pyfrontend.chat.tools import plan_tools
    from vllm_pyfrontend.engine.client import EngineClient
    from vllm_pyfrontend.engine.wire import layout_for_version
    from vllm_pyfrontend.parsers.selection import ParserSelection
    from vllm_pyfrontend.supervisor.sim import wire as sim_wire
    from vllm_pyfrontend.text.text_stream import TextStream
    from vllm_pyfrontend.text.tokenizer import Tokenizer

    from bench.pipeline_step import attach_stream, drain_hooks
    from bench.run import bench_model_dir
    from bench.workloads import TOOL_SCRIPT, TOOLS

    model_dir = bench_model_dir()
    tok = Tokenizer.load(model_dir)
    parsers = ParserSelection("deepseek_v4", None, tok)
    tools_json = json.dumps(TOOLS).encode()
    script = tok.encode(TOOL_SCRIPT, add_special_tokens=False)
    eos = tok.eos_token_id
    prompt = [1, 2, 3]
    client = EngineClient(client_index=0, input_address="inproc://x", output_address="inproc://y",
                          engine_indices=[0], vocab_size=tok.vocab_size)
    layout = sim_wire.Layout("0.32.0")
    # The field layout the handshake would pick for this engine version (the installed vLLM's).
    client._connection.layout = layout_for_version(layout.vllm_version)
    n = args.streams
    steps = [[sim_wire.output_item(layout, f"chatcmpl-{s}", [t]) for s in range(n)] for t in script]
    steps.append([sim_wire.output_item(layout, f"chatcmpl-{s}", [eos], sim_wire.FINISH_STOP) for s in range(n)])
    msgs = [[sim_wire.pack_outputs(0, items, 1.0)] for items in steps]
    hooks, drain = drain_hooks()

    template = load_chat_template(str(model_dir))

    best = {"setup": None, "output": None, "render": None}
    result = None
    for _ in range(args.repeat):
        # setup: tools as a request body decodes them, the plan, the assistant stream
        t0 = time.process_time()
        assistants = []
        for s in range(n):
            tools = json.loads(tools_json)
            plan = plan_tools(tools, "auto", parallel_tool_calls=None, auto_enabled=True, has_parser=True)
            assistants.append(parsers.new_assistant_stream(plan, prompt, {"thinking": False}, tools))
        setup = (time.process_time() - t0) / n

        transports = []
        for s in range(n):
            text = TextStream(tok.new_detokenizer(prompt, skip_special_tokens=False), [])
            transports.append(attach_stream(client, f"chatcmpl-{s}", text, assistants[s], include_usage=False,
                                            transport=_Transport(), drain=drain))
        t0 = time.process_time()
        for frames in msgs:
            hooks[0]()
            client._outputs.handle_message(frames)
            hooks[1]()
        output = (time.process_time() - t0) / n
        client._inflight.drop_all()
        result = _tool_call_of(transports[0].chunks)

        render = None
        if template is not None:
            t0 = time.process_time()
            for s in range(n):
                tools = json.loads(tools_json)
                text = template.render([{"role": "user", "content": f"question {s} " * 8}], tools=tools,
                                       chat_template_kwargs={"thinking": False})
                tok.encode(text, add_special_tokens=False)
            render = (time.process_time() - t0) / n
        for k, v in (("setup", setup), ("output", output), ("render", render)):
            if v is not None:
                best[k] = v if best[k] is None else min(best[k], v)
    assert result is not None and result[0] == "get_weather", result
    assert json.loads(result[1]) == {"location": "Paris", "unit": "celsius"}, result
    assert result[2] == "tool_calls", result
    return {"package": str(Path(vllm_pyfrontend.__file__).parent), "tokens": len(script) + 1,
            **{k: (v * 1e6 if v is not None else None) for k, v in best.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    r = asyncio.run(run(args))
    render = f"{r['render']:.0f}" if r["render"] is not None else "n/a"
    print(f"µs CPU per request (best of {args.repeat}, {r['tokens']} output tokens): "
          f"setup {r['setup']:.0f}, output {r['output']:.0f} ({r['output'] / r['tokens']:.1f}/token), "
          f"render+tokenize {render}; {r['package']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
