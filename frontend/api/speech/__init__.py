"""Speech-to-text routes (/v1/audio/transcriptions, /v1/audio/translations) as vLLM's.

Importing this package is cheap: vLLM (and torch) are imported in the multimodal pool on the
first request, and only for a model whose config names an audio tower; a text-only worker
answers these routes as vLLM does for a model without them, without importing anything.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web


def add_speech_routes(app: web.Application, multimodal: Any) -> None:
    """The routes, and the app's speech service over the worker's multimodal processing."""
    from vllm_pyfrontend.api.speech.routes import handle_transcriptions, handle_translations
    from vllm_pyfrontend.api.speech.service import SPEECH, SpeechService

    app[SPEECH] = SpeechService(multimodal)

    app.router.add_post("/v1/audio/transcriptions", handle_transcriptions)
    app.router.add_post("/v1/audio/translations", handle_translations)
