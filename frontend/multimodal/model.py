"""The model's multimodal processing, as vLLM's frontend does it (runs in the pool only).

Everything here imports vLLM (and so torch and transformers) and is built on first use in
a pool thread, only for a model vLLM's registry calls multimodal: a text-only worker never
imports it. The pieces are vLLM's own, so the prompt token ids, hashes, placeholder ranges
and tensors are the ones vLLM's API server would send:

- vLLM's `ModelConfig` from the same engine flags the engine was started with
  (`--limit-mm-per-prompt`, `--mm-processor-kwargs`, `--mm-processor-cache-gb`, ...), parsed
  by vLLM's own `EngineArgs`;
- the processor from `MULTIMODAL_REGISTRY.create_processor` (what vLLM's renderer uses),
  applied to the rendered prompt's token ids and the decoded media;
- the placeholder string per item from the model class (`get_placeholder_str`), and the chat
  template's content format ("string" or "openai") detected as vLLM detects it.

The processor cache follows vLLM's protocol (vllm/multimodal/cache): see `sender_cache_mode`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from vllm_pyfrontend.multimodal.encode import FeatureEncoder

log = logging.getLogger(__name__)


def sender_cache_mode(cache_gb: float, cache_type: str, *, num_workers: int, num_engines: int) -> str | None:
    """Which processor cache this worker keeps, as vLLM's `_get_cache_type` decides it for
    its API servers.

    - None: the cache is off (`--mm-processor-cache-gb 0`).
    - "lru": the key-replicated sender cache. The engine keeps the processed items in an LRU
      of the same size, and each side updates its LRU in the same order, so an item this
      worker has sent before is sent by hash only (`data` None) and the engine fills it in.
      That mirror holds only when this worker is the engine's one sender: vLLM uses it with
      one API server and one engine (or an external DP load balancer).
    - "processor_only": the processed item is cached here (no HF processor run again for the
      same media) but always sent in full. vLLM falls back to it with several API servers, as
      several frontend workers here are: each worker's LRU sees only its own requests, so no
      worker can know what the engine's shared LRU holds. Also for "shm", whose shared
      memory object store belongs to vLLM's API-server process layout.
    """
    if cache_gb <= 0:
        return None
    if cache_type == "lru" and num_workers == 1 and num_engines == 1:
        return "lru"
    return "processor_only"


@dataclass
class Processed:
    prompt_ids: list[int]
    features: list[dict[str, Any]]  # mm_features as vLLM encodes them
    aux: list[Any]  # out-of-band frames the features refer to
    hashes: list[str]


class MultimodalModel:
    """vLLM's processor for one model. `load()` (in the pool) builds it; `None` from
    `load()` means the model is not multimodal."""

    def __init__(self, model: str, engine_args: list[str], *, num_workers: int, num_engines: int,
                 template_source: str | None = None):
        self.model = model
        self.engine_args = list(engine_args)
        self.num_workers = num_workers
        self.num_engines = num_engines
        self.template_source = template_source
        self._lock = threading.Lock()
        self._cache_lock = threading.Lock()  # the sender cache (lru mode): one user at a time
        self._loaded = False
        self.supported = False
        self.model_config: Any = None
        self.processor: Any = None
        self.cache: Any = None
        self.cache_mode: str | None = None
        self.content_format = "string"
        self.limits: dict[str, int] = {}
        self.supported_modalities: set[str] = set()
        self.interleave_strings = False
        self._model_cls: Any = None

    # ------------------------------------------------------------------------------ build
    def load(self) -> "MultimodalModel":
        with self._lock:
            if not self._loaded:
                self._load()
                self._loaded = True
        return self

    def _load(self) -> None:
        from vllm.engine.arg_utils import EngineArgs
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        parser = EngineArgs.add_cli_args(FlexibleArgumentParser(add_help=False))
        ns, _unknown = parser.parse_known_args(["--model", self.model, *self.engine_args])
        model_config = EngineArgs.from_cli_args(ns).create_model_config()
        self.model_config = model_config
        if not model_config.is_multimodal_model:
            return
        from vllm.model_executor.model_loader import get_model_cls
        from vllm.multimodal import MULTIMODAL_REGISTRY
        from vllm.tokenizers import cached_tokenizer_from_config

        tokenizer = cached_tokenizer_from_config(model_config)
        self.processor = MULTIMODAL_REGISTRY.create_processor(model_config, tokenizer=tokenizer)
        self._model_cls = get_model_cls(model_config)
        mm_config = model_config.get_multimodal_config()
        self.interleave_strings = bool(mm_config.interleave_mm_strings)
        self.supported_modalities = set(self.processor.info.get_supported_mm_limits())
        self.cache_mode = sender_cache_mode(
            mm_config.mm_processor_cache_gb, mm_config.mm_processor_cache_type,
            num_workers=self.num_workers, num_engines=self.num_engines,
        )
        if self.cache_mode == "lru":
            from vllm.multimodal.cache.lru import LruKeyReplicatedSenderCache

            self.cache = LruKeyReplicatedSenderCache(model_config)
        elif self.cache_mode == "processor_only":
            from vllm.multimodal.cache.base import MultiModalProcessorOnlyCache

            self.cache = MultiModalProcessorOnlyCache(model_config)
        if self.template_source:
            try:
                from vllm.renderers.hf import _detect_content_format

                self.content_format = _detect_content_format(self.template_source, default="string")
            except Exception:  # noqa: BLE001 - vLLM's default when the template cannot be parsed
                self.content_format = "string"
        self.supported = True
        log.info("multimodal: %s, content format %s, processor cache %s",
                 type(self.processor).__name__, self.content_format, self.cache_mode or "off")

    # ------------------------------------------------------------------------------ chat
    def placeholder(self, modality: str, index: int) -> str | None:
        """The prompt text for item `index` (1-based) of `modality` (vLLM's
        `get_placeholder_str`); None: the model puts its placeholders itself."""
        return self._model_cls.get_placeholder_str(modality, index)

    def validate_count(self, modality: str, count: int) -> None:
        """vLLM's `--limit-mm-per-prompt` check (raises ValueError)."""
        from vllm.exceptions import VLLMClientError

        try:
            self.processor.info.validate_num_items(modality, count)
        except VLLMClientError as e:
            raise ValueError(str(e)) from None

    # ------------------------------------------------------------------------------ process
    def process(self, prompt_ids: list[int], mm_data: dict[str, list[Any]],
                mm_uuids: dict[str, list[str | None]] | None = None,
                mm_processor_kwargs: dict[str, Any] | None = None,
                lora_name: str | None = None) -> Processed:
        """The processor's output for one prompt, as the engine's mm_features."""
        from vllm.multimodal.processing import ProcessorInputs
        from vllm.multimodal.processing.context import TimingContext
        from vllm.multimodal.utils import argsort_mm_positions

        processor = self.processor
        items = processor.info.parse_mm_data(mm_data)
        inputs = ProcessorInputs(
            prompt_ids, items, mm_uuids or None,
            hf_processor_mm_kwargs=mm_processor_kwargs or {},
            cache=self.cache,
        )
        # The sender cache must see items in the order they are sent: one at a time.
        from vllm.exceptions import VLLMClientError

        try:
            with self._cache_lock if self.cache_mode == "lru" else _NO_LOCK:
                out = processor.apply(inputs, TimingContext(enabled=False))
        except VLLMClientError as e:  # the request's fault (vLLM answers 400)
            raise ValueError(str(e)) from None
        kwargs, placeholders, hashes = out["mm_kwargs"], out["mm_placeholders"], out["mm_hashes"]
        enc = FeatureEncoder()
        features = []
        ordered_hashes = []
        for modality, idx in argsort_mm_positions(placeholders):
            mm_hash = hashes[modality][idx]
            pos = placeholders[modality][idx]
            features.append(enc.feature(
                data=kwargs[modality][idx], modality=modality,
                identifier=self._identifier(mm_hash, lora_name),
                offset=pos.offset, length=pos.length, is_embed=pos.is_embed, mm_hash=mm_hash,
            ))
            ordered_hashes.append(mm_hash)
        return Processed(list(out["prompt_token_ids"]), features, enc.aux, ordered_hashes)

    def _identifier(self, mm_hash: str, lora_name: str | None) -> str:
        # vLLM's InputProcessor._get_mm_identifier: LoRA-specific only with tower LoRA.
        lora_config = None
        if lora_name is not None:
            lora_config = getattr(self, "_lora_config", None)
        if lora_name is None or lora_config is None or not getattr(lora_config, "enable_tower_connector_lora", False):
            return mm_hash
        return f"{lora_name}:{mm_hash}"

    def invalidate(self, mm_hashes: list[str]) -> None:
        """The engine missed these hashes (sender/engine LRU drift): send them in full next."""
        if self.cache is not None:
            with self._cache_lock:
                for h in mm_hashes:
                    self.cache.invalidate(h)


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NO_LOCK = _NoLock()
