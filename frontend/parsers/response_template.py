"""The ``hf`` tool-call and reasoning parsers: a checkpoint's own ``response_template``.

A checkpoint may ship, in ``tokenizer_config.json``, a declarative description of how its
output splits into message fields (Hugging Face's chat response parsing; vLLM 0.32 serves it
as ``--tool-call-parser hf`` / ``--reasoning-parser hf``)::

    "response_template": {
      "start_anchor": "<|im_start|>assistant\\n",
      "fields": {
        "thinking":   {"open": "<think>", "close": "</think>"},
        "tool_calls": {"open": "<tool_call>", "close": "</tool_call>", "repeats": true,
                       "content": "json",
                       "transform": {"type": "function",
                                     "function": {"name": "{content.name}",
                                                  "arguments": "{content.arguments}"}}},
        "content":    {}
      }
    }

The language (version 1):

- ``start_anchor`` (a literal or a list of literals) / ``start_anchor_pattern`` (a regex):
  the prompt is cut after its last match, and what the template already wrote of the
  assistant message (an opening ``<think>``) is parsed before the output;
- ``fields``: per field an opening delimiter (``open``: literal(s), ``open_pattern``: regex
  whose named groups are *captures*) and a closing one (``close`` / ``close_pattern``); at
  most one field has no opener: it takes every text outside the other fields (the
  *implicit* field). The earliest delimiter wins (the longest on a tie, an opener before a
  closer); a delimiter that the next text could still complete or extend is held.
- ``content``: how the text of a field becomes its value: ``text`` (stripped unless
  ``content_args.strip`` is false), ``int``, ``float``, ``bool``, ``json`` (with dialect
  knobs ``unquoted_keys``, ``string_delims``, ``allow_non_json``), ``xml-inline`` (a
  ``tag_pattern`` with groups ``key``/``value``, an optional ``value_parser``,
  ``merge_duplicates``) and ``kv-lines``;
- ``transform``: a JSON shape whose whole-string ``{placeholders}`` name the parsed value
  (``{content}``, ``{content.key}``) or a capture; ``transform_each`` applies it per list
  element; ``repeats`` collects a list, ``join`` concatenates strings; ``optional`` (default
  true) and ``defaults``.

Serving routes three fields: ``thinking`` (reasoning), ``content`` and ``tool_calls``; a
template with any other field (or a ``thinking``/``content`` field that is not plain text)
is refused at startup, as is ``hf`` without a template or combined with another parser
(vLLM's rules, its messages). Tool-call arguments are cast by the request's tool schemas
(``"5"`` for an integer parameter is 5), and the arguments text is vLLM's: the JSON of the
cast object.

Streaming: reasoning and content go out as they are generated (a possible delimiter is
held). A tool region whose calls are JSON with the name and the arguments object placed by
the transform (the common case: ``{"name": ..., "arguments": {...}}``, or a name captured
by the opener and the arguments as the whole body) is announced as soon as its name is
known and its arguments object has begun; each argument is then written as it completes
(cast by the schema), and a long string argument streams as it arrives when the schema
cannot cast it to anything else. The deltas concatenate to the same text as the whole
parse. Other tool regions (XML-ish ``xml-inline`` bodies, lists of calls, dialect JSON)
come out whole when they close, as in vLLM.

Deliberate differences from vLLM (pinned in tests/parsers/cases/response_template.py):
a tool region that does not parse is given back as content (vLLM drops it), and a call
already announced when its region turns out malformed (or the output ends inside it) is
completed, its arguments closed into valid JSON.
"""

from __future__ import annotations

import copy
import json
import logging
import secrets
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import regex

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.parsers.combinators import NEED, Fail, scan_json

log = logging.getLogger(__name__)

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
    if content not in _CONTENT_PARSERS:
        raise TemplateError(f"{where}: unknown content parser {content!r}. Available: {sorted(_CONTENT_PARSERS)}")
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


# ------------------------------------------------------------- content parsers
def _text(text: str, args: dict) -> str:
    return text.strip() if args.get("strip", True) else text


def _bool(text: str, args: dict) -> bool:
    return _text(text, args).lower() in ("true", "1")


_SENTINELS = ("\x01", "\x02")


def _json(text: str, args: dict) -> Any:
    delims = args.get("string_delims", [])
    if delims and any(s in text for s in _SENTINELS):
        raise ValueError("json: input contains reserved sentinel characters")
    work = text
    pulled: list[str] = []
    for open_d, close_d in delims:
        def pull(m: Any) -> str:
            pulled.append(m.group(1))
            return f"\x01{len(pulled) - 1}\x02"

        work = regex.sub(regex.escape(open_d) + r"(.*?)" + regex.escape(close_d), pull, work, flags=regex.DOTALL)
    if args.get("unquoted_keys", False):
        work = regex.sub(r"(?<=[{,])(\w+):", r'"\1":', work)
    for i, s in enumerate(pulled):
        work = work.replace(f"\x01{i}\x02", json.dumps(s))
    try:
        return json.loads(work)
    except json.JSONDecodeError as e:
        if args.get("allow_non_json"):
            return _text(text, args)
        raise ValueError(f"json: could not parse {text!r}: {e}") from e


def _sub(raw: str, value_parser: dict | None) -> Any:
    if value_parser is None:
        return raw
    return _parse(raw, value_parser.get("name", "text"), value_parser.get("args", {}))


def _xml_inline(text: str, args: dict) -> dict:
    pattern = args.get("tag_pattern")
    if pattern is None:
        raise ValueError("xml-inline: 'tag_pattern' content_arg is required")
    merge = args.get("merge_duplicates", False)
    out: dict[str, Any] = {}
    for m in regex.finditer(pattern, text, flags=regex.DOTALL):
        groups = m.groupdict()
        key = groups.get("key")
        if key is None:
            raise ValueError("xml-inline: tag_pattern must have a named group 'key'")
        value = _sub(groups.get("value", ""), args.get("value_parser"))
        if key in out and merge:
            if not isinstance(out[key], list):
                out[key] = [out[key]]
            out[key].append(value)
        else:
            out[key] = value
    return out


def _kv_lines(text: str, args: dict) -> dict:
    kv_sep = args.get("kv_sep", ":")
    out: dict[str, Any] = {}
    for line in text.split(args.get("line_sep", "\n")):
        line = _text(line, args)
        if not line or kv_sep not in line:
            continue
        k, v = line.split(kv_sep, 1)
        out[_text(k, args)] = _sub(_text(v, args), args.get("value_parser"))
    return out


_CONTENT_PARSERS = {
    "text": _text,
    "int": lambda t, a: int(_text(t, a)),
    "float": lambda t, a: float(_text(t, a)),
    "bool": _bool,
    "json": _json,
    "xml-inline": _xml_inline,
    "kv-lines": _kv_lines,
}
#: parsers whose chunks are the value itself (the others are parsed when the region closes)
_TEXTUAL = frozenset(("text", "int", "float", "bool"))


def _parse(text: str, name: str, args: dict) -> Any:
    return _CONTENT_PARSERS[name](text, args)


_PLACEHOLDER = regex.compile(r"\{(\w+(?:\.\w+)*)\}")


def _check_transform(where: str, t: Any) -> None:
    if isinstance(t, dict):
        for v in t.values():
            _check_transform(where, v)
    elif isinstance(t, list):
        for v in t:
            _check_transform(where, v)
    elif isinstance(t, str) and _PLACEHOLDER.search(t) and not _PLACEHOLDER.fullmatch(t):
        raise TemplateError(
            f"{where}: transform string {t!r} mixes a {{placeholder}} with literal text "
            '(only whole-string placeholders such as "{content}" are supported)'
        )


def _apply(t: Any, scope: dict) -> Any:
    if isinstance(t, dict):
        return {k: _apply(v, scope) for k, v in t.items()}
    if isinstance(t, list):
        return [_apply(v, scope) for v in t]
    if not isinstance(t, str):
        return t
    m = _PLACEHOLDER.fullmatch(t)
    if m is None:
        return t
    root, *keys = m.group(1).split(".")
    if root not in scope:
        raise KeyError(f"transform placeholder {t!r} is not defined")
    value = scope[root]
    for key in keys:
        if not isinstance(value, dict):
            raise ValueError(f"transform placeholder {t!r} cannot index into {type(value).__name__}")
        if key not in value:
            raise ValueError(f"transform placeholder {t!r} is missing key {key!r}")
        value = value[key]
    return value


def _field_value(body: str, f: Field, captures: dict) -> Any:
    value = _parse(body, f.content, f.args)
    if f.transform is None:
        return value
    if f.transform_each:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise ValueError(f"Field '{f.name}': transform_each requires a list of objects")
        return [_apply(f.transform, {**captures, **item}) for item in value]
    return _apply(f.transform, {**captures, "content": value})


# ------------------------------------------------------------ schema casting
def _types(schema: Any) -> tuple[str, ...]:
    """The JSON types a parameter's schema allows (type lists, anyOf/oneOf, nullable)."""
    if not isinstance(schema, dict):
        return ()
    declared = schema.get("type")
    out = [declared] if isinstance(declared, str) else []
    if isinstance(declared, list):
        out += [t for t in declared if isinstance(t, str)]
    for union in ("anyOf", "oneOf"):
        for choice in schema.get(union) or []:
            out += _types(choice)
    if schema.get("nullable") and "null" not in out:
        out.append("null")
    return tuple(out)


def _cast(raw: str, types: tuple[str, ...]) -> Any:
    """A string argument cast to the first of ``types`` it reads as (else kept)."""
    for t in types:
        try:
            if t == "integer":
                return int(raw)
            if t == "number":
                x = float(raw)
                if x != x or x in (float("inf"), float("-inf")):
                    continue
                return int(x) if x.is_integer() and "." not in raw else x
            if t == "boolean" and raw.strip().lower() in ("true", "1", "false", "0"):
                return raw.strip().lower() in ("true", "1")
            if t == "null" and raw.strip() in ("null", "None"):
                return None
            if t in ("object", "array"):
                v = json.loads(raw)
                if isinstance(v, dict if t == "object" else list):
                    return v
        except ValueError:
            continue
    return raw


def _cast_member(value: Any, types: tuple[str, ...]) -> Any:
    if not types:
        return value
    if isinstance(value, str):
        return _cast(value, types)
    if isinstance(value, list) and "array" not in types:  # merged duplicate tags
        return [_cast(v, types) if isinstance(v, str) else v for v in value]
    return value


def _keeps_strings(types: tuple[str, ...]) -> bool:
    """A string value of a parameter with these types is never cast."""
    return all(t not in ("integer", "number", "boolean", "null", "object", "array") for t in types)


def tool_properties(tools: Sequence[Any] | None) -> dict[str, dict]:
    """Tool name -> its parameters' ``properties`` (the request's OpenAI tool dicts)."""
    out: dict[str, dict] = {}
    for tool in tools or []:
        if hasattr(tool, "model_dump"):
            tool = tool.model_dump(exclude_none=True)
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            props = params.get("properties") if isinstance(params, dict) else None
            out[fn["name"]] = props if isinstance(props, dict) else {}
    return out


def _cast_calls(value: Any, props: dict[str, dict]) -> Any:
    if isinstance(value, list):
        return [_cast_calls(v, props) for v in value]
    fn = value.get("function") if isinstance(value, dict) else None
    if not isinstance(fn, dict):
        return value
    name, arguments = fn.get("name"), fn.get("arguments")
    if isinstance(name, str) and isinstance(arguments, dict) and props.get(name):
        schema = props[name]
        for key, arg in arguments.items():
            if key in schema:
                arguments[key] = _cast_member(arg, _types(schema[key]))
    return value


def _is_object_text(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _calls_of(value: Any) -> list[tuple[str, str]]:
    """(name, arguments text) of each call of a tool region's value; nothing when one is
    incomplete, or its arguments are not a JSON object (vLLM passes a string on as the
    arguments text, JSON or not; here that region is given back as content)."""
    out = []
    for item in value if isinstance(value, list) else [value]:
        fn = item.get("function") if isinstance(item, dict) else None
        if not isinstance(fn, dict):
            return []
        name, arguments = fn.get("name"), fn.get("arguments")
        if not isinstance(name, str) or not name:
            return []
        if isinstance(arguments, dict):
            out.append((name, json.dumps(arguments, ensure_ascii=False)))
        elif isinstance(arguments, str) and _is_object_text(arguments):
            out.append((name, arguments))
        else:
            return []
    return out


# --------------------------------------------------------------- the scanner
class RegionScanner:
    """The regions of the assistant message, incrementally.

    ``feed(text)`` / ``finish()`` return events (tuples):

    - ``("open", field, start, end, captures)``: an explicit opener at ``input[start:end]``
      (the implicit field opens with ``start == end`` on its first text);
    - ``("chunk", field, text)``: text of the open field;
    - ``("close", field, start, end, value)``: the field's value (closer at ``start:end``);
    - ``("bad", field, start, end, error)``: its text did not parse.

    Positions index ``self.input`` (the prompt's part after the start anchor, then the
    output). Events of the prompt part are in ``initial``.
    """

    def __init__(self, template: Template, prefix: str = "", tools: Sequence[Any] | None = None) -> None:
        self.t = template
        self.props = tool_properties(tools)
        self._watches: dict[str | None, list[tuple[bool, Field, Anchor]]] = {}
        self.input = ""
        self._pos = 0
        self.current: str | None = template.implicit
        self.captures: dict[str, str] = {}
        self.body = ""
        self._opened = False
        self._prefix_len = 0
        self.initial: list[tuple] = []
        if prefix:
            last = None
            for m in template.start.re.finditer(prefix):
                last = m.end()
            cut = prefix[last:] if last is not None else prefix
            if cut:
                self.input = cut
                self._run(self.initial, eos=False)
                self._prefix_len = len(cut)

    @property
    def prefix_len(self) -> int:
        return self._prefix_len

    def feed(self, text: str) -> list[tuple]:
        self.input += text
        out: list[tuple] = []
        self._run(out, eos=False)
        return out

    def finish(self) -> list[tuple]:
        out: list[tuple] = []
        self._run(out, eos=True)
        return out

    # -- internals
    def _watch(self) -> list[tuple[bool, Field, Anchor]]:
        """(is_open, field, delimiter) that count now (per current field, built once)."""
        out = self._watches.get(self.current)
        if out is not None:
            return out
        t = self.t
        if self.current is not None and self.current != t.implicit:
            f = t.fields[self.current]
            out = [(False, f, f.close)] if f.close is not None else []
        else:
            out = [(True, f, f.open) for f in t.fields.values() if f.open is not None]
            if t.implicit is not None and t.fields[t.implicit].close is not None:
                f = t.fields[t.implicit]
                out.append((False, f, f.close))
        self._watches[self.current] = out
        return out

    def _grows(self, anchor: Anchor, m: Any) -> bool:
        if m.end() != len(self.input):
            return False
        if m.start() == m.end():
            return True
        return anchor.literals is None or anchor.can_extend

    def _scan(self, eos: bool) -> tuple[tuple | None, int]:
        best = None
        best_key = None
        hold = len(self.input)
        for is_open, f, anchor in self._watch():
            if eos:
                m = anchor.re.search(self.input, self._pos)
            else:
                m = anchor.re.search(self.input, self._pos, partial=True)
            if m is None:
                continue
            if not eos and (m.partial or self._grows(anchor, m)):
                hold = min(hold, m.start())
                continue
            key = (m.start(), m.start() - m.end(), 0 if is_open else 1, f.name)
            if best_key is None or key < best_key:
                best_key, best = key, (is_open, f, m)
        if best is not None and best[2].start() >= hold:
            best = None
        return best, hold

    def _run(self, out: list[tuple], eos: bool) -> None:
        while True:
            best, hold = self._scan(eos)
            if best is not None:
                is_open, f, m = best
                if m.start() > self._pos:
                    self._take(out, self.input[self._pos : m.start()])
                self._pos = m.end()
                if is_open:
                    self._close(out, m.start(), m.start())
                    self.current = f.name
                    self.captures = {k: v for k, v in m.groupdict().items() if v is not None}
                    self.body = ""
                    self._opened = True
                    out.append(("open", f.name, m.start(), m.end(), self.captures))
                else:
                    had = self._opened
                    self._close(out, m.start(), m.end())
                    if not had and m.start() == m.end():
                        break
                continue
            if eos:
                if self._pos < len(self.input):
                    self._take(out, self.input[self._pos :])
                    self._pos = len(self.input)
                self._close(out, self._pos, self._pos)
                break
            if hold > self._pos:
                self._take(out, self.input[self._pos : hold])
                self._pos = hold
            break

    def _take(self, out: list[tuple], text: str) -> None:
        if not text or self.current is None:
            return
        if not self._opened:
            out.append(("open", self.current, self._pos, self._pos, {}))
            self._opened = True
        self.body += text
        text = text[max(0, self._prefix_len - self._pos) :]  # held prompt text is not output
        if text:
            out.append(("chunk", self.current, text))

    def _close(self, out: list[tuple], start: int, end: int) -> None:
        name = self.current
        if name is not None and self._opened:
            f = self.t.fields[name]
            try:
                value = _field_value(self.body, f, self.captures)
                if self.props:
                    value = _cast_calls(value, self.props)
                if f.join is not None and not isinstance(value, str):
                    raise ValueError(f"Field '{name}': 'join' requires each match to parse to a string")
                out.append(("close", name, start, end, value))
            except (KeyError, TypeError, ValueError) as e:
                out.append(("bad", name, start, end, e))
        self.current = self.t.implicit
        self.captures = {}
        self.body = ""
        self._opened = False


# ------------------------------------------------- streamed JSON call arguments
@dataclass(frozen=True, slots=True)
class _JsonCallShape:
    """Where a JSON tool region's name and arguments are: ``name_capture`` (a capture of
    the opener) or ``name_key`` (a member of the body's object); ``args_key`` (a member) or
    None (the body is the arguments object)."""

    name_capture: str | None
    name_key: str | None
    args_key: str | None


def _json_call_shape(f: Field) -> _JsonCallShape | None:
    """The shape of a tool field whose calls can stream their arguments, or None."""
    if f.content != "json" or f.transform_each or f.join is not None:
        return None
    if any(f.args.get(k) for k in ("string_delims", "unquoted_keys", "allow_non_json")):
        return None
    t = f.transform
    fn = t.get("function") if isinstance(t, dict) else None
    if fn == "{content}":  # the body is the call object itself: {"name": ..., "arguments": {...}}
        fn = {"name": "{content.name}", "arguments": "{content.arguments}"}
        t = {**t, "function": fn}
    if not isinstance(fn, dict):
        return None
    name_p = _PLACEHOLDER.fullmatch(fn.get("name", "")) if isinstance(fn.get("name"), str) else None
    args_p = _PLACEHOLDER.fullmatch(fn.get("arguments", "")) if isinstance(fn.get("arguments"), str) else None
    if name_p is None or args_p is None:
        return None
    name_path, args_path = name_p.group(1).split("."), args_p.group(1).split(".")
    if args_path == ["content"]:
        args_key = None
    elif len(args_path) == 2 and args_path[0] == "content":
        args_key = args_path[1]
    else:
        return None
    if len(name_path) == 1 and name_path[0] != "content":
        name_capture, name_key = name_path[0], None
    elif len(name_path) == 2 and name_path[0] == "content" and args_key is not None:
        name_capture, name_key = None, name_path[1]
    else:
        return None
    # every other placeholder must be a capture or the same members (else the value may fail)
    allowed = {p.group(1) for p in (name_p, args_p)}

    def others(x: Any) -> bool:
        if isinstance(x, dict):
            return all(others(v) for v in x.values())
        if isinstance(x, list):
            return all(others(v) for v in x)
        m = _PLACEHOLDER.fullmatch(x) if isinstance(x, str) else None
        return m is None or m.group(1) in allowed
    if not others(t):
        return None
    return _JsonCallShape(name_capture, name_key, args_key)


_WS = " \t\r\n"
_PLAIN = regex.compile(r'[^"\\\x00-\x1f]*')


def escape(text: str) -> str:
    """JSON string escaping without the quotes, as ``json.dumps(..., ensure_ascii=False)``
    writes it (per character: the escape of a prefix is a prefix of the escape). Not
    tool.streaming's: this module is imported by the tool package's registry."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


class _JsonCallWalker:
    """Reads a partial JSON tool body: the call's name once known, and the arguments as
    vLLM's final text will write them (``{"k": v, ...}``, each member cast by the schema)
    as far as it is certain."""

    def __init__(self, shape: _JsonCallShape, captured_name: str | None, props: dict[str, dict]) -> None:
        self.shape = shape
        self.name: str | None = captured_name
        self.props = props
        self.args_text = ""  # the certain prefix of the final arguments text
        self.args_begun = False
        self.open_string = False  # args_text ends inside a string value
        self.dead = False  # the body cannot be a call of this shape
        self._i = 0
        # "start"; the outer object: "top_first", "top_next", "top_key"; the arguments object:
        # "args_first", "args_next", "args_key", "args_str" (a string value streaming); "done"
        self._state = "start"
        self._pending: list[tuple[str, Any]] = []  # members read before the name was known
        self._n_members = 0
        self._closed_args = False
        self._str_key: str | None = None  # the open string value streaming (state "args_str")
        self._str_pos = 0  # where its unread text starts

    def _schema_types(self, key: str) -> tuple[str, ...]:
        schema = self.props.get(self.name or "", {})
        return _types(schema[key]) if key in schema else ()

    def closers(self) -> str:
        """What completes ``args_text`` into valid JSON."""
        if self._closed_args and self.name is not None:
            return ""
        return ('"' if self.open_string else "") + ("}" if self.args_text else "{}")

    def advance(self, s: str) -> None:
        try:
            self._advance(s)
        except (_Dead, ValueError):
            self.dead = True

    def _ws(self, s: str) -> int:
        i = self._i
        while i < len(s) and s[i] in _WS:
            i += 1
        self._i = i
        return i

    def _advance(self, s: str) -> None:
        n = len(s)
        while not self.dead:
            st = self._state
            i = self._ws(s)
            if i >= n:
                return
            c = s[i]
            if st == "start":
                if c != "{":
                    raise _Dead
                self._i = i + 1
                if self.shape.args_key is None:
                    self.args_begun = True
                    self._state = "args_first"
                else:
                    self._state = "top_first"
            elif st in ("top_first", "top_next"):
                if c == "}":
                    self._i = i + 1
                    self._state = "done"
                    continue
                if st == "top_next":
                    if c != ",":
                        raise _Dead
                    self._i = i + 1
                    i = self._ws(s)
                    if i >= n:
                        self._state = "top_key"
                        return
                self._state = "top_key"
            elif st == "top_key":
                key, j = self._key(s, i)
                if key is None:
                    return
                if key == self.shape.args_key and not self.args_begun:
                    k = j
                    while k < n and s[k] in _WS:
                        k += 1
                    if k >= n:
                        return
                    if s[k] != "{":
                        raise _Dead  # arguments that are not an object: whole at close
                    self._i = k + 1
                    self.args_begun = True
                    self._state = "args_first"
                    continue
                r = scan_json(s, j, False)
                if r is NEED:
                    return
                if isinstance(r, Fail):
                    raise _Dead
                if key == self.shape.name_key and self.name is None:
                    value = json.loads(r.value)
                    if not isinstance(value, str) or not value:
                        raise _Dead
                    self.name = value
                    self._flush_pending()
                self._i = r.end
                self._state = "top_next"
            elif st in ("args_first", "args_next"):
                if c == "}":
                    self._i = i + 1
                    self._closed_args = True
                    if self.name is not None:
                        self._write_close()
                    self._state = "top_next" if self.shape.args_key is not None else "done"
                    continue
                if st == "args_next":
                    if c != ",":
                        raise _Dead
                    self._i = i + 1
                    i = self._ws(s)
                    if i >= n:
                        self._state = "args_key"
                        return
                self._state = "args_key"
            elif st == "args_key":
                key, j = self._key(s, i)
                if key is None:
                    return
                k = j
                while k < n and s[k] in _WS:
                    k += 1
                if k >= n:
                    return
                if s[k] == '"' and self.name is not None and _keeps_strings(self._schema_types(key)):
                    self._open_string(key, k)  # a string that is never cast: streams as it comes
                    continue
                r = scan_json(s, k, False)
                if r is NEED:
                    return
                if isinstance(r, Fail):
                    raise _Dead
                self._member(key, json.loads(r.value))
                self._i = r.end
                self._state = "args_next"
            elif st == "args_str":
                self._string(s)
                if self._state == "args_str":
                    return
            elif st == "done":
                raise _Dead  # text after the object
            else:  # pragma: no cover
                raise _Dead

    def _key(self, s: str, i: int) -> tuple[str | None, int]:
        """A member's key and where its value starts (None: not complete yet)."""
        if s[i] != '"':
            raise _Dead
        r = scan_json(s, i, False)
        if r is NEED:
            return None, i
        if isinstance(r, Fail):
            raise _Dead
        j = r.end
        while j < len(s) and s[j] in _WS:
            j += 1
        if j >= len(s):
            return None, i
        if s[j] != ":":
            raise _Dead
        j += 1
        while j < len(s) and s[j] in _WS:
            j += 1
        if j >= len(s):
            return None, i
        return json.loads(r.value), j

    def _head(self, key: str) -> str:
        sep = "{" if self._n_members == 0 else ", "
        self._n_members += 1
        return sep + json.dumps(key, ensure_ascii=False) + ": "

    def _member(self, key: str, value: Any) -> None:
        if self.name is None:
            self._pending.append((key, value))
            return
        value = _cast_member(value, self._schema_types(key))
        self.args_text += self._head(key) + json.dumps(value, ensure_ascii=False)

    def _flush_pending(self) -> None:
        pending, self._pending = self._pending, []
        for key, value in pending:
            value = _cast_member(value, self._schema_types(key))
            self.args_text += self._head(key) + json.dumps(value, ensure_ascii=False)
        if self._closed_args:
            self._write_close()

    def _write_close(self) -> None:
        self.args_text += ("{}" if self._n_members == 0 else "}")

    def _open_string(self, key: str, k: int) -> None:
        """A string value that streams (never cast) begins at ``s[k]`` (its quote)."""
        self._str_key = key
        self._str_pos = k + 1
        self._str_parts: list[str] = []
        self.args_text += self._head(key) + '"'
        self.open_string = True
        self._state = "args_str"

    def _string(self, s: str) -> None:
        """Extend the open string value as far as its text is certain (whole characters,
        whole escapes; a \\u high surrogate with its pair); close it at its quote."""
        n = len(s)
        start = i = self._str_pos
        while i < n:
            i = _PLAIN.match(s, i).end()
            if i >= n:
                break
            c = s[i]
            if c == '"':
                self._str_piece(s[start:i])
                self.args_text += '"'
                self._str_key = None
                self.open_string = False
                self._i = i + 1
                self._state = "args_next"
                return
            if c != "\\":
                raise _Dead  # a control character: not JSON
            if i + 1 >= n:
                break
            if s[i + 1] != "u":
                if s[i + 1] not in '"\\/bfnrt':
                    raise _Dead
                i += 2
                continue
            if i + 6 > n:
                break
            code = int(s[i + 2 : i + 6], 16)  # ValueError: not JSON (advance() marks it dead)
            if 0xD800 <= code <= 0xDBFF and i + 12 > n:
                break  # wait for the low surrogate
            i += 6
        self._str_piece(s[start:i])
        self._str_pos = i

    def _str_piece(self, raw: str) -> None:
        if "\\" not in raw:  # plain characters (no quote or control character): written as they are
            self.args_text += raw
        else:
            self.args_text += escape(json.loads('"' + raw + '"'))


class _Dead(Exception):
    pass


# --------------------------------------------------------------- the stream
class ResponseTemplateStream:
    """One choice's output -> reasoning / content / tool-call deltas, by the template.

    ``reasoning``: the thinking field is reasoning (else its text is content, its
    delimiters dropped, as vLLM does); ``tools``: tool regions are calls (else their text,
    delimiters included, is content). Same ``feed``/``finish`` contract as the other parsers.
    """

    def __init__(
        self,
        template: Template,
        *,
        reasoning: bool,
        tools: bool,
        request_tools: Sequence[Any] | None = None,
        prefix: str = "",
    ) -> None:
        self.template = template
        self.want_reasoning = reasoning
        self.want_tools = tools
        self.scanner = RegionScanner(template, prefix, request_tools)
        self._props = self.scanner.props
        tf = template.fields.get(TOOLS)
        self._shape = _json_call_shape(tf) if tf is not None else None
        self._n_calls = 0
        self.reasoning_tokens = 0
        self._walker: _JsonCallWalker | None = None
        self._announced: _JsonCallWalker | None = None  # the walker whose call was announced
        self._sent = 0  # arguments text sent for the walker's call
        self._region_start = 0
        self._body = ""  # the open tool region's text, as its chunks are routed
        self._finished = False
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[dict[str, Any]] = []

    @property
    def n_calls(self) -> int:
        return self._n_calls

    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        if self._finished:
            return None
        thinking_before = self.scanner.current == THINKING
        self._route(self.scanner.feed(text) if text else [])
        if token_ids is not None and (thinking_before or self.scanner.current == THINKING):
            self.reasoning_tokens += len(list(token_ids))
        return self._take()

    def finish(self) -> AssistantDelta | None:
        if self._finished:
            return None
        self._finished = True
        if len(self.scanner.input) > self.scanner.prefix_len:  # nothing generated: nothing to close
            self._route(self.scanner.finish())
        return self._take()

    # -- internals
    def _take(self) -> AssistantDelta | None:
        content, reasoning, calls = "".join(self._content), "".join(self._reasoning), self._calls
        self._content, self._reasoning, self._calls = [], [], []
        if not content and not reasoning and not calls:
            return None
        return AssistantDelta(content=content or None, reasoning=reasoning or None, tool_calls=calls)

    def _route(self, events: list[tuple]) -> None:
        for ev in events:
            kind, name = ev[0], ev[1]
            if name == TOOLS:
                self._tool_event(ev)
            elif kind == "chunk":
                if name == THINKING and self.want_reasoning:
                    self._reasoning.append(ev[2])
                elif name in (THINKING, CONTENT):
                    self._content.append(ev[2])

    def _raw(self, start: int, end: int) -> str:
        return self.scanner.input[max(start, self.scanner.prefix_len) : end]

    def _tool_event(self, ev: tuple) -> None:
        kind = ev[0]
        if not self.want_tools:
            self._content.append(ev[2] if kind == "chunk" else self._raw(ev[2], ev[3]))
            return
        if kind == "open":
            self._region_start = max(ev[2], self.scanner.prefix_len)
            self._body = ""
            self._sent = 0
            self._walker = None
            if self._shape is not None:
                captured = ev[4].get(self._shape.name_capture) if self._shape.name_capture else None
                if self._shape.name_capture is None or captured:
                    self._walker = _JsonCallWalker(self._shape, captured or None, self._props)
            return
        if kind == "chunk":
            self._body += ev[2]  # (the scanner may be past this region when its events are routed)
            if self._walker is not None and not self._walker.dead:
                self._walker.advance(self._body)
                self._stream_args()
            return
        walker, self._walker = self._walker, None
        announced = walker is not None and self._announced is walker
        self._announced = None
        if kind == "close":
            calls = _calls_of(ev[4])
            if announced:
                self._finish_streamed(walker, calls)
                return
            if not calls:
                log.warning("response_template: a tool region without a complete call is given back as content")
                self._content.append(self._raw(self._region_start, ev[3]))
                return
            for name, arguments in calls:
                self._announce(name)
                self._args(arguments)
            return
        # "bad": the region did not parse
        if announced:
            # committed: the announced call is completed with valid JSON
            self._args(walker.args_text[self._sent :] + walker.closers())
        else:
            self._content.append(self._raw(self._region_start, ev[3]))

    def _stream_args(self) -> None:
        w = self._walker
        # announced once the name is known and the arguments have begun validly, even if the
        # text turns invalid later in the same chunk: decided on the text, not on the chunking
        if w is None or w.name is None or not w.args_begun or not w.args_text:
            return
        if self._announced is not w:
            self._announce(w.name)
            self._announced = w
        if len(w.args_text) > self._sent:
            self._args(w.args_text[self._sent :])
            self._sent = len(w.args_text)

    def _finish_streamed(self, w: _JsonCallWalker, calls: list[tuple[str, str]]) -> None:
        final = calls[0][1] if len(calls) == 1 and calls[0][0] == w.name else None
        sent = w.args_text[: self._sent]
        if final is not None and final.startswith(sent):
            if len(final) > len(sent):
                self._args(final[len(sent) :])
        else:
            log.warning("response_template: a streamed call's final arguments differ from what was sent")
            self._args(w.args_text[len(sent) :] + w.closers())
        self._sent = 0

    def _announce(self, name: str) -> None:
        self._calls.append({
            "index": self._n_calls,
            "id": "call_" + secrets.token_hex(12),
            "type": "function",
            "function": {"name": name, "arguments": ""},
        })
        self._n_calls += 1

    def _args(self, text: str) -> None:
        if text:
            self._calls.append({"index": self._n_calls - 1, "function": {"arguments": text}})


# ------------------------------------------------------------ parsers & pipeline
_SERVED_CACHE: dict[int, tuple[dict, Template]] = {}


def _template_for(tokenizer: Any) -> Template:
    """The tokenizer's template as served (compiled once per template object)."""
    spec = template_of(tokenizer)
    if spec is None:
        raise ValueError("The hf parser requires `response_template` metadata in the tokenizer configuration")
    hit = _SERVED_CACHE.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    served = serving_template(spec)
    if len(_SERVED_CACHE) > 64:
        _SERVED_CACHE.clear()
    _SERVED_CACHE[id(spec)] = (spec, served)
    return served


#: prompt tokens decoded first when looking for the start anchor (the whole prompt only when the
#: anchor is not in them): a long prompt is not decoded per choice
_PROMPT_TAIL = 512


def _prefix(tokenizer: Any, prompt_text: str | None, prompt_ids: Sequence[int] | None,
            template: Template | None = None) -> str:
    """The prompt's text as the parser's prefix (vLLM decodes the prompt's ids, special tokens
    kept); from its last start anchor on is all that counts."""
    if prompt_text is not None:
        return prompt_text
    if not prompt_ids or tokenizer is None or not hasattr(tokenizer, "decode"):
        return ""

    def decode(ids: list[int]) -> str:
        try:
            return tokenizer.decode(ids, skip_special_tokens=False)
        except TypeError:
            return tokenizer.decode(ids)

    ids = list(prompt_ids)
    if template is not None and len(ids) > _PROMPT_TAIL:
        tail = decode(ids[-_PROMPT_TAIL:])
        last = None
        for m in template.start.re.finditer(tail):
            last = m
        if last is not None and last.start() > 0:  # the tail's first characters may be cut
            return tail[last.start() :]
    return decode(ids)


def tool_stream(tokenizer: Any = None, tools: Sequence[Any] | None = None) -> ResponseTemplateStream:
    """``get_tool_parser("hf")``: calls and content (thinking text is content)."""
    return ResponseTemplateStream(_template_for(tokenizer), reasoning=False, tools=True, request_tools=tools)


def reasoning_stream(
    tokenizer: Any = None,
    *,
    prompt_text: str | None = None,
    prompt_token_ids: Sequence[int] | None = None,
    **_: Any,
) -> ResponseTemplateStream:
    """``get_reasoning_parser("hf")``: reasoning and content (tool regions are content)."""
    template = _template_for(tokenizer)
    return ResponseTemplateStream(
        template, reasoning=True, tools=False, prefix=_prefix(tokenizer, prompt_text, prompt_token_ids, template),
    )


class ResponseTemplatePipeline:
    """`AssistantPipeline`'s interface over one `ResponseTemplateStream` (both parsers).

    ``tool``: set by the caller to a forced-call parser (tool_choice required / named). The
    engine's structured outputs then force the call's JSON from the first token, so the output
    goes to it directly: the template's regions do not apply (a ``<think>`` the prompt opened
    would otherwise take the forced call as reasoning). vLLM refuses these tool choices with hf.
    """

    def __init__(self, stream: ResponseTemplateStream) -> None:
        self.stream = stream
        self.reasoning = None
        self.tool: Any = None

    @property
    def reasoning_tokens(self) -> int:
        return self.stream.reasoning_tokens

    @property
    def n_tool_calls(self) -> int:
        return self.tool.n_calls if self.tool is not None else self.stream.n_calls

    def feed(self, text: str, token_ids: Iterable[int] | None = None) -> AssistantDelta | None:
        if self.tool is not None:  # a forced call: the output is its JSON
            return self.tool.feed(text)
        return self.stream.feed(text, token_ids)

    def finish(self) -> AssistantDelta | None:
        if self.tool is not None:
            return self.tool.finish()
        return self.stream.finish()


def is_response_template(reasoning: str | None, tool: str | None) -> bool:
    return HF in (reasoning, tool)


def make_response_template_pipeline(
    reasoning: str | None,
    tool: str | None,
    tokenizer: Any,
    prompt_ids: Sequence[int] | None = None,
    tools: Sequence[Any] | None = None,
    prompt_text: str | None = None,
) -> ResponseTemplatePipeline:
    template = _template_for(tokenizer)
    stream = ResponseTemplateStream(
        template, reasoning=reasoning == HF, tools=tool == HF, request_tools=tools,
        prefix=_prefix(tokenizer, prompt_text, prompt_ids, template),
    )
    return ResponseTemplatePipeline(stream)
