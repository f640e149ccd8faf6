"""POST /v1/audio/transcriptions and /v1/audio/translations, as vLLM's Python server has them.

Steps (vLLM's `SpeechToTextBaseServing._create_speech_to_text`, in its order):
1. the multipart form (`form.py`; read with the bounds of vLLM's form parser by
   `serving/multipart.py`), the upload read up to `VLLM_MAX_AUDIO_CLIP_FILESIZE_MB` (vLLM's
   variable and default, 25 MB) without holding more than that;
2. the model name, the engine, the model's support (a model whose class is not a
   `SupportsTranscription` has no such routes in vLLM: 404 here too; a text-only worker
   decides that from config.json and never imports torch), the response format;
3. in the multimodal pool (`model.py`): the language check, decoding and resampling, chunking,
   language detection when the model detects it and none was given (one engine request
   restricted to the language tokens), then the model's prompt per chunk through vLLM's
   processor into `mm_features`;
4. one engine request per chunk (the same sampling for each: vLLM's defaults for these routes,
   `max_completion_tokens`, greedy by default), answered as one JSON body (the chunks' texts
   joined by the model's separator; `verbose_json`: Whisper-style timestamp segments from
   the sampled logprobs) or as SSE `transcription.chunk` / `translation.chunk` events with
   optional usage, then `data: [DONE]`.

Every 4xx is decided before anything reaches the engine.
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
import time
from typing import Any

from aiohttp import web

from vllm_pyfrontend import environment
from vllm_pyfrontend.engine.types import Failure
from vllm_pyfrontend.llm.generation import DeltaConsumer
from vllm_pyfrontend.llm.sampling import SamplingOptions, lower_sampling, resolve_max_tokens
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.api.speech.form import FormError, SpeechRequest, check_request, parse_form
from vllm_pyfrontend.api.speech.service import SPEECH, SpeechService
from vllm_pyfrontend.text.text_stream import TextStream
from vllm_pyfrontend.serving.multipart import FormLimits, MultipartReader, media_type, read_urlencoded
from vllm_pyfrontend.serving.scope import RequestScope
from vllm_pyfrontend.serving.state import STATE

_MiB = 1024 * 1024


def _dumps(obj: Any) -> bytes:
    # Starlette's JSONResponse: compact, non-ASCII kept.
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def upload_limit_bytes() -> int:
    """vLLM's `VLLM_MAX_AUDIO_CLIP_FILESIZE_MB` (MB; default 25)."""
    return int(environment.max_audio_clip_filesize_mb() * _MiB)


async def read_form(request: web.Request, limit: int, body_limit: int | None = None) -> list[tuple[str, Any]]:
    """The form's fields, the file part as `(filename, bytes)`, read with the bounds of vLLM's
    form parser (`serving/multipart.py`: at most 1,000 fields and 1,000 files, a field at most
    1 MiB, no nested multipart: 400). The file is read in chunks up to `limit` bytes (vLLM's
    `read_upload_with_limit`: 400 "Maximum file size exceeded"; the rest of a larger file is
    drained, not kept, to name its size as vLLM does), the whole body up to `body_limit` (413,
    as every route's body)."""
    limits = FormLimits(max_body=body_limit)
    kind = media_type(request.headers.get("Content-Type"))
    if kind == "application/x-www-form-urlencoded":
        return list(await read_urlencoded(request.content, limits))
    if kind != "multipart/form-data":
        return []
    fields: list[tuple[str, Any]] = []
    reader = MultipartReader.from_request(request, limits)
    while (part := await reader.next()) is not None:
        if not part.is_file:
            fields.append((part.name, await part.text()))
            continue
        chunks: list[bytes] = []
        kept = 0
        async for chunk in part.chunks():  # bounded by body_limit past `limit`
            if kept + len(chunk) <= limit:
                chunks.append(chunk)
            kept += len(chunk)
        if part.size > limit:  # vLLM's message names the file's whole size
            raise APIError(400, f"Maximum file size exceeded (parameter=audio_filesize_mb, "
                           f"value={part.size / _MiB})", "audio_filesize_mb")
        fields.append((part.name, (part.filename, b"".join(chunks))))
    return fields


async def read_form_timed(request: web.Request, state: Any) -> list[tuple[str, Any]]:
    """`read_form` within the body timeout every route has (`--http-body-timeout`: 408)."""
    body_limit = state.config.max_request_body_bytes
    if request.content_length is not None and request.content_length > body_limit:
        raise APIError(413, f"Request body of {request.content_length} bytes exceeds the limit of {body_limit} bytes.")
    timeout = state.config.policy.http_body_timeout
    if timeout <= 0:
        return await read_form(request, upload_limit_bytes(), body_limit)
    try:
        async with asyncio.timeout(timeout):
            return await read_form(request, upload_limit_bytes(), body_limit)
    except TimeoutError:
        raise APIError(408, f"The request body did not arrive within {timeout:g} s.") from None


# ----------------------------------------------------------------------------------- engine
class _Chunk(DeltaConsumer):
    """The output of one engine request (one audio chunk)."""

    def __init__(self, state: Any, prompt_ids: list[int], index: int, queue: asyncio.Queue | None):
        self.index = index
        self.prompt_ids = prompt_ids
        self.text = TextStream(state.tokenizer.new_detokenizer(prompt_ids), [])
        self.parts: list[str] = []
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.done = asyncio.get_running_loop().create_future()
        self.queue = queue
        self.gen: Any = None
        self.metrics: Any = None  # RequestMetrics of its engine request (frontend/metrics)

    # GenerationConsumer
    def on_delta(self, gen, token_ids, logprobs, finish_reason, stop_reason) -> None:
        if token_ids and self.metrics is not None:
            self.metrics.on_output()
        text, _ = self.text.feed(list(token_ids), finish_reason == "stop")
        if finish_reason is not None and finish_reason != "stop":
            text += self.text.finish()
        self.token_ids.extend(token_ids)
        if logprobs is not None:
            self.logprobs.extend(row[0] for row in logprobs.logprobs)
        self.parts.append(text)
        if self.queue is not None:
            self.queue.put_nowait((self.index, text, list(token_ids), finish_reason, stop_reason))
        if finish_reason is not None and not self.done.done():
            self.done.set_result(finish_reason)

    def on_error(self, gen, failure: Failure) -> None:
        err = APIError(500, failure.message)
        if self.queue is not None:
            self.queue.put_nowait((self.index, err, [], "error", None))
        if not self.done.done():
            self.done.set_exception(err)


class _Router(DeltaConsumer):
    """Routes a Generation's outputs to its chunk."""

    def __init__(self, chunks: list[_Chunk]):
        self.chunks = chunks

    def on_delta(self, gen, *args) -> None:
        self.chunks[gen.index].on_delta(gen, *args)

    def on_error(self, gen, failure) -> None:
        self.chunks[gen.index].on_error(gen, failure)


def _submit(state: Any, scope: RequestScope, request_id: str, rendered: list[Any], sampling: dict[str, Any],
            queue: asyncio.Queue | None) -> list[_Chunk]:
    """One engine request per audio chunk, all sent or none, in the request's scope (admitted,
    counted, metrics; aborted with it if the request ends first)."""
    chunks = [_Chunk(state, r.prompt_ids, i, queue) for i, r in enumerate(rendered)]
    items = []
    for i, r in enumerate(rendered):
        params = dict(sampling)
        # vLLM sends max_tokens counted without the decoder prompt (up to max_model_len) and
        # the engine stops at max_model_len: the same output as asking for what fits.
        params["max_tokens"] = max(1, min(params["max_tokens"], state.max_model_len - len(r.prompt_ids)))
        items.append((i, r.prompt_ids, params, None))
    sub = scope.submit(_Router(chunks), items, id_prefix="stt",
                       external_id=[request_id if len(rendered) == 1 else f"{request_id}-{i}"
                                    for i in range(len(rendered))],
                       multimodal_per_item=[r.processed for r in rendered])
    for chunk, (_, gen) in zip(chunks, sub.requests):
        chunk.gen = gen
        chunk.metrics = gen.metrics
    return chunks


def _sampling(state: Any, req: SpeechRequest, *, logprobs: bool) -> dict[str, Any]:
    """vLLM's `to_sampling_params` for these routes, lowered as every route lowers it."""
    max_tokens = resolve_max_tokens(req.max_completion_tokens, 0, state.max_model_len, state.limits.defaults)
    opts = SamplingOptions(
        max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p, top_k=req.top_k, min_p=req.min_p,
        seed=req.seed, presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty,
        repetition_penalty=req.repetition_penalty, include_stop_str_in_output=req.include_stop_str_in_output,
        extra_args=dict(req.vllm_xargs) if req.vllm_xargs else None,
    )
    params = lower_sampling(opts, max_tokens=max_tokens, eos_token_id=state.limits.eos_token_id,
                            defaults=state.limits.defaults)
    if logprobs:
        params["logprobs"] = 1
    return params


async def _detect_language(state: Any, scope: RequestScope, speech: SpeechService, sm: Any, chunk: Any, task: str,
                           request_id: str) -> str:
    rendered, allowed = await speech.in_pool(sm.detection_prompt, chunk, task)
    opts = SamplingOptions(max_tokens=1, temperature=0.0, allowed_token_ids=allowed)
    params = lower_sampling(opts, max_tokens=1, eos_token_id=state.limits.eos_token_id,
                            defaults=state.limits.defaults)
    chunks = _submit(state, scope, f"{request_id}-lang_detect", [rendered], params, None)
    await chunks[0].done
    return await speech.in_pool(sm.parse_detection, chunks[0].token_ids)


# ----------------------------------------------------------------------------------- handler
async def handle_speech(request: web.Request, task: str) -> web.StreamResponse:
    state = request.app[STATE]
    style = "audio.transcriptions" if task == "transcribe" else "audio.translations"
    async with state.scopes.http(request, style) as scope:
        return await _handle_speech(request, state, scope, task)


async def _handle_speech(request: web.Request, state: Any, scope: RequestScope, task: str) -> web.StreamResponse:
    # vLLM registers these routes only for a transcription model: for any other, 404 whatever
    # the body (decided from config.json alone on a text-only model).
    speech = request.app[SPEECH]
    sm = await speech.model()
    if sm is None:
        raise web.HTTPNotFound()
    fields = await read_form_timed(request, state)
    try:
        req = parse_form(task, fields)
    except FormError as e:
        if e.param == "file":  # vLLM's model validator raises HTTPException(422) for it
            raise APIError(422, e.message, e.param) from None
        # pydantic's validation errors: vLLM's handler answers 400 "Bad Request"
        raise APIError(400, e.message, e.param, "Bad Request" if (e.param or "").startswith("body.") else None) from None
    model = state.check_model(req.model)
    scope.check_engine()
    try:
        check_request(req, supports_verbose=sm.supports_verbose, supports_diarized=sm.supports_diarized,
                      model=model)
    except FormError as e:
        raise APIError(400, e.message, e.param) from None
    if req.use_beam_search:
        raise APIError(400, "Beam search is not supported on the speech-to-text routes here.", "use_beam_search")
    if req.response_format == "diarized_json":  # no model in vLLM 0.32 supports it yet
        raise APIError(400, f"Currently do not support diarized_json for {model}")
    request_id = f"{task}-{secrets.token_hex(8)}"
    scope.name(request_id, model)
    try:
        language = sm.validate_language(req.language)
        to_language = sm.validate_language(req.to_language) if req.to_language else None
    except ValueError as e:
        raise APIError(400, str(e)) from None
    try:
        chunks, duration = await speech.in_pool(sm.decode_and_chunk, req.file, task)
    except ValueError as e:
        raise APIError(400, str(e)) from None
    offsets = sm.chunk_offsets(chunks, task)
    if language is None and sm.detect_language:
        language = await _detect_language(state, scope, speech, sm, chunks[0], task, request_id)
    verbose = req.response_format == "verbose_json"
    try:
        rendered = await speech.in_pool(sm.generation_prompts, chunks, task, language=language,
                                  prompt=req.prompt, to_language=to_language, hotwords=req.hotwords,
                                  verbose=verbose)
    except (ValueError, TypeError) as e:
        raise APIError(400, str(e)) from None
    sampling = _sampling(state, req, logprobs=verbose)
    separator = "" if language and language.lower() in sm.no_space_languages else " "
    if req.stream:
        return await _stream(request, state, scope, sm, req, model, task, request_id, rendered, sampling,
                             duration, separator)
    outs = _submit(state, scope, request_id, rendered, sampling, None)
    # the client left, or one chunk failed: the others go too (the scope aborts them)
    await asyncio.gather(*(c.done for c in outs))
    if verbose:
        segments: list[dict[str, Any]] = []
        for c, start in zip(outs, offsets):
            segments.extend(await speech.in_pool(sm.verbose_segments, c.token_ids, c.logprobs,
                                           temperature=req.temperature, start_time=start))
        text = separator.join(s["text"] for s in segments)
        body = {"duration": duration, "language": language, "text": text, "segments": segments, "words": None}
    else:
        text = separator.join(sm.post_process("".join(c.parts)) for c in outs)
        body = {"text": text}
        if task == "transcribe":  # vLLM reports usage for transcriptions only
            body["usage"] = {"type": "duration", "seconds": int(math.ceil(duration))}
    return web.Response(body=_dumps(body), content_type="application/json")


async def _stream(request, state, scope: RequestScope, sm, req: SpeechRequest, model: str, task: str,
                  request_id: str, rendered: list[Any], sampling: dict[str, Any], duration: float, separator: str):
    """vLLM's `_speech_to_text_stream_generator`: the chunks one after the other."""
    object_name = "transcription.chunk" if task == "transcribe" else "translation.chunk"
    include_usage = req.stream_include_usage  # --enable-force-include-usage is not a flag here
    continuous = include_usage and req.stream_continuous_usage_stats
    created = int(time.time())
    queue: asyncio.Queue = asyncio.Queue()
    outs = _submit(state, scope, request_id, rendered, sampling, queue)
    # (a write that fails because the client left: the scope aborts what is left in the engine)
    return await _stream_out(request, sm, req, model, task, request_id, outs, queue, duration,
                             separator, object_name, include_usage, continuous, created)


async def _stream_out(request, sm, req: SpeechRequest, model: str, task: str, request_id: str,
                      outs: list[_Chunk], queue: asyncio.Queue, duration: float, separator: str,
                      object_name: str, include_usage: bool, continuous: bool, created: int):
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await resp.prepare(request)
    audio_tokens = sm.num_audio_tokens(duration, task) or 0
    completion = 0
    prompt_tokens = 0

    def frame(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        body: dict[str, Any] = {"id": request_id, "object": object_name, "created": created, "model": model,
                                "choices": choices}
        if usage is not None:
            body["usage"] = usage
        return b"data: " + _dumps(body) + b"\n\n"

    try:
        pending: dict[int, list[Any]] = {}
        for c in outs:
            post = sm.stream_post_processor()
            beginning = True
            prompt_tokens = len(c.prompt_ids) + audio_tokens
            while True:
                item = pending.get(c.index, []).pop(0) if pending.get(c.index) else None
                while item is None:
                    got = await queue.get()
                    if got[0] == c.index:
                        item = got
                    else:
                        pending.setdefault(got[0], []).append(got)
                _, text, token_ids, finish, stop_reason = item
                if isinstance(text, APIError):
                    raise text
                text = post.process_delta(text, finish is not None)
                if c.index > 0 and beginning and text:
                    text = separator + text
                    beginning = False
                completion += len(token_ids)
                if finish is None and not text:
                    continue
                choice: dict[str, Any] = {"delta": {"content": text}}
                if finish is not None:
                    choice["finish_reason"] = finish
                    choice["stop_reason"] = stop_reason
                usage = None
                if continuous:
                    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion,
                             "completion_tokens": completion}
                await resp.write(frame([choice], usage))
                if finish is not None:
                    break
        if include_usage:
            await resp.write(frame([], {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion,
                                        "completion_tokens": completion}))
    except APIError as e:
        await resp.write(b"data: " + e.to_bytes() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def handle_transcriptions(request: web.Request) -> web.StreamResponse:
    return await handle_speech(request, "transcribe")


async def handle_translations(request: web.Request) -> web.StreamResponse:
    return await handle_speech(request, "translate")
