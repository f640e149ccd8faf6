"""LoRA adapters over HTTP: `model: <adapter>`, `/v1/models` cards, and the runtime
`/v1/load_lora_adapter` / `/v1/unload_lora_adapter` routes, with vLLM's answers.

The adapter list is the deployment's (`frontend/llm/lora.py`, one SQLite file in the runtime
directory), so an adapter loaded through one worker is served by every worker. The static
adapters (`--lora-modules`) are loaded into the engine(s) once per deployment, by whichever
worker starts first; the others wait for them before serving. As in vLLM, the load routes exist
only with VLLM_ALLOW_RUNTIME_LORA_UPDATING set, a load is checked by the engine (`add_lora` on
every engine) before the adapter is listed, and an unload only takes it off the list. With a keys
file only an admin key loads or unloads adapters (they are the deployment's, served to every
tenant, read from the server's disk).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend import environment
from vllm_pyfrontend.engine.client import UtilityError
from vllm_pyfrontend.llm.lora import LoRAAdapter, LoRAStore, parse_lora_modules
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.bodies import decode_body
from vllm_pyfrontend.serving.state import STATE
from vllm_pyfrontend.tenants import tenant_of

log = logging.getLogger(__name__)

_STATIC_CLAIM = "static-loaded"
_STATIC_DONE = "static-done"


def runtime_updating_allowed() -> bool:
    """vLLM's envs.VLLM_ALLOW_RUNTIME_LORA_UPDATING: "1" or "true" (any case)."""
    return environment.runtime_lora_updating()


class LoadLoRAAdapterRequest(msgspec.Struct):
    lora_name: str
    lora_path: str
    load_inplace: bool = False
    is_3d_lora_weight: bool = False


class UnloadLoRAAdapterRequest(msgspec.Struct):
    lora_name: str
    lora_int_id: int | None = None


def lora_request_for(state, model: str) -> list[Any] | None:
    """The engine's `lora_request` for a checked model name (None: a base model)."""
    store: LoRAStore | None = state.loras
    if store is None or model in state.model_names:
        return None
    adapter = store.get(model)
    return adapter.wire() if adapter is not None else None


def is_adapter(state, name: str) -> bool:
    store: LoRAStore | None = state.loras
    return store is not None and store.get(name) is not None


def model_cards(state, created: int) -> list[dict[str, Any]]:
    """vLLM's ModelCards of the adapters: root = the adapter's path, parent = its base model."""
    store: LoRAStore | None = state.loras
    if store is None:
        return []
    return [
        {"id": a.name, "object": "model", "created": created, "owned_by": "vllm", "root": a.path,
         "parent": a.base_model_name or state.model_names[0], "max_model_len": None, "permission": []}
        for a in store.all()
    ]


async def _add_to_engines(state, adapter: LoRAAdapter) -> None:
    """vLLM's engine_client.add_lora: every engine loads (and validates) the adapter."""
    engine = state.engine
    for idx in engine.engine_indices:
        await engine.call_utility("add_lora", adapter.wire(), engine_index=idx, timeout=600)


def _load_error(adapter: LoRAAdapter, error: Exception) -> APIError:
    not_found = f"Loading lora {adapter.name} failed: No adapter found for {adapter.path}"
    if not_found in str(error):
        return APIError(404, not_found)
    return APIError(500, str(error))


async def load_adapter(state, name: str, path: str, *, load_inplace: bool = False, is_3d: bool = False,
                       base_model_name: str | None = None) -> str:
    """vLLM's OpenAIServingModels.load_lora_adapter; raises APIError as vLLM answers."""
    store: LoRAStore = state.loras
    if not name or not path:
        raise APIError(400, "Both 'lora_name' and 'lora_path' must be provided.", err_type="InvalidUserInput")
    if "\x00" in path or "\x00" in name:  # the engine's os calls raise on it: refused before
        raise APIError(400, "'lora_name' and 'lora_path' must not contain a NUL byte.", err_type="InvalidUserInput")
    if name in state.model_names:
        raise APIError(400, f"The lora adapter '{name}' conflicts with a served base model.",
                       err_type="InvalidUserInput")
    if not load_inplace and store.get(name) is not None:
        raise APIError(400, f"The lora adapter '{name}' has already been loaded. If you want to load the "
                       "adapter in place, set 'load_inplace' to True.", err_type="InvalidUserInput")
    adapter = LoRAAdapter(name, store.id_for(name), path,
                          base_model_name if base_model_name in state.model_names else None, load_inplace, is_3d)
    try:
        await _add_to_engines(state, adapter)
    except (UtilityError, asyncio.TimeoutError, RuntimeError) as e:
        raise _load_error(adapter, e) from None
    store.put(adapter)
    log.info("Loaded new LoRA adapter: name '%s', path '%s'", name, path)
    return f"Success: LoRA adapter '{name}' added successfully."


def _check_admin(request: web.Request) -> None:
    """With a keys file, loading and unloading adapters (a path on the server's disk, served to
    every tenant) is for an admin key (`admin: true`) only."""
    if request.app[STATE].tenants is not None and not tenant_of(request).admin:
        raise APIError(403, "Loading and unloading LoRA adapters needs an admin API key.")


async def handle_load(request: web.Request) -> web.Response:
    _check_admin(request)
    state = request.app[STATE]
    req: LoadLoRAAdapterRequest = decode_body(await state.read_body(request), LoadLoRAAdapterRequest)
    text = await load_adapter(state, req.lora_name, req.lora_path, load_inplace=req.load_inplace,
                              is_3d=req.is_3d_lora_weight)
    return web.Response(text=text)


async def handle_unload(request: web.Request) -> web.Response:
    _check_admin(request)
    state = request.app[STATE]
    req: UnloadLoRAAdapterRequest = decode_body(await state.read_body(request), UnloadLoRAAdapterRequest)
    if not req.lora_name:
        raise APIError(400, "'lora_name' needs to be provided to unload a LoRA adapter.",
                       err_type="InvalidUserInput")
    if not state.loras.remove(req.lora_name):
        raise APIError(404, f"The lora adapter '{req.lora_name}' cannot be found.")
    log.info("Removed LoRA adapter: name '%s'", req.lora_name)
    return web.Response(text=f"Success: LoRA adapter '{req.lora_name}' removed successfully.")


async def _load_static(state, modules, timeout: float) -> None:
    """The `--lora-modules` adapters, loaded once per deployment (vLLM: init_static_loras)."""
    store: LoRAStore = state.loras
    if store.claim_once(_STATIC_CLAIM):
        try:
            for m in modules:
                try:
                    await load_adapter(state, m.name, m.path, is_3d=m.is_3d_lora_weight,
                                       base_model_name=m.base_model_name)
                except APIError as e:
                    raise RuntimeError(f"--lora-modules {m.name}: {e.message}") from None
        except BaseException:
            store.release(_STATIC_CLAIM)  # a restarted worker tries again
            raise
        store.claim_once(_STATIC_DONE)
        return
    deadline = time.monotonic() + timeout
    while not store.claimed(_STATIC_DONE):  # another worker is loading them
        if time.monotonic() > deadline:
            raise RuntimeError("the --lora-modules adapters were not loaded in time")
        await asyncio.sleep(0.2)


def lora_store(config) -> LoRAStore | None:
    """The deployment's adapter list for a worker's state, where adapters can be served
    (`--lora-modules`, or runtime updating allowed); None otherwise."""
    if not (config.policy.lora_modules or runtime_updating_allowed()):
        return None
    return LoRAStore(os.path.join(config.runtime_dir, "lora.sqlite"))


def add_lora_routes(app: web.Application) -> None:
    """Adapters for this worker's app: the static adapters at start-up, and the runtime routes."""
    state = app[STATE]
    if state.loras is None:
        return
    modules = parse_lora_modules(state.config.policy.lora_modules or [])
    allowed = runtime_updating_allowed()
    if modules:
        async def on_startup(app: web.Application) -> None:
            await _load_static(state, modules, state.config.engine_ready_timeout)

        app.on_startup.append(on_startup)
    if allowed:
        log.warning("LoRA dynamic loading & unloading is enabled in the API server. "
                    "This should ONLY be used for local development!")
        app.router.add_post("/v1/load_lora_adapter", handle_load)
        app.router.add_post("/v1/unload_lora_adapter", handle_unload)
