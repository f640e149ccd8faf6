"""``--tool-call-parser auto`` / ``--reasoning-parser auto``: pick by the model.

The chat template is the best witness of the format the model was trained to
write (it renders past tool calls the same way), so the markers it contains
decide; ``model_type`` from config.json breaks ties. None: no known format.
"""

from __future__ import annotations

# (marker(s) that must all be in the template, tool parser), most specific first: markers
# no other format's template writes, then the generic ones
_TOOL_BY_TEMPLATE: tuple[tuple[tuple[str, ...], str], ...] = (
    (("<|channel|>", "<|constrain|>"), "openai"),  # gpt-oss harmony
    (("<seed:tool_call>",), "seed_oss"),
    (("<longcat_tool_call>",), "longcat"),
    (("<|tool_call_start|>",), "lfm2"),
    (("<|plamo:begin_tool_requests:plamo|>",), "plamo3"),
    (("]<]minimax[>[",), "minimax_m3"),
    (("<steptml:invoke",), "step3"),
    (("<atem:function_calls>",), "muse_glimmer"),
    (("<function_calls>",), "olmo3"),
    (("functools[",), "phi4_mini_json"),
    (("<|python_start|>",), "llama4_pythonic"),
    (("｜DSML｜ calls",), "deepseek_v41"),
    (("<|tool_call>", "<tool_call|>"), "gemma4"),
    (("<start_function_call>",), "functiongemma"),
    (("<|tools_prefix|>",), "apertus"),
    (("<ifm|tool_calls>",), "k2_horizon"),
    (("<dots_function_call>",), "dots"),
    (("<tool_sep>", "<arg_key>"), "hy_v3"),
    (("<|action_start|><|plugin|>",), "internlm"),
    (("<|content_invoke_tool_json|>",), "inkling"),
    (("<|function_call|>",), "gigachat3"),
    (("function call<|role_sep|>",), "gigachat3"),
    (("<|tool_call|>",), "granite"),
    (("｜DSML｜tool_calls",), "deepseek_v4"),
    (("｜DSML｜function_calls",), "deepseek_v32"),
    (("<｜tool▁calls▁begin｜>", "```json"), "deepseek_v3"),
    (("<｜tool▁calls▁begin｜>",), "deepseek_v31"),
    (("<|tool_calls_section_begin|>",), "kimi_k2"),
    (("<minimax:tool_call>",), "minimax_m2"),
    (("<arg_key>", "<arg_value>"), "glm45"),
    (("<function=", "<parameter="), "qwen3_coder"),
    (("[TOOL_CALLS]",), "mistral"),
    (("<tool_call>",), "hermes"),
    (("<|python_tag|>",), "llama3_json"),
)

_TOOL_BY_MODEL_TYPE = {
    "deepseek_v4": "deepseek_v4",
    "deepseek_v32": "deepseek_v32",
    "kimi_k2": "kimi_k2",
    "minimax_m2": "minimax_m2",
    "glm4_moe": "glm45",
    "qwen2": "hermes",
    "qwen3": "hermes",
    "qwen3_moe": "hermes",
    "mistral": "mistral",
    "llama": "llama3_json",
    "gpt_oss": "openai",
    "seed_oss": "seed_oss",
    "lfm2": "lfm2",
    "lfm2_moe": "lfm2",
    "olmo3": "olmo3",
    "step3": "step3",
    "minimax_m3": "minimax_m3",
    "longcat_flash": "longcat",
    "mimo": "mimo",
    "minicpm5": "minicpm5",
    "plamo3": "plamo3",
}

#: the ``<think>`` families by model_type (when the template does not name a format)
_REASONING_BY_MODEL_TYPE = {
    "deepseek_v4": "deepseek_v4",
    "deepseek_v32": "deepseek_v3",
    "deepseek_v3": "deepseek_v3",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3",
    "glm4_moe": "glm45",
    "kimi_k2": "kimi_k2",
    "minimax_m2": "minimax_m2",
    "gpt_oss": "openai_gptoss",
    "ernie4_5": "ernie45",
    "ernie4_5_moe": "ernie45",
    "step3": "step3",
    "step3p5": "step3p5",
    "olmo3": "olmo3",
    "mimo": "mimo",
    "nemotron_h": "nemotron_v3",
    "seed_oss": "seed_oss",
    "hunyuan_v1_moe": "hunyuan_a13b",
    "gemma4": "gemma4",
    "gemma4_text": "gemma4",
    "plamo3": "plamo3",
    "minicpmv": "minicpmv",
    "minimax_m3": "minimax_m3",
}

# reasoning formats recognisable by their own markers in the chat template (all markers must
# be present), most specific first
_REASONING_BY_TEMPLATE: tuple[tuple[tuple[str, ...], str], ...] = (
    (("<|START_THINKING|>", "<|END_THINKING|>"), "cohere_command3"),
    (("<|channel>", "<channel|>"), "gemma4"),
    (("<|content_thinking|>",), "inkling"),
    (("<|open|>", "<|sep|>", "think"), "kimi_k3"),
    (("<ifm|think",), "k2_horizon"),
    (("<mm:think>",), "minimax_m3"),
    (("<seed:think>",), "seed_oss"),
    (("<|plamo:begin_think:plamo|>",), "plamo3"),
    (("[THINK]", "[/THINK]"), "mistral"),
    (("to=self", "<|eom|>"), "muse_glimmer"),
    (("my thought process:", "my response:"), "granite"),
    (("<think>", "<answer>"), "hunyuan_a13b"),
)


def auto_tool_parser(chat_template: str | None, model_type: str | None = None) -> str | None:
    if chat_template:
        for markers, name in _TOOL_BY_TEMPLATE:
            if all(m in chat_template for m in markers):
                return name
    return _TOOL_BY_MODEL_TYPE.get(model_type or "")


def auto_reasoning_parser(chat_template: str | None, model_type: str | None = None) -> str | None:
    """gpt-oss's harmony channels; else a format's own markers in the template; else a
    ``<think>`` template's family."""
    if model_type == "gpt_oss" or (chat_template and "<|channel|>" in chat_template
                                   and "<|constrain|>" in chat_template):
        return "openai_gptoss"
    if chat_template:
        for markers, found in _REASONING_BY_TEMPLATE:
            if all(m in chat_template for m in markers):
                return found
    if chat_template is not None and "<think>" not in chat_template and "</think>" not in chat_template:
        return None
    name = _REASONING_BY_MODEL_TYPE.get(model_type or "")
    if name is not None:
        return name
    if chat_template and "｜DSML｜tool_calls" in chat_template:
        return "deepseek_v4"
    if chat_template and "enable_thinking" in chat_template:
        return "qwen3"
    return None
