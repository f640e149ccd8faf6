"""Constrained decoding lowered to the engine's `structured_outputs` map.

vLLM's engine reads every key of `StructuredOutputsParams` and needs exactly one constraint
with a backend named; this module builds that full map from what a client asked for (vLLM's
`structured_outputs` extension and OpenAI's `response_format`), or from a tool choice that
forces a JSON schema. Choices become an EBNF grammar, as vLLM's frontend does for xgrammar.
"""

from __future__ import annotations

from typing import Any

from vllm_pyfrontend.errors import InvalidRequestError

STRUCTURED_KEYS = (
    "json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace",
    "disable_additional_properties", "whitespace_pattern", "structural_tag",
)  # fmt: skip
_BACKEND = {"_backend": "xgrammar", "_backend_was_auto": True}


def lower_structured_outputs(
    structured_outputs: dict[str, Any] | None, response_format: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The engine's map for vLLM's `structured_outputs` + OpenAI's `response_format`
    (`text`, `json_object`, `json_schema`); None when nothing constrains the output."""
    so: dict[str, Any] | None = None
    if structured_outputs:
        unknown = set(structured_outputs) - set(STRUCTURED_KEYS)
        if unknown:
            raise InvalidRequestError(f"Unknown structured_outputs keys: {sorted(unknown)}.", "structured_outputs")
        so = dict(structured_outputs)
    rf = response_format
    if rf is not None:
        kind = rf.get("type")
        if kind == "text":
            pass
        elif kind == "json_object":
            so = {**(so or {}), "json_object": True}
        elif kind == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict):
                raise InvalidRequestError(
                    "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
                    "response_format",
                )
            schema = js.get("schema", js.get("json_schema"))
            if not isinstance(schema, dict):
                raise InvalidRequestError("response_format.json_schema.schema must be an object.", "response_format")
            so = {**(so or {}), "json": schema}
        else:
            raise InvalidRequestError(f"response_format type {kind!r} is not supported.", "response_format")
    if so is None:
        return None
    if so.get("choice") is not None:
        choice = so["choice"]
        if not isinstance(choice, list) or not choice or not all(isinstance(c, str) for c in choice):
            raise InvalidRequestError("structured_outputs.choice must be a non-empty list of strings.",
                                      "structured_outputs")
        so = {**so, "choice": None, "grammar": choice_as_grammar(choice)}
    full = {k: so.get(k) for k in STRUCTURED_KEYS}
    full["disable_any_whitespace"] = bool(full["disable_any_whitespace"])
    full["disable_additional_properties"] = bool(full["disable_additional_properties"])
    full.update(_BACKEND)
    return full


def forced_json(schema: dict[str, Any]) -> dict[str, Any]:
    """A structured-outputs map that forces `schema` (a tool choice), in the engine's full form."""
    full: dict[str, Any] = {k: None for k in STRUCTURED_KEYS}
    full.update(json=schema, disable_any_whitespace=False, disable_additional_properties=False, **_BACKEND)
    return full


def _ebnf_literal(text: str) -> str:
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    out = []
    for ch in text:
        if ch in escapes:
            out.append(escapes[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def choice_as_grammar(choices: list[str]) -> str:
    """An EBNF grammar accepting exactly one of `choices`."""
    return "root ::= " + " | ".join(_ebnf_literal(c) for c in choices)
