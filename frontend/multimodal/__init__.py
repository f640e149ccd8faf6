"""Multimodal inputs (images, audio, video) processed as vLLM's frontend processes them.

Importing this package is cheap; vLLM, torch and transformers are imported in the
multimodal pool, on the first request with media (or at start for a model whose config
names a vision/audio tower), never on a worker of a text-only model.
"""

from vllm_pyfrontend.multimodal.chat import has_media

__all__ = ["has_media"]
