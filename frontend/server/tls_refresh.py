"""`--enable-ssl-refresh`: the server's certificate chain and client CA reloaded when their files
change, as vLLM's server does (its `SSLCertRefresher`): the worker's `SSLContext` is updated in
place, so new connections get the new files and open ones keep theirs.

Files are watched with `watchfiles` (an inotify watcher, no polling here). A change that does not
load (a half-written file, a key that does not match yet) is logged and the old settings stay;
the next change is tried again.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable

log = logging.getLogger(__name__)


class CertRefresher:
    def __init__(self, ctx: ssl.SSLContext, keyfile: str | None, certfile: str | None, ca_certs: str | None):
        self._ctx = ctx
        self._tasks: list[asyncio.Task] = []
        if keyfile and certfile:
            self._tasks.append(asyncio.create_task(self._watch(
                [keyfile, certfile], lambda: ctx.load_cert_chain(certfile, keyfile), "certificate chain")))
        if ca_certs:
            self._tasks.append(asyncio.create_task(self._watch(
                [ca_certs], lambda: ctx.load_verify_locations(ca_certs), "CA certificates")))

    async def _watch(self, paths: list[str], reload: Callable[[], None], what: str) -> None:
        from watchfiles import awatch

        log.info("watching %s for TLS changes", ", ".join(paths))
        async for _changes in awatch(*paths):
            try:
                reload()
                log.info("reloaded the TLS %s", what)
            except (ssl.SSLError, OSError, ValueError) as e:
                log.error("could not reload the TLS %s (the previous one stays): %s", what, e)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
