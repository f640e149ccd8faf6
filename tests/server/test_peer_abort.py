"""peer_abort: an abort received by one worker ends the request on the worker that owns it
(Unix datagram sockets in the runtime directory), and "abort everything" reaches every worker."""

from __future__ import annotations

import asyncio

from vllm_pyfrontend.engine.types import FINISH_ABORT
from vllm_pyfrontend.serving.peer_abort import PeerAbort


class _Engine:
    def __init__(self):
        self.aborted: list[str] = []
        self.sinks: dict[str, "_Gen"] = {}

    def abort(self, ids):
        self.aborted.extend(ids)

    def in_flight_sinks(self):
        return list(self.sinks.items())


class _Gen:
    def __init__(self):
        self.finished = False
        self.reason = None

    def on_output(self, out):
        self.finished = True
        self.reason = out.finish_reason


class _Req:
    def __init__(self, rid):
        self.request_id = rid


class _Sub:
    def __init__(self, rid, gen):
        self.requests = [(_Req(rid), gen)]


async def _until(cond, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)


def test_abort_reaches_the_owning_worker(tmp_path):
    async def main():
        engines = [_Engine(), _Engine()]
        peers = [PeerAbort(str(tmp_path), i, 2, engines[i]) for i in range(2)]
        for p in peers:
            await p.start()
        try:
            gen = _Gen()
            peers[1].track("generate-tokens-x", _Sub("generate-w1-1", gen), "tenant:alice")
            # Another owner's abort, by id or wildcard, crosses to worker 1 with its owner: nothing ends.
            peers[0].abort_everywhere(["generate-tokens-x", "*"], "tenant:mallory")
            await asyncio.sleep(0.2)
            assert not gen.finished and not engines[1].aborted
            peers[0].abort_everywhere(["generate-tokens-x", "unknown"], "tenant:alice")  # received by worker 0
            await _until(lambda: gen.finished)
            assert gen.reason == FINISH_ABORT and engines[1].aborted == ["generate-w1-1"] and not engines[0].aborted

            # An owner's wildcard ends that owner's tracked requests on every worker.
            mine = _Gen()
            peers[0].track("generate-tokens-y", _Sub("generate-w0-1", mine), "tenant:alice")
            peers[1].abort_everywhere(["*"], "tenant:alice")
            await _until(lambda: mine.finished)

            # No owner (an admin, or a deployment without a keys file): every request in flight.
            others = [_Gen(), _Gen()]
            engines[0].sinks["a"] = others[0]
            engines[1].sinks["b"] = others[1]
            assert peers[1].abort_everywhere(["*"]) == 1  # this worker's count
            await _until(lambda: all(g.finished for g in others))
            assert "a" in engines[0].aborted and "b" in engines[1].aborted
        finally:
            for p in peers:
                p.close()

    asyncio.run(main())
