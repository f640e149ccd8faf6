"""Reasoning parsers, by vLLM's ``--reasoning-parser`` names.

``get_reasoning_parser(name, tokenizer, prompt_text=..., prompt_token_ids=...,
template_kwargs=..., implicit_ends=...)`` returns a fresh incremental parser
for one choice (think.py).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from vllm_pyfrontend.parsers.reasoning.think import ThinkReasoningParser, ThinkStyle

_REGISTRY: dict[str, ThinkStyle] = {}
#: name -> make(tokenizer, **options) for parsers that are not a <think> style (harmony)
_CUSTOM: dict[str, Any] = {}


def register_reasoning_parser(name: str, style: ThinkStyle) -> None:
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
register_reasoning_parser("glm45", _GLM_KIMI)
register_reasoning_parser("glm47", _GLM_KIMI)
register_reasoning_parser("kimi_k2", _GLM_KIMI)
# MiniMax M2's template opens <think>; the model only writes </think>.
register_reasoning_parser(
    "minimax_m2", ThinkStyle(default_thinking=True, kwarg_names=(), strip_reasoning_tail=True)
)


# ---- issue 15b: gpt-oss (harmony channels, openai-harmony package; parsers/harmony.py) ----
from vllm_pyfrontend.parsers import harmony as _harmony  # noqa: E402

register_reasoning_parser(_harmony.HARMONY_REASONING, ThinkStyle())  # listed; built by _CUSTOM
_CUSTOM[_harmony.HARMONY_REASONING] = _harmony.reasoning_stream
