"""The benchmark workloads, as arguments to vLLM's Rust `bench serve` (openai-chat backend).

Every workload goes through /v1/chat/completions with streaming (the bench's chat backend),
random-token prompts from the model's own tokenizer, and the simulated engine's output. The
scripted ones steer the simulated engine through `vllm_xargs` (it reads `sim_text` from the
request's extra_args), which all three frontends forward to the engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

# ~330 tokens of prose with a stop string at about token 250: every request stops on the string,
# so the frontend's per-token stop-string scan, its truncation of the final delta and its abort
# of the engine request are all on the measured path.
_SENTENCE = "The river runs under the old stone bridge, and the garden is quiet in the evening. "
STOP_STRING = "###"
STOP_SCRIPT = _SENTENCE * 14 + f"\n{STOP_STRING}\n" + _SENTENCE * 4

_DSML = "｜DSML｜"
TOOL_SCRIPT = (
    f"<{_DSML}tool_calls>\n"
    f'<{_DSML}invoke name="get_weather">\n'
    f'<{_DSML}parameter name="location" string="true">Paris</{_DSML}parameter>\n'
    f'<{_DSML}parameter name="unit" string="true">celsius</{_DSML}parameter>\n'
    f"</{_DSML}invoke>\n"
    f"</{_DSML}tool_calls>"
)
# The same call with a 2,000-character argument (a note's text): the parser's cost per token
# while one long string value streams.
_LONG_NOTE = ("Pack a light jacket, the evening wind off the river is cold; " * 40)[:2000]
TOOL_SCRIPT_LONG = (
    f"<{_DSML}tool_calls>\n"
    f'<{_DSML}invoke name="get_weather">\n'
    f'<{_DSML}parameter name="location" string="true">Paris</{_DSML}parameter>\n'
    f'<{_DSML}parameter name="note" string="true">{_LONG_NOTE}</{_DSML}parameter>\n'
    f"</{_DSML}invoke>\n"
    f"</{_DSML}tool_calls>"
)
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}]

TOOLS_LONG = [{"type": "function", "function": {
    **TOOLS[0]["function"],
    "parameters": {**TOOLS[0]["function"]["parameters"], "properties": {
        **TOOLS[0]["function"]["parameters"]["properties"],
        "note": {"type": "string", "description": "Anything to tell the traveller"}}}}}]


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    input_len: int
    output_len: int  # max_tokens
    ignore_eos: bool
    extra_body: dict = field(default_factory=dict)
    # >0: prompts come from a cached pool of this many distinct prompts (bench/prompts.py)
    # instead of `bench serve`'s own random dataset, which is slow to build for long prompts.
    prompt_pool: int = 0
    # Engine seconds per step for this workload; None: the harness's --step-time (10 ms).
    # The frontend-bound workloads run the engine at 2 ms per step, or 0 (zero work: the
    # simulated engine steps as fast as it can, so only the frontend limits the token rate).
    step_time: float | None = None

    def request_extra(self) -> dict:
        """Fields merged into every request. `bench serve` always sends ignore_eos=true for the
        random dataset, so it is set explicitly either way. Thinking is off for all workloads
        (the DeepSeek V4 template otherwise opens a <think> block and vLLM's Rust frontend, whose
        reasoning parser is on by default, would route all output to `reasoning` while the others
        return `content`): every frontend then streams plain content."""
        return {"ignore_eos": self.ignore_eos, "chat_template_kwargs": {"thinking": False},
                **self.extra_body}

    def bench_args(self, model_dir: str) -> list[str]:
        if self.prompt_pool:
            from bench.prompts import prompt_pool

            path = prompt_pool(model_dir, self.input_len, self.prompt_pool)
            args = ["--dataset-name", "custom", "--dataset-path", str(path),
                    "--custom-output-len", str(self.output_len)]
        else:
            args = ["--dataset-name", "random", "--random-input-len", str(self.input_len),
                    "--random-output-len", str(self.output_len)]
        if self.ignore_eos:
            args.append("--ignore-eos")
        return args + ["--extra-body", json.dumps(self.request_extra())]


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("decode", "decode-heavy: 32 in / 512 out, ignore_eos", 32, 512, True),
        Workload("fbound", "frontend-bound decode: 32 in / 512 out, ignore_eos, engine at 2 ms per "
                 "step (1024 streams ask ~500k tokens/s: the frontend is the ceiling)", 32, 512, True,
                 step_time=0.002),
        Workload("fbound0", "frontend-bound decode, zero-work engine: 32 in / 512 out, ignore_eos, "
                 "the simulated engine steps as fast as it can (step time 0)", 32, 512, True,
                 step_time=0.0),
        Workload("preprocess", "preprocess-heavy: 10,000 in / 16 out, ignore_eos (pool of 2048 "
                 "distinct random-token prompts)", 10000, 16, True, prompt_pool=2048),
        Workload("stop", f"stop string: 32 in, scripted text hits stop {STOP_STRING!r} at ~250 tokens "
                 "(max 512)", 32, 512, False,
                 {"stop": [STOP_STRING, "</answer>"], "vllm_xargs": {"sim_text": STOP_SCRIPT}}),
        Workload("req1", "per-request floor: 32 in / 1 out, ignore_eos (what a request costs "
                 "besides its tokens)", 32, 1, True),
        Workload("plain61", "the toolcall workload's length without tools: 32 in / 61 out, ignore_eos",
                 32, 61, True),
        Workload("toolcall", "tool call: 32 in + 1 tool, scripted DSML tool call (~60 tokens) then EOS",
                 32, 128, False,
                 {"tools": TOOLS, "tool_choice": "auto",
                  "vllm_xargs": {"sim_text": TOOL_SCRIPT}}),
        Workload("toolcall-long", "tool call with a 2,000-character argument: 32 in + 1 tool, scripted DSML "
                 "tool call (~520 tokens) then EOS", 32, 1024, False,
                 {"tools": TOOLS_LONG, "tool_choice": "auto",
                  "vllm_xargs": {"sim_text": TOOL_SCRIPT_LONG}}),
    )
}
