"""Per-worker serving state shared by the route handlers."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from typing import Any

from aiohttp import web

from vllm_pyfrontend.chat.assistant import AssistantStream
from vllm_pyfrontend.chat.template import ChatTemplate, ChatTemplateError
from vllm_pyfrontend.chat.tools import ToolPlan
from vllm_pyfrontend.parsers.auto import auto_reasoning_parser, auto_tool_parser
from vllm_pyfrontend.parsers.pipeline import make_assistant_stream
from vllm_pyfrontend.parsers.reasoning import reasoning_parser_names
from vllm_pyfrontend.parsers.tool import forced_tool_parser, tool_parser_names
from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.engine.client import EngineClient
from vllm_pyfrontend.llm.sampling import GenerationDefaults, ModelLimits
from vllm_pyfrontend.metrics import WorkerMetrics
from vllm_pyfrontend.server.errors import APIError
from vllm_pyfrontend.text.tokenizer import Tokenizer


class ServerState:
    def __init__(
        self,
        config: WorkerConfig,
        tokenizer: Tokenizer,
        template: ChatTemplate | None,
        engine: EngineClient,
        generation_defaults: GenerationDefaults,
    ):
        self.config = config
        self.worker_index = config.worker_index
        self.tokenizer = tokenizer
        self.template = template
        self.engine = engine
        self.generation_defaults = generation_defaults
        self.model_names = list(config.served_model_names) or [config.model]
        engine_len = engine.max_model_len
        self.max_model_len = min(engine_len, config.max_model_len) if config.max_model_len else engine_len
        # vLLM's form: "vllm-<version>-<hash>"; ours hashes the served model and its length.
        digest = hashlib.sha256(f"{config.model}|{self.max_model_len}".encode()).hexdigest()[:8]
        self.system_fingerprint: str | None = f"vllm-{engine.vllm_version}-{digest}"
        self.limits = ModelLimits(self.max_model_len, tokenizer.eos_token_id, generation_defaults)
        self.template_vars = tokenizer.template_vars()
        self.trust_request_chat_template = config.policy.trust_request_chat_template
        self._token_text: dict[int, str] = {}
        self.tool_parser: str | None = None
        self.reasoning_parser: str | None = None
        self._resolve_parsers()
        self.draining = False
        # Prometheus families of this worker (frontend/metrics); the request pipeline records
        # into `metrics.start_request()`, the worker tracks serving/draining.
        self.metrics = WorkerMetrics(self.model_names[0], list(config.engine_indices), self.max_model_len)
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    # -- request gates ---------------------------------------------------------------------
    async def read_body(self, request: web.Request) -> bytes:
        limit = self.config.max_request_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise APIError(413, f"Request body of {request.content_length} bytes exceeds the limit of {limit} bytes.")
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise APIError(413, f"Request body exceeds the limit of {limit} bytes.") from None

    def check_model(self, name: str | None) -> str:
        if name is None or name in self.model_names:
            return name or self.model_names[0]
        raise APIError(404, f"The model `{name}` does not exist.", "model")

    def check_engine(self) -> None:
        if self.draining:
            raise APIError(503, "The server is shutting down.")
        if not self.engine.healthy:
            raise APIError(503, "The engine is not available.")

    # -- prompt ---------------------------------------------------------------------------------
    def render_and_tokenize(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
        if self.template is None and kwargs.get("template_override") is None:
            raise APIError(
                400,
                "This model has no chat template; start the server with --chat-template.",
                "messages",
            )
        override = kwargs.pop("template_override", None)
        template = self.template
        if override is not None:
            try:
                template = ChatTemplate(override)
            except ChatTemplateError as e:
                raise APIError(400, f"Chat template error: {e}", "chat_template") from None
        try:
            text = template.render(messages, template_vars=self.template_vars, **kwargs)
        except ChatTemplateError as e:
            raise APIError(400, f"Chat template error: {e}", "messages") from None
        return self.tokenizer.encode(text, add_special_tokens=False)

    def token_text(self, token_id: int) -> str:
        """One token as text, for logprobs (vLLM decodes each id on its own)."""
        text = self._token_text.get(token_id)
        if text is None:
            text = self._token_text[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return text

    def _resolve_parsers(self) -> None:
        """--tool-call-parser / --reasoning-parser, with "auto" resolved from the model."""
        cfg = self.config
        model_type = None
        try:
            with open(os.path.join(cfg.model, "config.json"), encoding="utf-8") as f:
                model_type = json.load(f).get("model_type")
        except (OSError, ValueError):
            pass
        source = self.template.source if self.template is not None else None
        tool, reasoning = cfg.policy.tool_call_parser, cfg.policy.reasoning_parser
        if tool == "auto":
            tool = auto_tool_parser(source, model_type)
        if reasoning == "auto":
            reasoning = auto_reasoning_parser(source, model_type)
        if tool is not None and tool not in tool_parser_names():
            raise ValueError(f"unknown --tool-call-parser {tool!r}; known: {', '.join(tool_parser_names())}")
        if reasoning is not None and reasoning not in reasoning_parser_names():
            raise ValueError(f"unknown --reasoning-parser {reasoning!r}; known: {', '.join(reasoning_parser_names())}")
        self.tool_parser, self.reasoning_parser = tool, reasoning

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

    # -- lifecycle ------------------------------------------------------------------------------
    def request_started(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def request_finished(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False
