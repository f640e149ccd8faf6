"""The speech model of a worker, a service of its app from the start (`SPEECH`): built once,
in the multimodal pool, on the first speech request of a model that looks like one."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from aiohttp import web

from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.multimodal.chat import Multimodal


class SpeechService:
    def __init__(self, multimodal: Multimodal):
        self._multimodal = multimodal
        self._model: Any = None
        self._loaded: asyncio.Future | None = None

    async def model(self):
        """The loaded SpeechModel, or None for a model vLLM serves no speech routes for (a
        text-only model is decided from config.json alone, without importing vLLM)."""
        sm = self._model
        if sm is None:
            if not self._multimodal.may_serve():
                return None
            from vllm_pyfrontend.api.speech.model import SpeechModel

            rt = self._multimodal.get()
            try:
                await rt.ready()
            except Exception as e:  # noqa: BLE001
                raise APIError(500, f"The model's processor could not be loaded: {e}") from None
            if self._model is None:  # another request may have built it while this one waited
                self._model = SpeechModel(rt.model)
                self._loaded = asyncio.get_running_loop().run_in_executor(rt.pool, self._model.load)
            sm = self._model
        try:
            await asyncio.shield(self._loaded)
        except Exception as e:  # noqa: BLE001
            raise APIError(500, f"The speech-to-text model could not be loaded: {e}") from None
        return sm if sm.supported else None

    async def in_pool(self, fn, *args, **kwargs):
        """`fn(*args, **kwargs)` in the multimodal pool (decoding, chunking, the processor)."""
        pool = self._multimodal.get().pool
        return await asyncio.get_running_loop().run_in_executor(pool, partial(fn, *args, **kwargs))


SPEECH = web.AppKey("speech", SpeechService)
"""Where the app keeps its `SpeechService`."""
