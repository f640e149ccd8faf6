"""Plain ``<think>`` splits: one `ThinkStyle` (think.py) per model, saying which markers,
whether thinking is on by default and which chat-template kwargs switch it.

Models whose reasoning needs more than a split (framing to drop, rewritten marker
spellings, an answer wrapper, markers chosen by kwargs) are families (families.py).
"""

from __future__ import annotations

from vllm_pyfrontend.parsers.reasoning.registry import register_reasoning_parser
from vllm_pyfrontend.parsers.reasoning.think import ThinkStyle

# R1: reasoning from the start (its template opens <think>); no switch.
R1 = ThinkStyle(default_thinking=True, kwarg_names=())
register_reasoning_parser("deepseek_r1", R1, note="DeepSeek R1: thinks from the start, no switch")
# Qwen3: enable_thinking (default on).
register_reasoning_parser(
    "qwen3",
    ThinkStyle(default_thinking=True, kwarg_names=("enable_thinking",), identity_when_off=True),
    note="Qwen3: enable_thinking (default on)",
)
# DeepSeek V3.1/V3.2: thinking off unless asked; off -> plain content.
DEEPSEEK_V3 = ThinkStyle(default_thinking=False, identity_when_off=True)
register_reasoning_parser("deepseek_v3", DEEPSEEK_V3, note="DeepSeek V3.1 / V3.2: thinking off unless asked")
# DeepSeek V4: thinking on unless switched off (also by reasoning_effort "none").
# vLLM's engine parsers (V4, GLM, Kimi, MiniMax) drop the whitespace before </think>.
DEEPSEEK_V4 = ThinkStyle(default_thinking=True, effort_none_disables=True, strip_reasoning_tail=True)
register_reasoning_parser("deepseek_v4", DEEPSEEK_V4, note="DeepSeek V4: thinking on unless switched off")
register_reasoning_parser("deepseek_v41", DEEPSEEK_V4, note="DeepSeek V4's style")
GLM_KIMI = ThinkStyle(default_thinking=True, identity_when_off=True, strip_reasoning_tail=True)
# GLM-4.5's template does not open <think>: the model does when it thinks, so
# output with no <think> and no prompt evidence is the answer.
register_reasoning_parser(
    "glm45",
    ThinkStyle(
        default_thinking=True, identity_when_off=True, strip_reasoning_tail=True, opens_in_output=True
    ),
    note="GLM-4.5: the model opens <think> itself",
)
register_reasoning_parser("glm47", GLM_KIMI, note="GLM-4.7")
register_reasoning_parser("kimi_k2", GLM_KIMI, note="Kimi K2")
register_reasoning_parser("ling3", GLM_KIMI, note="GLM-4.7's style")
# MiniMax M2's template opens <think>; the model only writes </think>.
MINIMAX_M2 = ThinkStyle(default_thinking=True, kwarg_names=(), strip_reasoning_tail=True)
register_reasoning_parser("minimax_m2", MINIMAX_M2, note="MiniMax M2: the template opens <think>")
# R1 kin: reasoning from the start, no switch.
register_reasoning_parser("hy_v4", R1, note="DeepSeek R1's style")
register_reasoning_parser("step3", R1, note="DeepSeek R1's style")
register_reasoning_parser("olmo3", R1, note="DeepSeek R1's style")
register_reasoning_parser("step3p5", MINIMAX_M2, note="Step-3.5: MiniMax M2's style")
# Qwen3 kin: enable_thinking (default on), off -> plain content.
register_reasoning_parser(
    "mimo",
    ThinkStyle(kwarg_names=("enable_thinking",), identity_when_off=True),
    note="MiMo: enable_thinking",
)
register_reasoning_parser(
    "nemotron_v3",
    ThinkStyle(kwarg_names=("enable_thinking",), identity_when_off=True, strip_reasoning_tail=True),
    note="Nemotron 3: enable_thinking",
)
register_reasoning_parser(
    "seed_oss",
    ThinkStyle(
        start="<seed:think>", end="</seed:think>", kwarg_names=("enable_thinking",),
        identity_when_off=True,
    ),
    note="Seed-OSS: <seed:think>",
)
register_reasoning_parser(
    "plamo3",
    ThinkStyle(
        start="<|plamo:begin_think:plamo|>", end="<|plamo:end_think:plamo|>",
        kwarg_names=("enable_thinking",), identity_when_off=True,
    ),
    note="PLaMo 3: its own think markers",
)
# DeepSeek V3 kin: thinking off unless asked (poolside) / on unless switched off (holo2).
register_reasoning_parser("poolside_v1", DEEPSEEK_V3, note="DeepSeek V3's style")
register_reasoning_parser(
    "holo2", ThinkStyle(default_thinking=True, identity_when_off=True), note="Holo2: thinking on unless switched off"
)
