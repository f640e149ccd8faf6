"""The tool-parser registry: ``--tool-call-parser`` name -> format.

A format module registers its names when it is imported (`register_tool_parser` at the
bottom of the module that defines the grammar); the package ``__init__`` imports every
format module once, so looking a name up never depends on which module was imported first.
Each entry also remembers the module that registered it and an optional note, for the
listings generated from the registry (`vllm_pyfrontend.parsers.catalog`, ``--help``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from vllm_pyfrontend.parsers.registration import Registration, caller_module
from vllm_pyfrontend.parsers.special import SpecialGate
from vllm_pyfrontend.parsers.tool.base import SectionToolParser, ToolFormat

#: name -> factory(tools) -> ToolFormat
FormatFactory = Callable[[Sequence[Any]], ToolFormat]

_REGISTRY: dict[str, FormatFactory] = {}
#: names whose format does not depend on the request's tools: built once, shared by every
#: parser (a grammar holds no per-stream state; building one costs more than a short call)
_SHARED: set[str] = set()
_SHARED_FORMATS: dict[str, ToolFormat] = {}
#: name -> make(tokenizer, tools) for parsers that are not section grammars (harmony, hf)
_CUSTOM: dict[str, Callable[[Any, Sequence[Any] | None], Any]] = {}


_ORIGIN: dict[str, Registration] = {}


def register_tool_parser(
    name: str, factory: FormatFactory, *, shared: bool = False, note: str = "", module: str | None = None
) -> None:
    """Register a format under a ``--tool-call-parser`` name (replaces any). ``shared``: the
    factory ignores the tools and its format keeps no state, so one instance serves all.
    ``note``: a one-line remark for the listings (e.g. whose format a name reuses);
    ``module``: the registering module (default: the caller's)."""
    _REGISTRY[name] = factory
    _SHARED_FORMATS.pop(name, None)
    if shared:
        _SHARED.add(name)
    else:
        _SHARED.discard(name)
    _ORIGIN[name] = Registration(module or caller_module(1), note)


def register_custom_tool_parser(
    name: str, make: Callable[[Any, Sequence[Any] | None], Any], *, note: str = ""
) -> None:
    """Register a parser that is not a section grammar (harmony, ``hf``, or a
    ``--tool-parser-plugin``, see plugin.py): ``make(tokenizer, tools)`` -> an object with
    ``feed``, ``finish`` and ``n_calls``."""
    # listed with an empty format (no section markers); built by ``make``
    register_tool_parser(name, lambda tools: ToolFormat(), note=note, module=caller_module(1))
    _CUSTOM[name] = make


def tool_parser_names() -> list[str]:
    return sorted(_REGISTRY)


def tool_parser_registration(name: str) -> Registration:
    """The module that registered ``name`` and its note (KeyError when not registered)."""
    return _ORIGIN[name]


def tool_format(name: str) -> ToolFormat:
    """The format registered under ``name``, built for a request without tools."""
    return _REGISTRY[name]([])


def get_tool_parser(
    name: str,
    tokenizer: Any = None,
    tools: Sequence[Any] | None = None,
    gate: SpecialGate | None = None,
) -> SectionToolParser:
    """A fresh parser for one choice. ``tools``: the request's OpenAI tool dicts
    (schema-driven value types for XML formats)."""
    custom = _CUSTOM.get(name)
    if custom is not None:  # a parser that is not a section grammar (gpt-oss harmony)
        return custom(tokenizer, tools)
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown tool parser {name!r}; known: {', '.join(tool_parser_names())}"
        ) from None
    if name in _SHARED:
        fmt = _SHARED_FORMATS.get(name)
        if fmt is None:
            fmt = _SHARED_FORMATS[name] = factory([])
    else:
        fmt = factory(list(tools or []))
    parser = SectionToolParser(fmt, tokenizer=tokenizer, tools=tools, gate=gate)
    # a format may wrap its parser (channels.py: framing markers dropped)
    wrap = getattr(fmt, "wrap_parser", None)
    return wrap(parser) if wrap is not None else parser


def tool_markers(name: str) -> list[str]:
    """Every start and end marker of a format (for gates shared with reasoning)."""
    fmt = _REGISTRY[name]([])
    out = list(fmt.sections)
    for sec in fmt.sections.values():
        out.extend(sec.ends)
    return out
