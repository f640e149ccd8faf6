"""Reasoning parsers, by vLLM's ``--reasoning-parser`` names.

``get_reasoning_parser(name, tokenizer, prompt_text=..., prompt_token_ids=...,
template_kwargs=..., implicit_ends=...)`` returns a fresh incremental parser
for one choice (think.py).

Where each parser lives (every module registers the names it defines, with
`register_reasoning_parser` at its bottom):

- ``think_styles.py``: a plain ``<think>``-style split, one `ThinkStyle` per model
  (markers, default, the chat-template kwargs that switch it): deepseek_r1, qwen3,
  deepseek_v3, deepseek_v4, glm45, kimi_k2, minimax_m2 and their kin.
- ``families.py``: a split plus the model's own framing (markers dropped or rewritten,
  an answer wrapper, markers chosen by kwargs): cohere_command3/4, ernie45, gemma4,
  granite, inkling, kimi_k3, mistral, minimax_m3, ...
- outside this package: ``parsers/harmony.py`` (openai_gptoss, gpt-oss) and
  ``parsers/response_template/`` (hf, the checkpoint's own template) register parsers
  that are not a ``<think>`` style (`register_custom_reasoning_parser`).

Adding a parser: a new `ThinkStyle` goes in think_styles.py; a model that needs framing
rules gets a `Family` in families.py; register the name next to it. A plugin registers
the same way (plugin.py). The registry is in registry.py; ``python -m
vllm_pyfrontend.parsers.catalog`` lists every name with its module.
"""

from __future__ import annotations

from vllm_pyfrontend.parsers.reasoning.registry import (
    get_reasoning_parser,
    reasoning_parser_names,
    register_custom_reasoning_parser,
    register_reasoning_parser,
)

# Every module that registers reasoning parsers, imported once here so that every name is
# registered whichever module is imported first.
from vllm_pyfrontend.parsers.reasoning import families, think_styles  # noqa: E402,F401
from vllm_pyfrontend.parsers import harmony, response_template  # noqa: E402,F401

__all__ = [
    "get_reasoning_parser",
    "reasoning_parser_names",
    "register_custom_reasoning_parser",
    "register_reasoning_parser",
]
