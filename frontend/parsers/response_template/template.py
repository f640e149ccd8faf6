"""A ``response_template`` dict checked and compiled (`load_template`), the form it is
served in (`serving_template`), and the startup checks of ``hf`` (`check_hf_selection`,
`check_hf_model_dir`).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import regex

from vllm_pyfrontend.parsers.response_template.values import CONTENT_PARSERS, PLACEHOLDER

HF = "hf"
THINKING, CONTENT, TOOLS = "thinking", "content", "tool_calls"
_SERVED = frozenset((THINKING, CONTENT, TOOLS))


class TemplateError(ValueError):
    """A response template that cannot be loaded or served."""


# ------------------------------------------------------------------ the template
@dataclass(frozen=True, slots=True)
class Anchor:
    """A delimiter: a compiled regex, and its literals when it was given as literals."""

    re: Any
    literals: tuple[str, ...] | None
    #: one literal is a strict prefix of another: a match at the buffer's end may grow
    can_extend: bool


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    open: Anchor | None
    close: Anchor | None
    content: str
    args: dict
    repeats: bool
    join: str | None
    optional: bool
    transform: Any
    transform_each: bool


@dataclass(frozen=True, slots=True)
class Template:
    defaults: dict
    fields: dict[str, Field]
    implicit: str | None
    start: Anchor


_FIELD_KEYS = frozenset((
    "open", "open_pattern", "close", "close_pattern", "content", "content_args", "repeats",
    "join", "optional", "transform", "transform_each",
))  # fmt: skip
_TOP_KEYS = frozenset(("version", "defaults", "fields", "start_anchor", "start_anchor_pattern"))


def _anchor(where: str, spec: dict, lit_key: str, re_key: str) -> Anchor | None:
    if lit_key in spec and re_key in spec:
        raise TemplateError(f"{where}: cannot specify both '{lit_key}' and '{re_key}'")
    if lit_key in spec:
        raw = spec[lit_key]
        if isinstance(raw, str):
            lits = [raw]
        elif isinstance(raw, list) and raw and all(isinstance(s, str) for s in raw):
            lits = list(dict.fromkeys(raw))
        else:
            raise TemplateError(f"{where}: '{lit_key}' must be a string or a non-empty list of strings")
        if "" in lits:
            raise TemplateError(f"{where}: '{lit_key}' literals cannot be empty strings")
        longest_first = sorted(lits, key=len, reverse=True)
        pattern = "|".join(regex.escape(s) for s in longest_first)
        grows = any(a != b and a.startswith(b) for a in lits for b in lits)
        return Anchor(regex.compile(pattern, regex.DOTALL), tuple(lits), grows)
    if re_key in spec:
        try:
            return Anchor(regex.compile(spec[re_key], regex.DOTALL), None, False)
        except (regex.error, TypeError) as e:
            raise TemplateError(f"{where}: invalid {re_key} regex: {e}") from e
    return None


def _field(name: str, spec: Any) -> Field:
    where = f"Field '{name}'"
    if not isinstance(spec, dict):
        raise TemplateError(f"{where} must be a dict")
    unknown = set(spec) - _FIELD_KEYS
    if unknown:
        raise TemplateError(f"{where}: unknown keys {sorted(unknown)}")
    content = spec.get("content", "text")
    if content not in CONTENT_PARSERS:
        raise TemplateError(f"{where}: unknown content parser {content!r}. Available: {sorted(CONTENT_PARSERS)}")
    opener = _anchor(where, spec, "open", "open_pattern")
    closer = _anchor(where, spec, "close", "close_pattern")
    join = spec.get("join")
    if join is not None and not isinstance(join, str):
        raise TemplateError(f"{where}: 'join' must be a string")
    if join is not None and not spec.get("repeats", False):
        raise TemplateError(f"{where}: 'join' requires 'repeats': true")
    transform = spec.get("transform")
    each = spec.get("transform_each", False)
    if not isinstance(each, bool):
        raise TemplateError(f"{where}: transform_each must be a bool")
    if each and transform is None:
        raise TemplateError(f"{where}: transform_each is set but no transform was provided")
    if transform is not None:
        _check_transform(where, transform)
    else:
        groups = set()
        for a in (opener, closer):
            if a is not None:
                groups |= set(a.re.groupindex)
        if groups:
            raise TemplateError(
                f"{where}: open_pattern/close_pattern declares named group(s) {sorted(groups)} but the "
                "field has no 'transform' (captures only reach the output through one)"
            )
    return Field(name, opener, closer, content, spec.get("content_args", {}) or {},
                 bool(spec.get("repeats", False)), join, bool(spec.get("optional", True)), transform, each)


def _check_transform(where: str, t: Any) -> None:
    if isinstance(t, dict):
        for v in t.values():
            _check_transform(where, v)
    elif isinstance(t, list):
        for v in t:
            _check_transform(where, v)
    elif isinstance(t, str) and PLACEHOLDER.search(t) and not PLACEHOLDER.fullmatch(t):
        raise TemplateError(
            f"{where}: transform string {t!r} mixes a {{placeholder}} with literal text "
            '(only whole-string placeholders such as "{content}" are supported)'
        )


def load_template(spec: Any) -> Template:
    """Check and compile a ``response_template`` dict (raises `TemplateError`)."""
    if not isinstance(spec, dict):
        raise TemplateError(f"response_template must be a dict, got {type(spec).__name__}")
    if spec.get("version", 1) != 1:
        raise TemplateError(f"Unsupported response_template version: {spec.get('version')}")
    unknown = set(spec) - _TOP_KEYS
    if unknown:
        raise TemplateError(f"Unknown keys in response_template: {sorted(unknown)}")
    if not isinstance(spec.get("defaults", {}), dict):
        raise TemplateError("response_template.defaults must be a dict")
    raw_fields = spec.get("fields", {})
    if not isinstance(raw_fields, dict) or not raw_fields:
        raise TemplateError("response_template.fields must be a non-empty dict")
    fields = {name: _field(name, f) for name, f in raw_fields.items()}
    implicit = [n for n, f in fields.items() if f.open is None]
    if len(implicit) > 1:
        raise TemplateError(f"At most one field may omit 'open'/'open_pattern'; found: {', '.join(implicit)}")
    start = _anchor("response_template", spec, "start_anchor", "start_anchor_pattern")
    if start is None:
        raise TemplateError("response_template must define 'start_anchor' or 'start_anchor_pattern'.")
    return Template(copy.deepcopy(spec.get("defaults", {})), fields, implicit[0] if implicit else None, start)


def template_of(tokenizer: Any) -> dict | None:
    """The ``response_template`` of a tokenizer (its ``tokenizer_config.json``), or None."""
    if tokenizer is None:
        return None
    found = getattr(tokenizer, "response_template", None)
    if not isinstance(found, dict):
        config = getattr(tokenizer, "tokenizer_config", None) or getattr(tokenizer, "init_kwargs", None) or {}
        found = config.get("response_template") if isinstance(config, dict) else None
    return found if isinstance(found, dict) else None


def serving_template(spec: dict) -> Template:
    """The template as served: only the routable fields, thinking/content plain text; a
    leftover-text ``content`` field added where none takes the text outside the others;
    every field optional."""
    loaded = load_template(spec)
    bad = (set(loaded.fields) - _SERVED) | (set(loaded.defaults) - {"role"})
    if bad:
        raise TemplateError(
            f"response_template contains unsupported semantic fields: {sorted(bad)}. "
            f"Supported fields are: {sorted(_SERVED)}"
        )
    for name in (THINKING, CONTENT):
        f = loaded.fields.get(name)
        if f is not None and (f.content != "text" or f.transform is not None or f.join is not None):
            raise TemplateError(
                f"response_template field {name!r} uses semantics that cannot be streamed by the "
                "OpenAI serving adapter"
            )
    spec = copy.deepcopy(spec)
    fields = spec["fields"]
    if CONTENT not in fields and all("open" in f or "open_pattern" in f for f in fields.values()):
        fields[CONTENT] = {}
    for f in fields.values():
        f["optional"] = True
    return load_template(spec)


def check_hf_selection(tool: str | None, reasoning: str | None, tokenizer: Any) -> None:
    """At startup: ``hf`` needs a servable template with the fields its flags parse, and is
    not combined with another parser (raises ValueError with vLLM's wording)."""
    if HF not in (tool, reasoning):
        return
    if {tool, reasoning} - {HF, None, ""}:
        raise ValueError("The hf parser cannot be combined with other reasoning or tool call parsers")
    spec = template_of(tokenizer)
    if spec is None:
        raise ValueError(
            "The hf parser requires `response_template` metadata in the tokenizer configuration "
            "(tokenizer_config.json)"
        )
    try:
        fields = serving_template(spec).fields
    except (TemplateError, TypeError) as e:
        raise ValueError(f"Invalid response_template metadata: {e}") from e
    if reasoning == HF and THINKING not in fields:
        raise ValueError("--reasoning-parser hf requires a response_template with a thinking field")
    if tool == HF and TOOLS not in fields:
        raise ValueError("--tool-call-parser hf requires a response_template with a tool_calls field")


def check_hf_model_dir(tool: str | None, reasoning: str | None, tokenizer_dir: str) -> None:
    """`check_hf_selection` on a model (tokenizer) directory's tokenizer_config.json, for the
    supervisor: a start that cannot serve ``hf`` stops before any worker starts."""
    if HF not in (tool, reasoning):
        return
    import os

    config: Any = {}
    path = os.path.join(tokenizer_dir, "tokenizer_config.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            config = json.load(f)

    class _Config:
        tokenizer_config = config if isinstance(config, dict) else {}

    check_hf_selection(tool, reasoning, _Config())
