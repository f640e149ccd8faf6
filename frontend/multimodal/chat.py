"""Chat messages with media parts -> template messages, loaded media, then engine features.

vLLM's chat_utils, step for step (vllm/renderers/chat_utils.py):
1. every content part is text or one media item (`image_url`, `input_image`, `image_embeds`,
   `input_audio`, `audio_url`, `video_url`); the item count per modality is checked against
   `--limit-mm-per-prompt` as each item is added, before anything is fetched;
2. for a chat template of content format "openai" (it loops over the content parts) a media
   part becomes `{"type": "<modality>"}` and text parts stay `{"type": "text", ...}` (a string
   content becomes one text part); for format "string" the message's texts are joined with
   "\\n" and the model's placeholder strings (`get_placeholder_str`) that the text does not
   already hold are put in front, one per line;
3. the media are fetched and decoded (frontend/media, off the event loop), all at once;
4. the rendered prompt's token ids and the media go through the model's processor
   (frontend/multimodal/model.py) in the pool: prompt ids with placeholders expanded and the
   engine's `mm_features`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from vllm_pyfrontend.errors import APIError

# content part type -> modality
MEDIA_PARTS = {
    "image_url": "image",
    "input_image": "image",
    "image_embeds": "image",
    "input_audio": "audio",
    "audio_url": "audio",
    "video_url": "video",
}
TEXT_PARTS = ("text", "input_text", "output_text")

# config.json keys of vision/audio language models: a worker with one of these loads the
# processor in the background at start (any other model loads it on its first media request).
_MM_CONFIG_KEYS = ("vision_config", "audio_config", "vision_tower", "mm_vision_tower", "image_token_id",
                   "image_token_index", "video_token_id", "audio_token_id", "speech_config")


def has_media(messages: Any) -> bool:
    """Whether any message has a media content part (cheap; no imports)."""
    if not isinstance(messages, list):
        return False
    for msg in messages:
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") in MEDIA_PARTS:
                    return True
    return False


_MM_ARCH_HINTS = ("ConditionalGeneration", "VL", "Vision", "Audio", "Omni", "Speech", "Llava", "MiniCPMV",
                  "InternVL", "Molmo", "Pixtral", "Idefics", "Phi3V", "Phi4MM", "Ultravox", "Chameleon")


def looks_multimodal(model_dir: str) -> bool:
    """Whether the model's config.json suggests a vision/audio model, read without importing
    anything. A media request to a model that does not look multimodal is refused as on a
    text-only model (no torch import); one that does builds vLLM's model config, which decides."""
    try:
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return False
    if not isinstance(cfg, dict):
        return False
    if any(k in cfg for k in _MM_CONFIG_KEYS):
        return True
    archs = cfg.get("architectures") or []
    return any(isinstance(a, str) and any(h in a for h in _MM_ARCH_HINTS) for a in archs)


@dataclass
class MediaPrompt:
    """A chat request's media, parsed: what the template renders and what gets processed."""

    messages: list[dict[str, Any]]
    modalities: list[str] = field(default_factory=list)
    loads: list[Any] = field(default_factory=list)  # coroutine functions, one per item, in order
    uuids: list[str | None] = field(default_factory=list)


class MultimodalRuntime:
    """One per worker, created on the first media request (or at start for a model whose
    config names a vision/audio tower): the pool, vLLM's processor and the media loader."""

    def __init__(self, config: Any, template_source: str | None, engine: Any):
        from concurrent.futures import ThreadPoolExecutor

        from vllm_pyfrontend.multimodal.model import MultimodalModel

        self.config = config
        workers = config.policy.mm_workers or 0
        if workers <= 0:
            from vllm_pyfrontend.media import default_mm_workers

            workers = default_mm_workers()
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mm")
        self.model = MultimodalModel(
            config.model, list(config.engine_args),
            num_workers=config.num_workers, num_engines=max(1, len(config.engine_indices)),
            template_source=template_source,
        )
        self._ready: asyncio.Future | None = None
        self.loader = None
        self.engine = engine

    async def ready(self):
        """The loaded model (built once, in the pool)."""
        if self._ready is None:
            self._ready = asyncio.get_running_loop().run_in_executor(self.pool, self.model.load)
        model = await asyncio.shield(self._ready)
        if self.loader is None and model.supported:
            self.loader = _make_loader(model, self.pool, self.config)
            if model.cache_mode == "lru":
                # An item sent by hash only that the engine no longer holds (the two LRUs
                # drifted): the engine fails that request and names the hashes; they go in
                # full next time (vLLM's recovery, AsyncLLM's output handler).
                self.engine.on_mm_cache_miss = model.invalidate
        return model

    def start_loading(self) -> None:
        if self._ready is None:
            self._ready = asyncio.get_running_loop().run_in_executor(self.pool, self.model.load)


def _make_loader(model, pool, config):
    """The media loader with this worker's media flags (frontend/media's policy: where media
    may come from, size/time/redirect limits, private addresses), filled in from vLLM's
    model-config fields where the worker's own flags left them unset (the drop-in path)."""
    from vllm_pyfrontend.media import MediaLoader, MediaPolicy

    policy = MediaPolicy.from_config(config)
    mc = model.model_config
    mm = mc.get_multimodal_config()
    if policy.allowed_local_media_path is None and mc.allowed_local_media_path:
        policy.allowed_local_media_path = mc.allowed_local_media_path
    if not policy.allowed_media_domains and mc.allowed_media_domains:
        policy.allowed_media_domains = [d.lower().rstrip(".") for d in mc.allowed_media_domains]
    if not policy.media_io_kwargs and mm.media_io_kwargs:
        policy.media_io_kwargs = dict(mm.media_io_kwargs)
    return MediaLoader(policy, pool)


class Multimodal:
    """The worker's multimodal processing, a service of its state from the start: the runtime
    (pool, processor, media loader) is built on the first media request, or at start for a
    model that looks multimodal; a text-only worker never builds it (no torch import)."""

    def __init__(self, config: Any, template_source: str | None, engine: Any):
        self._config = config
        self._template_source = template_source
        self._engine = engine
        self.runtime: MultimodalRuntime | None = None

    @property
    def active(self) -> bool:
        """Whether the runtime was built (the worker processes media)."""
        return self.runtime is not None

    def may_serve(self) -> bool:
        """Whether media could be served: the runtime is built, or the model looks multimodal
        (decided from config.json alone)."""
        return self.runtime is not None or looks_multimodal(self._config.model)

    def get(self) -> MultimodalRuntime:
        if self.runtime is None:
            self.runtime = MultimodalRuntime(self._config, self._template_source, self._engine)
        return self.runtime

    def start_loading(self) -> None:
        """At worker start: vLLM's processor for a model that looks like a vision/audio model,
        built in the pool while the worker already serves (a text-only model: nothing)."""
        if looks_multimodal(self._config.model):
            self.get().start_loading()


def _missing_placeholders_first(placeholders: list[str], texts: list[str]) -> str:
    """vLLM's `_get_full_multimodal_text_prompt` without interleaving."""
    text = "\n".join(texts)
    counts = Counter(placeholders)
    missing: list[str] = []
    for ph, n in counts.items():
        n -= text.count(ph)
        if n < 0:
            raise APIError(400, f"Found more '{ph}' placeholders in input prompt than actual multimodal data items.",
                           "messages")
        missing.extend([ph] * n)
    return "\n".join(missing + [text]) if text else "\n".join(missing)


def parse_messages(model: Any, loader: Any, messages: list[dict[str, Any]],
                   io_kwargs: dict[str, Any] | None = None) -> MediaPrompt:
    """Step 1 and 2 (no I/O yet: `load` starts the loads)."""
    out = MediaPrompt(messages=[])
    _parse_into(out, model, loader, messages, io_kwargs)
    return out


def _parse_into(out: MediaPrompt, model: Any, loader: Any, messages: list[dict[str, Any]],
                io_kwargs: dict[str, Any] | None = None) -> None:
    openai = model.content_format == "openai"
    counts: Counter[str] = Counter()
    mm_config = model.model_config.get_multimodal_config()
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise APIError(400, f"messages[{i}] must be an object.", "messages")
        content = msg.get("content")
        if not isinstance(content, list):
            if openai and isinstance(content, str):
                msg = {**msg, "content": [{"type": "text", "text": content}]}
            out.messages.append(msg)
            continue
        parts: list[dict[str, Any]] = []
        texts: list[str] = []
        placeholders: list[str] = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in TEXT_PARTS:
                text = part.get("text")
                if not isinstance(text, str):
                    raise APIError(400, f"messages[{i}].content: text part without a string `text`.", "messages")
                if openai:
                    parts.append({"type": "text", "text": text})
                else:
                    texts.append(text)
                continue
            modality = MEDIA_PARTS.get(kind)
            if modality is None:
                raise APIError(400, f"messages[{i}].content: unsupported content part type {kind!r}.", "messages")
            if modality not in model.supported_modalities:
                raise APIError(400, f"The model does not support {modality} inputs.", "messages")
            counts[modality] += 1
            try:
                model.validate_count(modality, counts[modality])
            except ValueError as e:
                raise APIError(400, str(e), "messages") from None
            out.modalities.append(modality)
            out.loads.append(_load(loader, kind, part, mm_config, i, io_kwargs))
            uuid = part.get("uuid")
            out.uuids.append(None if uuid is None else str(uuid))
            if openai:
                parts.append({"type": modality})
            else:
                ph = model.placeholder(modality, counts[modality])
                if ph is not None:
                    placeholders.append(ph)
        m = dict(msg)
        m["content"] = parts if openai else _missing_placeholders_first(placeholders, texts)
        out.messages.append(m)


def _load(loader: Any, kind: str, part: dict[str, Any], mm_config: Any, i: int, io_kwargs: dict[str, Any] | None = None):
    """The coroutine function that loads one part's item (vLLM's MM_PARSER_MAP and parse_* calls);
    `io_kwargs`: a request's own media_io_kwargs (with --trust-request-mm-kwargs)."""
    where = f"messages[{i}].content"
    if kind in ("image_url", "audio_url", "video_url"):
        value = part.get(kind)
        url = value.get("url") if isinstance(value, dict) else value
        if not isinstance(url, str):
            raise APIError(400, f"{where}: `{kind}.url` must be a string.", "messages")
        if kind == "image_url":
            return partial(loader.fetch_image, url, io_kwargs)
        if kind == "audio_url":
            return partial(loader.load_audio, url, io_kwargs)
        return partial(loader.load_video, url, io_kwargs)
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise APIError(400, f"{where}: `image_url` of an input_image part must be a string.", "messages")
        return partial(loader.fetch_image, url, io_kwargs)
    if kind == "input_audio":
        value = part.get("input_audio")
        if not isinstance(value, dict) or not isinstance(value.get("data"), str):
            raise APIError(400, f"{where}: `input_audio` must be an object with base64 `data`.", "messages")
        return partial(loader.load_input_audio, value["data"], str(value.get("format") or ""), io_kwargs)
    # image_embeds
    if not mm_config.enable_mm_embeds:
        raise APIError(400, "You must set `--enable-mm-embeds` to input `image_embeds`.", "messages")
    value = part.get("image_embeds")
    if isinstance(value, str):
        return partial(loader.load_image_embeds, value)
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return partial(_load_embeds_dict, loader, value)
    raise APIError(400, f"{where}: `image_embeds` must be a base64 string or an object of them.", "messages")


async def _load_embeds_dict(loader: Any, value: dict[str, str]) -> dict[str, Any]:
    loaded = await asyncio.gather(*(loader.load_image_embeds(v) for v in value.values()))
    return dict(zip(value.keys(), loaded))


async def load(prompt: MediaPrompt) -> tuple[dict[str, list[Any]], dict[str, list[str | None]] | None]:
    """Step 3: every item at once; the first failure is the request's 4xx."""
    from vllm_pyfrontend.media import MediaError

    results = await asyncio.gather(*(start() for start in prompt.loads), return_exceptions=True)
    for r in results:
        if isinstance(r, MediaError):
            raise APIError(r.status, r.message, "messages")
        if isinstance(r, BaseException):
            raise r
    data: dict[str, list[Any]] = {}
    uuids: dict[str, list[str | None]] = {}
    for modality, item, uuid in zip(prompt.modalities, results, prompt.uuids):
        data.setdefault(modality, []).append(item)
        uuids.setdefault(modality, []).append(uuid)
    return data, (uuids if any(u is not None for u in prompt.uuids) else None)


async def prepare_chat(multimodal: Multimodal, messages: list[dict[str, Any]],
                       io_kwargs: dict[str, Any] | None = None) -> tuple[Any, MediaPrompt]:
    """Parse a media request's messages (step 1-2). Returns the runtime's model and the parsed
    prompt; a text-only model answers 400 as before."""
    if not multimodal.may_serve():
        raise APIError(400, "Content parts with media are not supported by this text-only model.", "messages")
    rt = multimodal.get()
    try:
        model = await rt.ready()
    except Exception as e:  # noqa: BLE001 - a model vLLM cannot build a processor for
        raise APIError(500, f"The multimodal processor could not be loaded: {e}") from None
    if not model.supported:
        raise APIError(400, "Content parts with media are not supported by this text-only model.", "messages")
    return model, parse_messages(model, rt.loader, messages, io_kwargs)


async def process(multimodal: Multimodal, model: Any, prompt: MediaPrompt, prompt_ids: list[int],
                  mm_processor_kwargs: dict[str, Any] | None = None, lora_name: str | None = None):
    """Steps 3 and 4: load the media, then the processor in the pool. Returns `Processed`."""
    data, uuids = await load(prompt)
    rt = multimodal.get()
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(rt.pool, model.process, prompt_ids, data, uuids,
                                          mm_processor_kwargs, lora_name)
    except (ValueError, TypeError, KeyError) as e:
        raise APIError(400, f"The media could not be processed: {e}", "messages") from None


def strip_media(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with media parts left out, for the text path's role and shape checks."""
    out = []
    for msg in messages:
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list):
            msg = {**msg, "content": [p for p in content if not (isinstance(p, dict) and p.get("type") in MEDIA_PARTS)]}
        out.append(msg)
    return out


def lora_name_of(lora_request: Any) -> str | None:
    """The adapter name of vLLM's LoRARequest positional array (frontend/llm/lora.py)."""
    if isinstance(lora_request, (list, tuple)) and lora_request and isinstance(lora_request[0], str):
        return lora_request[0]
    return None
