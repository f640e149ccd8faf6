"""`tools` and `tool_choice`: validation, and the structured-output schema that enforces a
forced choice ("required" or a named function) in the engine, as vLLM builds it
(vllm/tool_parsers/utils.py get_json_schema_from_tools)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any


class ToolChoiceError(ValueError):
    def __init__(self, message: str, param: str = "tool_choice"):
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class ToolPlan:
    """How one request treats tools.

    mode: "none" (no parsing), "auto" (the configured --tool-call-parser), "required" or
    "named" (the output is forced by `schema` and parsed by the forced-output parser).
    """

    mode: str
    named: str | None = None
    schema: dict[str, Any] | None = None
    parallel: bool = True


def validate_tools(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """name -> function definition, checking the OpenAI shape."""
    out: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise ToolChoiceError(f"tools[{i}] must be a function tool.", "tools")
        fn = tool.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ToolChoiceError(f"tools[{i}].function.name is required.", "tools")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise ToolChoiceError(f"tools[{i}].function.parameters must be a JSON schema object.", "tools")
        out[fn["name"]] = fn
    return out


def _params_or_empty(params: dict[str, Any] | None) -> dict[str, Any]:
    return params if params else {"type": "object", "properties": {}}


def required_schema(functions: dict[str, dict[str, Any]], parallel: bool) -> dict[str, Any]:
    """A JSON array of {"name", "parameters"} objects, one of the given functions each."""
    defs: dict[str, Any] = {}
    variants = []
    for name, fn in functions.items():
        params = copy.deepcopy(fn.get("parameters"))
        if params is not None:
            local = params.pop("$defs", {})
            if not isinstance(local, dict):
                raise ToolChoiceError(f"`$defs` in the parameters of tool '{name}' must be an object.", "tools")
            for def_name, schema in local.items():
                if def_name in defs and defs[def_name] != schema:
                    raise ToolChoiceError(f"Tool definition '{def_name}' has multiple schemas, which is not supported.", "tools")
                defs[def_name] = schema
        variants.append({
            "properties": {"name": {"type": "string", "enum": [name]}, "parameters": _params_or_empty(params)},
            "required": ["name", "parameters"],
        })
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": variants}}
    if not parallel:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


def plan_tools(
    tools: list[dict[str, Any]] | None,
    tool_choice: Any,
    *,
    parallel_tool_calls: bool | None,
    auto_enabled: bool,
    has_parser: bool,
) -> ToolPlan:
    functions = validate_tools(tools)
    parallel = parallel_tool_calls is not False
    if tool_choice is None:
        tool_choice = "auto" if functions else "none"
    if tool_choice == "none":
        return ToolPlan("none", parallel=parallel)
    if tool_choice == "auto":
        if not functions:
            return ToolPlan("none", parallel=parallel)
        if not (auto_enabled and has_parser):
            raise ToolChoiceError(
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
            )
        return ToolPlan("auto", parallel=parallel)
    if tool_choice == "required":
        if not functions:
            raise ToolChoiceError('tool_choice "required" needs at least one tool in `tools`.')
        return ToolPlan("required", schema=required_schema(functions, parallel), parallel=parallel)
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        # (`type` defaults to "function", as in vLLM's ChatCompletionNamedToolChoiceParam)
        if tool_choice.get("type", "function") != "function" or not isinstance(name, str):
            raise ToolChoiceError('tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}.')
        if name not in functions:
            raise ToolChoiceError(f"Tool '{name}' has not been passed in `tools`.")
        return ToolPlan("named", named=name, schema=_params_or_empty(functions[name].get("parameters")),
                        parallel=parallel)
    raise ToolChoiceError('tool_choice must be "none", "auto", "required" or a named function.')
