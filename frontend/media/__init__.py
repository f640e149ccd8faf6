"""Media inputs (images, audio, video, embeddings): fetching, safety limits and decoding into
what vLLM's MediaConnector gives, off the event loop.

Importing this package is cheap: torch, transformers, PIL and numpy are imported inside the
functions that decode, in the media pool, so workers of a text-only model never load them.
"""

from vllm_pyfrontend.errors import MediaError
from vllm_pyfrontend.media.loader import MediaLoader
from vllm_pyfrontend.media.policy import (
    DEFAULT_LIMIT_PER_PROMPT,
    MediaPolicy,
    check_item_counts,
    default_mm_workers,
    parse_json_arg,
    parse_limit_mm_per_prompt,
)

__all__ = [
    "DEFAULT_LIMIT_PER_PROMPT",
    "MediaError",
    "MediaLoader",
    "MediaPolicy",
    "check_item_counts",
    "default_mm_workers",
    "parse_json_arg",
    "parse_limit_mm_per_prompt",
]
