"""vLLM's answer on a scale-out route (generate, render, derender) of a server started without
--enable-scale-out: 403."""

from __future__ import annotations

from aiohttp import web

from vllm_pyfrontend.errors import APIError

SCALE_OUT_DISABLED = ("Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to "
                      "enable them.")


async def scale_out_disabled(request: web.Request) -> web.Response:
    """The handler of every scale-out route while the flag is off."""
    raise APIError(403, SCALE_OUT_DISABLED, err_type="PermissionDeniedError")
