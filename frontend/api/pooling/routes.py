"""The pooling routes with vLLM's request and response shapes:

| route | what |
|---|---|
| POST /v1/embeddings | OpenAI embeddings (float or base64, `dimensions`, chat `messages`) |
| POST /v2/embed | Cohere embed (texts; float, base64, binary, ubinary) |
| POST /classify | sequence classification (labels from the model config) |
| POST /pooling | the model's pooler output as is |
| POST /score, /v1/score | cross-encoder, bi-encoder (cosine) or late-interaction (MaxSim) scores |
| POST /rerank, /v1/rerank, /v2/rerank | Jina / Cohere rerank (`top_n`, `return_documents`) |

Each input is one engine request (`llm/pooling.py`), all sent together and answered in input
order. A route the model's tasks do not cover answers 400 naming what the model serves.
"""

from __future__ import annotations

import base64
import secrets
import sys
import time
from typing import Any

import msgspec
from aiohttp import web

# numpy is imported in the functions that use it: only a pooling model's requests need it, and the
# worker imports it at start when its model pools (server/worker.py), so no request waits for it.

from vllm_pyfrontend.engine.types import PooledTensor
from vllm_pyfrontend.llm.pooling import PoolingBatch, PoolingFailed, pooling_params
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.api.pooling import inputs
from vllm_pyfrontend.api.pooling.model import PoolingModel
from vllm_pyfrontend.api.pooling.schemas import (
    ClassificationRequest,
    CohereEmbedRequest,
    EmbeddingRequest,
    PoolingRequest,
    RerankRequest,
    ScoreRequest,
)
from vllm_pyfrontend.serving.bodies import decode_body
from vllm_pyfrontend.serving.web_app import http_route
from vllm_pyfrontend.serving.responder import JsonAnswer
from vllm_pyfrontend.serving.scope import RequestScope

_json = msgspec.json.encode
_NATIVE = sys.byteorder


# --------------------------------------------------------------------------- common


def _model(state: Any) -> PoolingModel:
    pm = state.pooling_model
    return pm if pm is not None else PoolingModel(supported_tasks=tuple(state.supported_tasks))


def _serves(pm: PoolingModel) -> str:
    if pm.pooling_task is not None:
        return f"its pooling task is `{pm.pooling_task}`"
    return f"it supports {', '.join(f'`{t}`' for t in pm.supported_tasks) or 'no task'}"


def _unsupported(what: str, task: str, pm: PoolingModel) -> APIError:
    return APIError(400, f"The model does not support {what} (task `{task}`): {_serves(pm)}.", "model")


def _request_id(scope: RequestScope, given: str | None) -> str:
    """vLLM's: the X-Request-Id header, else the body's `request_id`, else a random one."""
    return scope.caller.request_id or given or secrets.token_hex(8)


def _usage(n: int, *, full: bool = True) -> dict[str, Any]:
    if not full:
        return {"prompt_tokens": n, "total_tokens": n}
    return {"prompt_tokens": n, "total_tokens": n, "completion_tokens": 0,
            "prompt_tokens_details": None, "completion_tokens_details": None}


async def _pool(state: Any, scope: RequestScope, prompts: list[list[int]], params: list[list[Any]],
                prefix: str, external_id: str, req: Any) -> list[PooledTensor]:
    """Send one engine request per prompt in the request's scope, wait for all, answer their
    outputs in order (the scope aborts what is left if the request ends first)."""
    scope.check_engine()
    scope.name(external_id, getattr(req, "model", None) or state.model_names[0])
    batch = PoolingBatch(state.engine, state.worker_index, prefix, external_id)
    for ids, p in zip(prompts, params):
        batch.add(ids, p, priority=getattr(req, "priority", 0), cache_salt=getattr(req, "cache_salt", None))
    scope.submit_pooling(batch)
    try:
        return await batch.results()
    except PoolingFailed as e:
        raise APIError(503 if e.failure.kind.engine_unavailable else 500, e.failure.message) from None


def _activation(pm: PoolingModel, req: Any) -> bool | None:
    return req.use_activation if req.use_activation is not None else pm.use_activation


def _check_dimensions(pm: PoolingModel, dimensions: int | None, model_name: str) -> None:
    """vLLM's `PoolingParams` checks of `dimensions` (done by its frontend too)."""
    if dimensions is None:
        return
    if not pm.matryoshka:
        raise APIError(400, f"Model {model_name!r} does not support Matryoshka embeddings; dimensions must "
                       f"be unset (received dimensions={dimensions}).", "dimensions")
    size = pm.hidden_size or 0
    if not 1 <= dimensions <= size:
        raise APIError(400, f"Model {model_name!r} only supports dimensions in range [1, {size}], got "
                       f"{dimensions}.", "dimensions")
    mds = pm.matryoshka_dimensions
    if mds is not None and dimensions not in mds:
        raise APIError(400, f"Model {model_name!r} only supports Matryoshka dimensions {list(mds)}, got "
                       f"{dimensions}.", "dimensions")


def _floats(t: PooledTensor) -> list:
    return t.array().tolist()


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounding to nearest even (as torch's `.to`)."""
    import numpy as np

    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    return rounded.astype(np.uint16)


def _binary(t: PooledTensor, embed_dtype: str, endianness: str) -> bytes:
    """vLLM's `tensor2binary`: flattened, in `embed_dtype`, in the given byte order."""
    import numpy as np

    if embed_dtype == "float32" and t.dtype in ("float32", "<f4") and endianness in ("native", "little") \
            and _NATIVE == "little":
        return bytes(t.data)  # the engine's own bytes: no conversion
    a = t.array().reshape(-1)
    if embed_dtype == "float32":
        out = a.astype(np.float32)
    elif embed_dtype == "float16":
        out = a.astype(np.float16)
    else:
        out = _bf16_bits(a.astype(np.float32))
    if endianness != "native" and endianness != _NATIVE:
        out = out.byteswap()
    return out.tobytes()


def _encoded(t: PooledTensor, fmt: str, embed_dtype: str, endianness: str) -> Any:
    if fmt == "base64":
        return base64.b64encode(_binary(t, embed_dtype, endianness)).decode("ascii")
    return _floats(t)


# --------------------------------------------------------------------------- embeddings


def _embed_request(state: Any, body: bytes, schema: type) -> tuple[Any, str, PoolingModel]:
    """An embedding body (OpenAI's or Cohere's) for a model that embeds: (request, model,
    pooling model)."""
    req = decode_body(body, schema)
    model = state.check_model(req.model)
    pm = _model(state)
    if pm.pooling_task != "embed":
        raise _unsupported("embeddings", "embed", pm)
    return req, model, pm


async def embeddings(state, scope: RequestScope, body: bytes) -> JsonAnswer:
    req, model, pm = _embed_request(state, body, EmbeddingRequest)
    inputs.check_removed(req)
    _check_dimensions(pm, req.dimensions, model)
    prompts = inputs.prompts_from(state, req)
    params = pooling_params("embed", use_activation=_activation(pm, req), dimensions=req.dimensions)
    return await _encoded_list(state, scope, req, model, prompts, params, "embd", "embedding", "embedding")


async def _encoded_list(state: Any, scope: RequestScope, req: Any, model: str, prompts: list[list[int]],
                        params: list[Any], prefix: str, object_: str, field: str) -> JsonAnswer:
    """Pool every prompt with `params`; vLLM's list of encoded tensors (items of type `object_`,
    the tensor under `field`, ids `prefix-…`): /v1/embeddings and /pooling."""
    rid = _request_id(scope, req.request_id)
    outs = await _pool(state, scope, prompts, [params] * len(prompts), prefix, rid, req)
    data = [{"index": i, "object": object_,
             field: _encoded(t, req.encoding_format, req.embed_dtype, req.endianness)}
            for i, t in enumerate(outs)]
    return JsonAnswer({"id": f"{prefix}-{rid}", "object": "list", "created": int(time.time()), "model": model,
                       "data": data, "usage": _usage(sum(len(p) for p in prompts))})


def _pack_bits(floats: np.ndarray, signed: bool) -> list:
    import numpy as np

    if floats.shape[-1] % 8:
        raise APIError(400, "Embedding dimension must be a multiple of 8 for binary embedding types, "
                       f"but got {floats.shape[-1]}.", "embedding_types")
    packed = np.packbits(floats >= 0, axis=-1)
    return (packed.astype(np.int16) - 128).tolist() if signed else packed.tolist()


async def cohere_embed(state, scope: RequestScope, body: bytes) -> JsonAnswer:
    import numpy as np

    req, model, pm = _embed_request(state, body, CohereEmbedRequest)
    given = [f for f in (req.texts, req.images, req.inputs) if f is not None]
    if len(given) != 1 or not given[0]:
        raise APIError(400, "Exactly one of texts, images, or inputs must be provided, and it must be "
                       "non-empty", "texts")
    if req.texts is None:
        raise APIError(400, "Only `texts` inputs are supported by this text-only model.", "images")
    if req.input_type is not None:
        raise APIError(400, f"Unsupported input_type {req.input_type!r}. This model does not define any "
                       "input_type task instructions.", "input_type")
    _check_dimensions(pm, req.output_dimension, model)
    inputs.check_count(len(req.texts), "texts")
    # Cohere's truncate: END cuts the end (to max_tokens or the model's length), START the
    # start, NONE refuses what is too long.
    if req.truncate == "NONE":
        keep, side = None, None
    else:
        keep = req.max_tokens if req.max_tokens is not None else -1
        side = "left" if req.truncate == "START" else None
    max_len = state.max_model_len
    prompts = []
    for text in req.texts:
        ids = state.tokenizer.encode(text, add_special_tokens=True)
        ids = inputs.truncate(ids, keep, side, max_len)
        if req.truncate == "NONE" and req.max_tokens is not None and len(ids) > req.max_tokens:
            raise APIError(400, f"Input of {len(ids)} tokens exceeds max_tokens={req.max_tokens} with "
                           "truncate=NONE. Set truncate to END or START to truncate automatically.", "texts")
        prompts.append(inputs.check_length(ids, max_len, "texts"))
    params = pooling_params("embed", use_activation=pm.use_activation, dimensions=req.output_dimension)
    rid = _request_id(scope, None)
    outs = await _pool(state, scope, prompts, [params] * len(prompts), "embd", rid, req)
    floats = [_floats(t) for t in outs]
    embeddings: dict[str, Any] = {}
    for kind in req.embedding_types or ["float"]:
        if kind == "float":
            embeddings["float"] = floats
        elif kind == "base64":
            embeddings["base64"] = [base64.b64encode(_binary(t, "float32", "little")).decode("ascii")
                                    for t in outs]
        else:
            embeddings[kind] = _pack_bits(np.asarray(floats, dtype=np.float64), signed=kind == "binary")
    tokens = sum(len(p) for p in prompts)
    return JsonAnswer({
        "id": f"embd-{rid}", "embeddings": embeddings, "texts": req.texts,
        "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": tokens, "image_tokens": 0}},
        "response_type": "embeddings_by_type",
    })


# --------------------------------------------------------------------------- classify / pooling


async def classify(state, scope: RequestScope, body: bytes) -> JsonAnswer:
    import numpy as np

    req: ClassificationRequest = decode_body(body, ClassificationRequest)
    model = state.check_model(req.model)
    pm = _model(state)
    if "classify" not in pm.supported_tasks:
        raise _unsupported("classification", "classify", pm)
    prompts = inputs.prompts_from(state, req)
    params = pooling_params("classify", use_activation=_activation(pm, req))
    rid = _request_id(scope, req.request_id)
    outs = await _pool(state, scope, prompts, [params] * len(prompts), "classify", rid, req)
    data = []
    for i, t in enumerate(outs):
        probs = t.array().reshape(-1)
        top = int(np.argmax(probs)) if probs.size else 0
        data.append({"index": i, "label": pm.id2label.get(top), "probs": probs.tolist(),
                     "num_classes": int(probs.size)})
    return JsonAnswer({"id": f"classify-{rid}", "object": "list", "created": int(time.time()), "model": model,
                     "data": data, "usage": _usage(sum(len(p) for p in prompts))})


async def pooling(state, scope: RequestScope, body: bytes) -> JsonAnswer:
    req: PoolingRequest = decode_body(body, PoolingRequest)
    model = state.check_model(req.model)
    pm = _model(state)
    inputs.check_removed(req)
    if pm.pooling_task is None:
        raise _unsupported("pooling", "embed", pm)
    task = pm.pooling_task if req.task is msgspec.UNSET or req.task is None else req.task
    if task != pm.pooling_task:
        if task not in pm.supported_tasks:
            raise APIError(400, f"Unsupported task: {task!r} Supported tasks: {list(pm.supported_tasks)}", "task")
        raise APIError(400, f"The model's pooling task is {pm.pooling_task!r}, not {task!r}. Try switching the "
                       f"model's pooling_task via --pooler-config.task {task}.", "task")
    if task not in ("embed", "classify", "token_embed", "token_classify"):
        raise APIError(400, f"The {task!r} pooling task needs an IO processor plugin, which this frontend "
                       "does not run.", "task")
    if req.dimensions is not None:  # as vLLM's /pooling
        raise APIError(400, "dimensions is currently not supported", "dimensions")
    prompts = inputs.prompts_from(state, req)
    params = pooling_params(task, use_activation=_activation(pm, req))
    return await _encoded_list(state, scope, req, model, prompts, params, "pooling", "pooling", "data")


# --------------------------------------------------------------------------- score / rerank


def _truncate_text(state: Any, text: str, max_tokens: int) -> str:
    """vLLM's `truncate_text_to_tokens`: cut the text at the end of its `max_tokens`-th token."""
    if max_tokens <= 0:
        return text
    enc = state.tokenizer.hf_tokenizer.encode(text, add_special_tokens=False)
    if len(enc.ids) <= max_tokens:
        return text
    return text[:enc.offsets[max_tokens - 1][1]]


def _token_limit(state: Any, value: int, name: str) -> int:
    if value and value >= state.max_model_len:
        raise APIError(400, f"{name} ({value}) must be less than max_model_len ({state.max_model_len}).", name)
    return value


def _pair_ids(state: Any, pm: PoolingModel, q: str, d: str, req: Any) -> tuple[list[int], int | None]:
    """A cross-encoder's prompt for one pair, and where the second segment starts when the
    model takes token type ids (vLLM's `compressed_token_type_ids`)."""
    hf = state.tokenizer.hf_tokenizer
    max_len = state.max_model_len
    if pm.use_sep_token:
        limit = req.truncate_prompt_tokens
        if limit is not None and req.truncation_side is None:
            # vLLM has the tokenizer truncate the pair (longest first) unless a side is asked for.
            enc = _pair_longest_first(hf, q, d, max_len if limit < 0 else limit)
        else:
            enc = hf.encode(q, pair=d, add_special_tokens=True)
        ids, type_ids = list(enc.ids), list(enc.type_ids)
    else:
        ids = inputs.encode_truncated(state, q + d, True, req.truncate_prompt_tokens, req.truncation_side)
        type_ids = None
    if req.truncate_prompt_tokens is not None:
        ids = inputs.truncate(ids, req.truncate_prompt_tokens, req.truncation_side, max_len)
        if type_ids is not None:
            type_ids = inputs.truncate(type_ids, req.truncate_prompt_tokens, req.truncation_side, max_len)
    inputs.check_length(ids, max_len, "documents")
    boundary = None
    if type_ids is not None and pm.token_type_ids:
        boundary = next((i for i, t in enumerate(type_ids) if t == 1), len(type_ids))
    return ids, boundary


def _pair_longest_first(hf: Any, q: str, d: str, max_length: int) -> Any:
    """The pair encoded with Hugging Face's `longest_first` truncation to `max_length` tokens
    (special tokens included): the longer text loses tokens first, from its end. The shared
    tokenizer's truncation setting is left alone."""
    a = hf.encode(q, add_special_tokens=False)
    b = hf.encode(d, add_special_tokens=False)
    room = max_length - hf.num_special_tokens_to_add(True)
    if room < 0:
        raise APIError(400, f"truncate_prompt_tokens ({max_length}) leaves no room for the pair's "
                       "special tokens.", "truncate_prompt_tokens")
    n1, n2 = len(a.ids), len(b.ids)
    if n1 + n2 > room:
        swap = n1 > n2
        if swap:
            n1, n2 = n2, n1
        n2 = n1 if n1 > room else max(n1, room - n1)
        if n1 + n2 > room:
            n1 = room // 2
            n2 = n1 + room % 2
        if swap:
            n1, n2 = n2, n1
        a.truncate(n1)
        b.truncate(n2)
    return hf.post_process(a, b, add_special_tokens=True)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    import numpy as np

    a = a.reshape(-1).astype(np.float32)
    b = b.reshape(-1).astype(np.float32)
    eps = np.float32(1e-8)
    return float(np.dot(a, b) / (max(np.linalg.norm(a), eps) * max(np.linalg.norm(b), eps)))


def _maxsim(q: np.ndarray, d: np.ndarray) -> float:
    import numpy as np

    return float((q.astype(np.float32) @ d.astype(np.float32).T).max(axis=-1).sum())


async def _scores(state: Any, scope: RequestScope, req: Any, side1: list[str], side2: list[str],
                  rid: str) -> tuple[list[float], int]:
    """One score per pair (side1 broadcast when it has one item) and the prompt tokens used."""
    pm = _model(state)
    kind = pm.score_type
    if kind is None:
        if pm.pooling_task == "classify":  # vLLM scores with a classifier of one label only
            raise APIError(400, "The model does not support scoring: a classifier scores pairs only with "
                           f"one label (num_labels == 1), this one has {pm.num_labels}.", "model")
        raise _unsupported("scoring", "embed", pm)
    if len(side1) > 1 and len(side1) != len(side2):
        raise APIError(400, "Input lengths must be either 1:1, 1:N or N:N")
    if not side1:
        raise APIError(400, "At least one text element must be given")
    if not side2:
        raise APIError(400, "At least one text_pair element must be given")
    inputs.check_count(len(side1) + len(side2), "documents")
    q_limit = _token_limit(state, req.max_tokens_per_query, "max_tokens_per_query")
    d_limit = _token_limit(state, req.max_tokens_per_doc, "max_tokens_per_doc")
    side1 = [_truncate_text(state, t, q_limit) for t in side1]
    side2 = [_truncate_text(state, t, d_limit) for t in side2]
    if kind == "cross-encoder":
        queries = side1 * len(side2) if len(side1) == 1 else side1
        prompts, params = [], []
        for q, d in zip(queries, side2):
            ids, boundary = _pair_ids(state, pm, q, d, req)
            extra = {"compressed_token_type_ids": boundary} if boundary is not None else None
            prompts.append(ids)
            params.append(pooling_params("classify", use_activation=_activation(pm, req), extra_kwargs=extra))
        outs = await _pool(state, scope, prompts, params, "score", rid, req)
        return [float(t.array().reshape(-1)[0]) for t in outs], sum(len(p) for p in prompts)
    task = "embed" if kind == "bi-encoder" else "token_embed"
    max_len = state.max_model_len
    prompts = [inputs.check_length(
        inputs.truncate(inputs.encode_truncated(state, t, True, req.truncate_prompt_tokens, req.truncation_side),
                        req.truncate_prompt_tokens,
                        req.truncation_side, max_len), max_len, "documents") for t in side1 + side2]
    params = pooling_params(task, use_activation=_activation(pm, req))
    outs = await _pool(state, scope, prompts, [params] * len(prompts), "score", rid, req)
    arrays = [t.array() for t in outs]
    qs, ds = arrays[:len(side1)], arrays[len(side1):]
    if len(qs) == 1:
        qs = qs * len(ds)
    combine = _cosine if kind == "bi-encoder" else _maxsim
    return [combine(q, d) for q, d in zip(qs, ds)], sum(len(p) for p in prompts)


async def score(state, scope: RequestScope, body: bytes) -> JsonAnswer:
    req: ScoreRequest = decode_body(body, ScoreRequest)
    model = state.check_model(req.model)
    inputs.check_removed(req)
    if req.queries is not None:
        a, b, names = req.queries, req.documents if req.documents is not None else req.items, ("queries", "documents")
    elif req.data_1 is not None or req.data_2 is not None:
        a, b, names = req.data_1, req.data_2, ("data_1", "data_2")
    else:
        a, b, names = req.text_1, req.text_2, ("text_1", "text_2")
    side1, side2 = inputs.score_texts(a, names[0]), inputs.score_texts(b, names[1])
    rid = _request_id(scope, req.request_id)
    scores, tokens = await _scores(state, scope, req, side1, side2, rid)
    data = [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)]
    return JsonAnswer({"id": f"score-{rid}", "object": "list", "created": int(time.time()), "model": model,
                     "data": data, "usage": _usage(tokens)})


async def rerank(state, scope: RequestScope, body: bytes) -> JsonAnswer:
    req: RerankRequest = decode_body(body, RerankRequest)
    model = state.check_model(req.model)
    inputs.check_removed(req)
    if not isinstance(req.query, str):
        raise APIError(400, "`query` must be a string.", "query")
    docs = inputs.score_texts(req.documents, "documents")
    rid = _request_id(scope, req.request_id)
    scores, tokens = await _scores(state, scope, req, [req.query], docs, rid)
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
    if req.top_n and req.top_n < len(order):
        order = order[:req.top_n]
    results = []
    for i in order:
        item: dict[str, Any] = {"index": i}
        if req.return_documents:
            item["document"] = {"text": docs[i], "multi_modal": None}
        item["relevance_score"] = scores[i]
        results.append(item)
    return JsonAnswer({"id": f"score-{rid}", "model": model, "usage": _usage(tokens, full=False),
                     "results": results})


def add_pooling_routes(app: web.Application) -> None:
    """Register the pooling routes (each answers 400 where the model's tasks do not cover it)."""
    app.router.add_post("/v1/embeddings", http_route("embeddings", embeddings))
    app.router.add_post("/v2/embed", http_route("cohere.embed", cohere_embed))
    app.router.add_post("/classify", http_route("classify", classify))
    app.router.add_post("/pooling", http_route("pooling", pooling))
    for path in ("/score", "/v1/score"):
        app.router.add_post(path, http_route("score", score))
    for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
        app.router.add_post(path, http_route("rerank", rerank))
