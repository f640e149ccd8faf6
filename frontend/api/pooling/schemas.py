"""Request bodies of the pooling routes (vLLM's shapes), validated by msgspec in one pass.

Inputs whose shape is a union vLLM tells apart by content (`input`: a string, strings, token
ids, lists of token ids or chat messages; score data: a string or a list) are typed `Any`
here and sorted out in `inputs.py`, where each shape gets a clear 400.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

_INT64 = Meta(ge=-(2**63), le=2**63 - 1)


class _PoolingBase(msgspec.Struct, omit_defaults=True, kw_only=True):
    model: str | None = None
    user: str | None = None
    truncate_prompt_tokens: Annotated[int, Meta(ge=-1)] | None = None
    truncation_side: Literal["left", "right"] | None = None
    request_id: str | None = None
    priority: Annotated[int, _INT64] = 0
    cache_salt: Annotated[str, Meta(min_length=1, max_length=1024)] | None = None
    use_activation: bool | None = None
    # Chat-shaped inputs (`messages`): vLLM's defaults for pooling (no generation prompt).
    add_generation_prompt: bool = False
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    add_special_tokens: bool | None = None  # default: true for text, false for messages
    # vLLM refuses these removed parameters by name.
    normalize: Any = msgspec.UNSET
    task: Any = msgspec.UNSET


class _EmbeddingInputs(_PoolingBase):
    """What /v1/embeddings and /pooling take: texts or messages, and how vectors are written."""

    input: Any = None
    messages: Any = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    embed_dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    endianness: Literal["native", "big", "little"] = "native"


class EmbeddingRequest(_EmbeddingInputs):
    pass


class ClassificationRequest(_PoolingBase):
    input: Any = None
    messages: Any = None


class PoolingRequest(_EmbeddingInputs):
    """POST /pooling: `task` picks the pooler (default: the model's pooling task)."""


class ScoreRequest(_PoolingBase):
    """POST /score: one of (text_1, text_2), (data_1, data_2), (queries, documents|items)."""

    text_1: Any = None
    text_2: Any = None
    data_1: Any = None
    data_2: Any = None
    queries: Any = None
    documents: Any = None
    items: Any = None
    max_tokens_per_query: Annotated[int, Meta(ge=0)] = 0
    max_tokens_per_doc: Annotated[int, Meta(ge=0)] = 0


class RerankRequest(_PoolingBase):
    """POST /rerank (Jina / Cohere shape): `return_documents` as Cohere has it."""

    query: Any = None
    documents: Any = None
    top_n: Annotated[int, Meta(ge=0)] = 0
    return_documents: bool = True
    max_tokens_per_query: Annotated[int, Meta(ge=0)] = 0
    max_tokens_per_doc: Annotated[int, Meta(ge=0)] = 0


class CohereEmbedRequest(msgspec.Struct, omit_defaults=True, kw_only=True):
    """POST /v2/embed (Cohere), text inputs."""

    model: str | None = None
    input_type: str | None = None
    texts: list[str] | None = None
    images: list[str] | None = None
    inputs: list[dict[str, Any]] | None = None
    output_dimension: int | None = None
    embedding_types: list[Literal["float", "binary", "ubinary", "base64"]] | None = None
    truncate: Literal["NONE", "START", "END"] = "END"
    max_tokens: int | None = None
    priority: Annotated[int, _INT64] = 0
