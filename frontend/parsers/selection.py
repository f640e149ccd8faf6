"""Which reasoning and tool-call parsers a server runs, and the assistant stream of a choice.

Resolved once per worker from `--reasoning-parser` / `--tool-call-parser` ("auto": from the chat
template and `config.json`); per choice, the tool plan of the request decides whether the tool
parser runs (`tool_choice: "auto"`), is replaced by the forced-call parser (`required` / a named
function), or is left out (`none`). Every API style that produces assistant messages builds its
streams here.
"""

from __future__ import annotations

from typing import Any

from vllm_pyfrontend.chat.assistant import AssistantStream
from vllm_pyfrontend.chat.tools import ToolPlan
from vllm_pyfrontend.parsers.auto import auto_reasoning_parser, auto_tool_parser
from vllm_pyfrontend.parsers.pipeline import make_assistant_stream
from vllm_pyfrontend.parsers.reasoning import reasoning_parser_names
from vllm_pyfrontend.parsers.response_template import check_hf_selection
from vllm_pyfrontend.parsers.tool import forced_tool_parser, tool_parser_names


class ParserSelection:
    def __init__(self, tool_parser: str | None, reasoning_parser: str | None, tokenizer: Any):
        if tool_parser is not None and tool_parser not in tool_parser_names():
            raise ValueError(f"unknown --tool-call-parser {tool_parser!r}; known: {', '.join(tool_parser_names())}")
        if reasoning_parser is not None and reasoning_parser not in reasoning_parser_names():
            raise ValueError(f"unknown --reasoning-parser {reasoning_parser!r}; "
                             f"known: {', '.join(reasoning_parser_names())}")
        check_hf_selection(tool_parser, reasoning_parser, tokenizer)  # `hf`: a servable response_template
        self.tool_parser = tool_parser
        self.reasoning_parser = reasoning_parser
        self.tokenizer = tokenizer

    @classmethod
    def resolve(cls, tool: str | None, reasoning: str | None, *, model_type: str | None,
                template_source: str | None, tokenizer: Any) -> "ParserSelection":
        """The flags' names, with "auto" resolved from the model (`config.json`'s model_type
        and the chat template)."""
        if "auto" in (tool, reasoning):
            if tool == "auto":
                tool = auto_tool_parser(template_source, model_type)
            if reasoning == "auto":
                reasoning = auto_reasoning_parser(template_source, model_type)
        return cls(tool, reasoning, tokenizer)

    def uses_parsers(self, plan: ToolPlan | None) -> bool:
        return self.reasoning_parser is not None or (plan is not None and plan.mode != "none" and (
            plan.mode != "auto" or self.tool_parser is not None))

    def new_assistant_stream(self, plan: ToolPlan | None = None, prompt_ids=None, template_kwargs=None,
                             tools=None):
        """Per choice: the reasoning parser, then the tool parser this request's plan needs."""
        if plan is None or not self.uses_parsers(plan):
            return AssistantStream()
        tool = self.tool_parser if plan.mode == "auto" else None
        stream = make_assistant_stream(self.reasoning_parser, tool, self.tokenizer, prompt_ids,
                                       template_kwargs, tools)
        if plan.mode in ("required", "named"):
            stream.tool = forced_tool_parser(plan.named)
        return stream
