"""The reasoning-parser registry: ``--reasoning-parser`` name -> style or maker.

A module registers its names when it is imported (`register_reasoning_parser` at the
bottom of the module that defines the style or family); the package ``__init__`` imports
every such module once. Each entry also remembers the registering module and an optional
note, for the listings generated from the registry (`vllm_pyfrontend.parsers.catalog`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from vllm_pyfrontend.parsers.registration import Registration, caller_module
from vllm_pyfrontend.parsers.reasoning.think import ThinkReasoningParser, ThinkStyle

#: name -> a ThinkStyle, or a maker with get_reasoning_parser's signature
#: (tokenizer, *, prompt_text, prompt_token_ids, template_kwargs, implicit_ends)
_REGISTRY: dict[str, ThinkStyle | Callable[..., Any]] = {}
#: name -> make(tokenizer, **options) for parsers that are not a <think> style (harmony, hf)
_CUSTOM: dict[str, Any] = {}


_ORIGIN: dict[str, Registration] = {}


def register_reasoning_parser(
    name: str, style: ThinkStyle | Callable[..., Any], *, note: str = "", module: str | None = None
) -> None:
    """Register a `ThinkStyle` (or a maker with `get_reasoning_parser`'s signature) under a
    ``--reasoning-parser`` name (replaces any). ``note``: a one-line remark for the
    listings; ``module``: the registering module (default: the caller's)."""
    _REGISTRY[name] = style
    _ORIGIN[name] = Registration(module or caller_module(1), note)


def register_custom_reasoning_parser(name: str, make: Callable[..., Any], *, note: str = "") -> None:
    """Register a parser that is not a ``<think>`` style (harmony, ``hf``):
    ``make(tokenizer, prompt_text=..., prompt_token_ids=..., template_kwargs=...,
    implicit_ends=...)`` -> an object with ``feed``, ``finish`` and ``reasoning_tokens``."""
    register_reasoning_parser(name, ThinkStyle(), note=note, module=caller_module(1))  # listed
    _CUSTOM[name] = make


def reasoning_parser_names() -> list[str]:
    return sorted(_REGISTRY)


def reasoning_parser_registration(name: str) -> Registration:
    """The module that registered ``name`` and its note (KeyError when not registered)."""
    return _ORIGIN[name]


def registered_style(name: str) -> ThinkStyle | Callable[..., Any]:
    """The style or maker registered under ``name`` (KeyError when not registered)."""
    return _REGISTRY[name]


def get_reasoning_parser(
    name: str,
    tokenizer: Any = None,
    *,
    prompt_text: str | None = None,
    prompt_token_ids: Sequence[int] | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
    implicit_ends: Sequence[str] = (),
) -> ThinkReasoningParser:
    options = dict(prompt_text=prompt_text, prompt_token_ids=prompt_token_ids,
                   template_kwargs=template_kwargs, implicit_ends=implicit_ends)
    custom = _CUSTOM.get(name)
    if custom is not None:  # not a <think> style (gpt-oss harmony)
        return custom(tokenizer, **options)
    try:
        style = _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown reasoning parser {name!r}; known: {', '.join(reasoning_parser_names())}"
        ) from None
    if not isinstance(style, ThinkStyle):
        return style(tokenizer, **options)
    return ThinkReasoningParser(style, tokenizer, **options)
