"""``--tool-call-parser auto`` / ``--reasoning-parser auto``: pick by the model.

The chat template is the best witness of the format the model was trained to
write (it renders past tool calls the same way), so the markers it contains
decide; ``model_type`` from config.json breaks ties. None: no known format.
"""

from __future__ import annotations

# (marker(s) that must all be in the template, tool parser), most specific first
_TOOL_BY_TEMPLATE: tuple[tuple[tuple[str, ...], str], ...] = (
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
}

_REASONING_BY_MODEL_TYPE = {
    "deepseek_v4": "deepseek_v4",
    "deepseek_v32": "deepseek_v3",
    "deepseek_v3": "deepseek_v3",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3",
    "glm4_moe": "glm45",
    "kimi_k2": "kimi_k2",
    "minimax_m2": "minimax_m2",
}


def auto_tool_parser(chat_template: str | None, model_type: str | None = None) -> str | None:
    if chat_template:
        for markers, name in _TOOL_BY_TEMPLATE:
            if all(m in chat_template for m in markers):
                return name
    return _TOOL_BY_MODEL_TYPE.get(model_type or "")


def auto_reasoning_parser(chat_template: str | None, model_type: str | None = None) -> str | None:
    """Only for templates that speak ``<think>``; the family picks the toggles."""
    if chat_template is not None and "<think>" not in chat_template and "</think>" not in chat_template:
        return None
    name = _REASONING_BY_MODEL_TYPE.get(model_type or "")
    if name is None and chat_template and "｜DSML｜tool_calls" in chat_template:
        return "deepseek_v4"
    if name is None and chat_template and "enable_thinking" in chat_template:
        return "qwen3"
    return name


# ---- issue 15b: formats recognisable from the template / model_type (checked before the
# generic ones above: their markers are more specific) ----------------------------------------
_TOOL_BY_TEMPLATE = (
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
) + _TOOL_BY_TEMPLATE
_TOOL_BY_MODEL_TYPE.update({
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
})
_REASONING_BY_MODEL_TYPE.setdefault("gpt_oss", "openai_gptoss")
_auto_reasoning_before_15b = auto_reasoning_parser


def auto_reasoning_parser(chat_template: str | None, model_type: str | None = None) -> str | None:  # noqa: F811
    """gpt-oss speaks harmony channels, not ``<think>``."""
    if model_type == "gpt_oss" or (chat_template and "<|channel|>" in chat_template
                                   and "<|constrain|>" in chat_template):
        return "openai_gptoss"
    return _auto_reasoning_before_15b(chat_template, model_type)
