"""Per-worker serving state shared by the route handlers."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from aiohttp import web

from vllm_pyfrontend.chat.template import ChatTemplate, ChatTemplateError
from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.engine.client import EngineClient
from vllm_pyfrontend.llm.sampling import GenerationDefaults, ModelLimits
from vllm_pyfrontend.metrics import WorkerMetrics
from vllm_pyfrontend.llm.lora import LoRAStore
from vllm_pyfrontend.model_config import ModelConfig
from vllm_pyfrontend.multimodal.chat import Multimodal
from vllm_pyfrontend.parsers.selection import ParserSelection
from vllm_pyfrontend.parsers.reasoning.plugin import load_reasoning_parser_plugin
from vllm_pyfrontend.parsers.tool.plugin import load_tool_parser_plugin
from vllm_pyfrontend import environment
from vllm_pyfrontend.serving.in_flight import InFlight
from vllm_pyfrontend.serving.scope import RequestScopes
from vllm_pyfrontend.serving.admission import REASONS as ADMISSION_REASONS, Admission
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.output_log import OutputLog
from vllm_pyfrontend.serving.sse import StreamDrain
from vllm_pyfrontend.tenants.api_keys import ApiKeys
from vllm_pyfrontend.tenants.key_table import TenantKeys
from vllm_pyfrontend.text.tokenizer import Tokenizer



def system_fingerprint(config: WorkerConfig, vllm_version: str, max_model_len: int) -> str | None:
    """vLLM's `--fingerprint-mode`: "full" `vllm-<version>[-tpN][-ppN][-dpN]-<hash8>`, "hash"
    without the parallelism, "custom" `--fingerprint-value`, "none" null. The hash covers the
    served model and its length (vLLM's covers its whole config, which a frontend cannot see)."""
    policy = config.policy
    mode = policy.fingerprint_mode
    if mode == "none":
        return None
    if mode == "custom":
        return policy.fingerprint_value
    digest = hashlib.sha256(f"{config.model}|{max_model_len}".encode()).hexdigest()[:8]
    parts = [f"vllm-{vllm_version}"]
    if mode == "full":
        for flag, tag in (("--tensor-parallel-size", "tp"), ("--pipeline-parallel-size", "pp")):
            size = config.engine_flag(flag)
            if size and size.isdigit() and int(size) > 1:
                parts.append(f"{tag}{size}")
        if len(config.engine_indices) > 1:
            parts.append(f"dp{len(config.engine_indices)}")
    return "-".join([*parts, digest])

def _stream_interval(value: str | None) -> int:
    """`--stream-interval` as forwarded to the engine (the supervisor refuses a value below 1)."""
    try:
        return max(int(value), 1) if value else 1
    except ValueError:
        return 1


class ServerState:
    def __init__(
        self,
        config: WorkerConfig,
        tokenizer: Tokenizer,
        template: ChatTemplate | None,
        engine: EngineClient,
        generation_defaults: GenerationDefaults,
        model_config: ModelConfig | None = None,
        tracer: Any = None,
        supported_tasks: tuple[str, ...] = ("generate",),
        pooling_model: Any = None,
        loras: LoRAStore | None = None,
    ):
        model_config = model_config or ModelConfig()
        self.config = config
        self.worker_index = config.worker_index
        self.tokenizer = tokenizer
        self.template = template
        self.engine = engine
        self.model_names = list(config.served_model_names) or [config.model]
        engine_len = engine.max_model_len
        self.max_model_len = min(engine_len, config.max_model_len) if config.max_model_len else engine_len
        self.system_fingerprint = system_fingerprint(config, engine.vllm_version, self.max_model_len)
        self.limits = ModelLimits(self.max_model_len, tokenizer.eos_token_id, generation_defaults,
                                  vocab_size=model_config.vocab_size or tokenizer.vocab_size)
        self.template_vars = tokenizer.template_vars()
        self.trust_request_chat_template = config.policy.trust_request_chat_template
        self._token_text: dict[int, str] = {}
        load_reasoning_parser_plugin(config.policy.reasoning_parser_plugin)
        if config.policy.tool_parser_plugin:  # registers its tool parsers before the name is looked up
            load_tool_parser_plugin(config.policy.tool_parser_plugin)
        self.parsers = ParserSelection.resolve(
            config.policy.tool_call_parser, config.policy.reasoning_parser, model_type=model_config.model_type,
            template_source=template.source if template is not None else None, tokenizer=tokenizer,
        )
        self.draining = False
        # vLLM's `--stream-interval` (an engine flag whose effect is the frontend's): a running
        # stream's chunk waits for this many tokens (the first and the last never wait); a
        # request's own `stream_interval` can raise it, not lower it.
        self.stream_interval = _stream_interval(config.engine_flag("--stream-interval"))
        # The engine's --max-logprobs (vLLM's default 20; -1: no bound): the derender routes hold
        # a generate response's top logprobs to it.
        self.max_logprobs = int(config.engine_flag("--max-logprobs") or 20)
        # vLLM's --enable-log-outputs (only with --enable-log-requests): generated outputs in the
        # request log; None: off.
        policy = config.policy
        self.output_log = (OutputLog(policy.enable_log_deltas, policy.max_log_len)
                           if policy.enable_log_outputs and policy.enable_log_requests else None)
        # Gathers the streams' writes of one drain of the engine's output into one write per
        # stream; the worker registers it with the engine client (`StreamDrain.hooks`), each
        # submitted request's writer joins it (serving/responder.py).
        self.drain = StreamDrain()
        # Each stream's backpressure bounds in bytes (serving/sse.py), read once.
        self.sse_limits = (environment.sse_soft_limit(), environment.sse_hard_limit())
        # The engine's tasks (vLLM's `get_supported_tasks` utility call) and, for a pooling
        # model, what the pooling routes know of it (api/pooling/model.py).
        self.supported_tasks = tuple(supported_tasks)
        self.pooling_model = pooling_model
        # Prometheus families of this worker (frontend/metrics); the request pipeline records
        # into `metrics.start_request()`, the worker tracks serving/draining.
        self.metrics = WorkerMetrics(self.model_names[0], list(config.engine_indices), self.max_model_len)
        # Requests in flight (serving/in_flight.py): the drain waits for them, /load reports them.
        self.load = InFlight(config.runtime_dir, config.worker_index, config.num_workers)
        policy = config.policy
        self.admission: Admission | None = None
        if policy.max_num_queued_reqs is not None or policy.max_num_queued_tokens is not None:
            self.admission = Admission(config.runtime_dir, config.worker_index, config.num_workers,
                                       policy.max_num_queued_reqs, policy.max_num_queued_tokens,
                                       on_reject=self.metrics.record_admission_rejection)
        for reason in ADMISSION_REASONS:  # both series from the start, at 0, bounds set or not (as vLLM)
            self.metrics.admission_rejections.labels(self.metrics.model_name, reason)
        # Named API keys and their quotas (frontend/tenants), with --api-keys-file: the auth
        # middleware looks keys up in it; the worker reloads it on SIGHUP.
        self.tenants: TenantKeys | None = None
        if policy.api_keys_file:
            self.tenants = TenantKeys(config.runtime_dir, config.worker_index, config.num_workers,
                                      config.api_keys, recorder=self.metrics.tenant_recorder(),
                                      fail_closed=policy.quota_store_url() is not None
                                      and policy.quota_store_failure == "closed")
            self.tenants.load()
        # Who a key is (the keys file's table, or the anonymous `--api-key` keys), for the paths
        # that authenticate outside the HTTP middleware (gRPC); None: no key is asked for.
        self.keys: TenantKeys | ApiKeys | None = self.tenants
        if self.keys is None and any(config.api_keys):
            self.keys = ApiKeys(config.api_keys)
        # Request spans (frontend/tracing.py), with --otlp-traces-endpoint.
        self.tracer = tracer
        # Every request runs in a scope (serving/scope.py) opened from these.
        self.scopes = RequestScopes(
            engine=engine, worker_index=config.worker_index, metrics=self.metrics, in_flight=self.load,
            admission=self.admission, tracer=tracer, log_requests=policy.enable_log_requests,
            max_log_len=policy.max_log_len, draining=lambda: self.draining)
        # The deployment's LoRA adapters (frontend/llm/lora.py; serving/lora.py `lora_store`),
        # None where adapters cannot be served.
        self.loras = loras
        # Media in chat (frontend/multimodal/chat.py): its runtime (pool, processor) is built
        # on the first media request, or at start for a model that looks multimodal.
        self.multimodal = Multimodal(config, template.source if template is not None else None, engine)

    # -- request gates ---------------------------------------------------------------------
    async def read_body(self, request: web.Request) -> bytes:
        limit = self.config.max_request_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise APIError(413, f"Request body of {request.content_length} bytes exceeds the limit of {limit} bytes.")
        timeout = self.config.policy.http_body_timeout
        try:
            if timeout <= 0:
                return await request.read()
            async with asyncio.timeout(timeout):
                return await request.read()
        except TimeoutError:
            # aiohttp writes the 408, reads what is left of the body for at most its lingering
            # time (10 s) and closes the connection.
            raise APIError(408, f"The request body did not arrive within {timeout:g} s.") from None
        except web.HTTPRequestEntityTooLarge:
            raise APIError(413, f"Request body exceeds the limit of {limit} bytes.") from None

    def check_model(self, name: str | None) -> str:
        if name is None or name in self.model_names:
            return name or self.model_names[0]
        if self.loras is not None and self.loras.get(name) is not None:
            return name  # a LoRA adapter (serving/lora.py)
        raise APIError(404, f"The model `{name}` does not exist.", "model")

    def check_generation(self) -> None:
        """Generation routes on a pooling model (embedding, classifier): a clear 400."""
        if "generate" not in self.supported_tasks:
            tasks = ", ".join(f"`{t}`" for t in self.supported_tasks) or "none"
            raise APIError(400, f"The model does not support generation (task `generate`); its tasks are "
                           f"{tasks}: use the pooling routes (/v1/embeddings, /classify, /score, ...).", "model")

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

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return self.load.count

    @property
    def server_load(self) -> int:
        """In-flight requests of the whole deployment (every worker's)."""
        return self.load.total()

    async def wait_idle(self, timeout: float) -> bool:
        return await self.load.wait_idle(timeout)


STATE = web.AppKey("state", ServerState)
"""Where the application keeps the worker's `ServerState`: `request.app[STATE]` is typed."""

