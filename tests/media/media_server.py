"""A real aiohttp server on a loopback address (127.0.0.1 unless told) serving test media (and
misbehaving on purpose), in its own thread and event loop, so tests on any loop can fetch from it;
`hits` lists every request it received."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web


class MediaServer:
    def __init__(self, files: dict[str, tuple[bytes, str]], host: str = "127.0.0.1"):
        self.files = files  # path -> (body, content type)
        self.host = host
        self.hits: list[str] = []  # the path of every request received
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._hanging: set[asyncio.Task] = set()

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _app(self) -> web.Application:
        @web.middleware
        async def record(request: web.Request, handler):
            self.hits.append(request.path_qs)
            return await handler(request)

        app = web.Application(middlewares=[record])

        async def file(request: web.Request) -> web.Response:
            body, ctype = self.files[request.match_info["name"]]
            return web.Response(body=body, content_type=ctype)

        async def redirect(request: web.Request) -> web.Response:
            # /redirect?to=<url>: one hop; /loop: forever to itself
            raise web.HTTPFound(request.query["to"])

        async def loop(request: web.Request) -> web.Response:
            raise web.HTTPFound("/loop")

        async def hang(request: web.Request) -> web.StreamResponse:
            # headers and a first chunk, then nothing: a server that never finishes
            resp = web.StreamResponse(headers={"Content-Type": "image/png"})
            await resp.prepare(request)
            await resp.write(b"\x89PNG\r\n")
            self._hanging.add(asyncio.current_task())
            await asyncio.sleep(3600)
            return resp

        async def endless(request: web.Request) -> web.StreamResponse:
            # a chunked body with no Content-Length that goes on past any size limit
            resp = web.StreamResponse(headers={"Content-Type": "image/png"})
            await resp.prepare(request)
            chunk = b"\0" * 65536
            for _ in range(1000):
                await resp.write(chunk)
            await resp.write_eof()
            return resp

        async def missing(request: web.Request) -> web.Response:
            raise web.HTTPNotFound()

        app.router.add_get("/files/{name}", file)
        app.router.add_get("/redirect", redirect)
        app.router.add_get("/loop", loop)
        app.router.add_get("/hang", hang)
        app.router.add_get("/endless", endless)
        app.router.add_get("/missing", missing)
        return app

    async def _start(self) -> None:
        self._runner = web.AppRunner(self._app(), shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def __enter__(self) -> "MediaServer":
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)
        return self

    async def _stop(self) -> None:
        for task in self._hanging:
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
