"""`--root-path`: the path prefix a proxy adds in front of every route (vLLM's flag).

vLLM (Starlette) answers a route both at its own path and under the prefix: `/v1/models` and
`/llm/v1/models` with `--root-path /llm`. Here the router resolves a prefixed path as the path
without its prefix, and `route_path` gives the middleware (auth) the same unprefixed path, so
the API-key guard covers both forms.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.web_urldispatcher import UrlDispatcher


def normalize_root(root: str) -> str:
    """"/llm/" or "llm" -> "/llm"; "" or "/" -> ""."""
    root = root.strip().rstrip("/")
    if root and not root.startswith("/"):
        root = "/" + root
    return root


def strip_root(path: str, root: str) -> str:
    """`path` without the `root` prefix (unchanged when it does not start with it)."""
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root):] or "/"
    return path


class RootPathRouter(UrlDispatcher):
    """Resolves `<root>/x` as `/x` (the handler still sees the path as sent)."""

    def __init__(self, root: str):
        super().__init__()
        self.root = root

    async def resolve(self, request: web.Request):
        path = request.rel_url.path
        stripped = strip_root(path, self.root)
        if stripped is not path:
            request = request.clone(rel_url=request.rel_url.with_path(stripped))
        return await super().resolve(request)


def route_path(request: web.Request, root: str) -> str:
    return strip_root(request.path, root) if root else request.path
