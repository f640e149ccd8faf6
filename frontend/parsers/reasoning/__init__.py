"""Reasoning parsers, by vLLM's ``--reasoning-parser`` names.

``get_reasoning_parser(name, tokenizer, prompt_text=..., prompt_token_ids=...,
template_kwargs=..., implicit_ends=...)`` returns a fresh incremental parser
for one choice (think.py).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from vllm_pyfrontend.parsers.reasoning.think import ThinkReasoningParser, ThinkStyle

#: name -> a ThinkStyle, or a maker with get_reasoning_parser's signature
#: (tokenizer, *, prompt_text, prompt_token_ids, template_kwargs, implicit_ends)
_REGISTRY: dict[str, ThinkStyle | Callable[..., Any]] = {}
#: name -> make(tokenizer, **options) for parsers that are not a <think> style (harmony)
_CUSTOM: dict[str, Any] = {}


def register_reasoning_parser(name: str, style: ThinkStyle | Callable[..., Any]) -> None:
    _REGISTRY[name] = style


def reasoning_parser_names() -> list[str]:
    return sorted(_REGISTRY)


def get_reasoning_parser(
    name: str,
    tokenizer: Any = None,
    *,
    prompt_text: str | None = None,
    prompt_token_ids: Sequence[int] | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    implicit_ends: Sequence[str] = (),
) -> ThinkReasoningParser:
    custom = _CUSTOM.get(name)
    if custom is not None:  # not a <think> style (gpt-oss harmony)
        return custom(tokenizer, prompt_text=prompt_text, prompt_token_ids=prompt_token_ids,
                      template_kwargs=template_kwargs, implicit_ends=implicit_ends)
    try:
        style = _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown reasoning parser {name!r}; known: {', '.join(reasoning_parser_names())}"
        ) from None
    if not isinstance(style, ThinkStyle):
        return style(
            tokenizer,
            prompt_text=prompt_text,
            prompt_token_ids=prompt_token_ids,
            template_kwargs=template_kwargs,
            implicit_ends=implicit_ends,
        )
    return ThinkReasoningParser(
        style,
        tokenizer,
        prompt_text=prompt_text,
        prompt_token_ids=prompt_token_ids,
        template_kwargs=template_kwargs,
        implicit_ends=implicit_ends,
    )


# R1: reasoning from the start (its template opens <think>); no switch.
register_reasoning_parser("deepseek_r1", ThinkStyle(default_thinking=True, kwarg_names=()))
# Qwen3: enable_thinking (default on).
register_reasoning_parser(
    "qwen3",
    ThinkStyle(default_thinking=True, kwarg_names=("enable_thinking",), identity_when_off=True),
)
# DeepSeek V3.1/V3.2: thinking off unless asked; off -> plain content.
register_reasoning_parser(
    "deepseek_v3", ThinkStyle(default_thinking=False, identity_when_off=True)
)
# DeepSeek V4: thinking on unless switched off (also by reasoning_effort "none").
# vLLM's engine parsers (V4, GLM, Kimi, MiniMax) drop the whitespace before </think>.
register_reasoning_parser(
    "deepseek_v4",
    ThinkStyle(default_thinking=True, effort_none_disables=True, strip_reasoning_tail=True),
)
_GLM_KIMI = ThinkStyle(default_thinking=True, identity_when_off=True, strip_reasoning_tail=True)
# GLM-4.5's template does not open <think>: the model does when it thinks, so
# output with no <think> and no prompt evidence is the answer.
register_reasoning_parser(
    "glm45",
    ThinkStyle(
        default_thinking=True, identity_when_off=True, strip_reasoning_tail=True, opens_in_output=True
    ),
)
register_reasoning_parser("glm47", _GLM_KIMI)
register_reasoning_parser("kimi_k2", _GLM_KIMI)
# MiniMax M2's template opens <think>; the model only writes </think>.
register_reasoning_parser(
    "minimax_m2", ThinkStyle(default_thinking=True, kwarg_names=(), strip_reasoning_tail=True)
)


# ---- helper 15c: every other reasoning parser name vLLM registers (families.py) ----
from vllm_pyfrontend.parsers.reasoning import families as _f  # noqa: E402

_R1_LIKE = ThinkStyle(default_thinking=True, kwarg_names=())
register_reasoning_parser("deepseek_v41", _REGISTRY["deepseek_v4"])
register_reasoning_parser("ernie45", _R1_LIKE)
register_reasoning_parser("hy_v4", _R1_LIKE)
register_reasoning_parser("step3", _R1_LIKE)
register_reasoning_parser("olmo3", _R1_LIKE)
register_reasoning_parser(
    "step3p5", ThinkStyle(default_thinking=True, kwarg_names=(), strip_reasoning_tail=True)
)
register_reasoning_parser("ling3", _GLM_KIMI)
# Qwen3 kin: enable_thinking (default on), off -> plain content.
register_reasoning_parser(
    "mimo", ThinkStyle(kwarg_names=("enable_thinking",), identity_when_off=True)
)
register_reasoning_parser(
    "nemotron_v3",
    ThinkStyle(kwarg_names=("enable_thinking",), identity_when_off=True, strip_reasoning_tail=True),
)
register_reasoning_parser(
    "seed_oss",
    ThinkStyle(
        start="<seed:think>", end="</seed:think>", kwarg_names=("enable_thinking",),
        identity_when_off=True,
    ),
)
register_reasoning_parser(
    "plamo3",
    ThinkStyle(
        start="<|plamo:begin_think:plamo|>", end="<|plamo:end_think:plamo|>",
        kwarg_names=("enable_thinking",), identity_when_off=True,
    ),
)
# DeepSeek V3 kin: thinking off unless asked (poolside) / on unless switched off (holo2).
register_reasoning_parser("poolside_v1", _REGISTRY["deepseek_v3"])
register_reasoning_parser("holo2", ThinkStyle(default_thinking=True, identity_when_off=True))
for _name, _family in {
    "cohere_command3": _f.COHERE_COMMAND3,
    "cohere_command4": _f.COHERE_COMMAND4,
    "gemma4": _f.GEMMA4,
    "granite": _f.GRANITE,
    "granite_thinking_parser": _f.GRANITE_THINKING,
    "hunyuan_a13b": _f.HUNYUAN_A13B,
    "hy_v3": _f.hy_v3,
    "inkling": _f.INKLING,
    "k2_horizon": _f.k2_horizon,
    "kimi_k3": _f.kimi_k3,
    "minicpmv": _f.minicpmv,
    "minimax_m2_append_think": _f.MINIMAX_M2_APPEND_THINK,
    "minimax_m3": _f.minimax_m3,
    "mistral": _f.MISTRAL,
    "muse_glimmer": _f.MUSE_GLIMMER,
}.items():
    register_reasoning_parser(_name, _f.family_parser_maker(_family))

# ---- issue 15b: gpt-oss (harmony channels, openai-harmony package; parsers/harmony.py) ----
from vllm_pyfrontend.parsers import harmony as _harmony  # noqa: E402

register_reasoning_parser(_harmony.HARMONY_REASONING, ThinkStyle())  # listed; built by _CUSTOM
_CUSTOM[_harmony.HARMONY_REASONING] = _harmony.reasoning_stream

# ---- helper 15hf: `hf`, the checkpoint's own response_template (parsers/response_template.py) ----
from vllm_pyfrontend.parsers import response_template as _rt  # noqa: E402

register_reasoning_parser(_rt.HF, ThinkStyle())  # listed; built by _CUSTOM
_CUSTOM[_rt.HF] = _rt.reasoning_stream
