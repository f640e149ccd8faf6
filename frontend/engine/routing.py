"""Which engine takes a new request (data parallel), and the engines' load reports it weighs.

A request pinned to a rank (`data_parallel_rank`) goes there. Any other goes to the engine that
is up with the least load: its requests in flight here plus the running and waiting requests of
its latest scheduler stats (which count every worker's requests, but only as often as a sample
reaches this worker). Equal engines take turns. A sample older than `STATS_MAX_AGE_S` no longer
counts: the engine sends each step's stats to one client only (an idle engine's last one to
client 0), so the sample another worker kept may describe a burst long over, and routing by it
would keep that engine idle.

With the prefix-aware policy (`PrefixRouting`: the engines publish KV events, engine/kv_index.py
knows which prompt blocks each holds) the load is weighed against the prompt's cached share:

    cost(e) = load(e) - weight * (mean load + 8) * cached_tokens(e) / prompt_tokens

and the cheapest engine wins. A prompt the engine holds whole is worth `weight * 8` requests of
load on an idle deployment and `weight` times the mean load on a busy one (default weight 1), so
a conversation follows its cache while no engine gets more than about (1 + weight) times the
mean load plus 8 for it; a hot prefix every engine holds (a shared system prompt) counts the
same on every engine and leaves the choice to load. Requests whose blocks the engine hashes with more than their tokens (LoRA,
multimodal items, a cache salt) are routed by load alone.
"""

from __future__ import annotations

import time
from typing import Iterable

from .disaggregation import Roles
from .inflight import InFlight
from .types import EngineRequest, Failure, InvalidEngineRequest


STATS_MAX_AGE_S = 1.0  # a scheduler stats sample older than this no longer counts as load


class EngineStats:
    """The latest `scheduler_stats` each engine sent this client (`latest`), the wall time they
    arrived here (`received_at`) and the engine's own clock on the batch that carried them
    (`engine_time`, EngineCoreOutputs.timestamp: it orders one engine's samples across
    workers). The output reader stores each sample as it decodes it, `engine_time` first."""

    __slots__ = ("latest", "received_at", "engine_time")

    def __init__(self) -> None:
        self.latest: dict[int, dict] = {}
        self.received_at: dict[int, float] = {}
        self.engine_time: dict[int, float] = {}


def rank_range(indices: Iterable[int]) -> str:
    """The engines' ranks as vLLM words them, "[0, 2)"; a list when they are not contiguous."""
    indices = list(indices)
    lo, hi = min(indices), max(indices)
    if hi - lo + 1 == len(indices):
        return f"[{lo}, {hi + 1})"
    return str(sorted(indices))


class PrefixRouting:
    """The prefix-aware policy's inputs: the deployment's KV index, the subscriber feeding it
    (None in tests that feed the index directly) and the cache's weight against load."""

    __slots__ = ("index", "subscriber", "weight")

    IDLE_LOAD = 8  # the mean load below which a cached prompt's worth stops shrinking

    def __init__(self, index, subscriber=None, weight: float = 1.0):
        self.index = index
        self.subscriber = subscriber
        self.weight = weight


class Router:
    """Picks an engine for each new request.

    `engines_down` is the health's table of engines that cannot take requests now (it changes
    it; routing only skips them)."""

    def __init__(self, engine_indices: list[int], inflight: InFlight, engines_down: dict[int, Failure],
                 stats: EngineStats):
        self.engine_indices = engine_indices
        self._inflight = inflight
        self._engines_down = engines_down
        self._stats = stats
        self._rr = 0
        self.prefix: PrefixRouting | None = None
        # With prefill/decode disaggregation, the engines of each phase (engine/disaggregation.py).
        self.roles: Roles | None = None
        self._was_down = False

    def check_rank(self, rank: int | None) -> None:
        """A pinned rank must name one of this client's engines."""
        if rank is not None and rank not in self._inflight.count:
            raise InvalidEngineRequest(
                f"data_parallel_rank {rank} is out of range {rank_range(self.engine_indices)}.",
                "data_parallel_rank")

    def route(self, req: EngineRequest) -> int:
        indices = self.engine_indices
        if req.data_parallel_rank is not None:
            return req.data_parallel_rank
        down = self._engines_down
        prefix = self.prefix
        roles = self.roles
        if roles is not None:
            # The pool of its phase; the other pool when none of those is up (a prefill engine
            # can decode, a decode engine prefill: what they cannot pass on they compute).
            pool = roles.pool(req)
            if down and all(e in down for e in pool):
                pool = roles.other(pool)
            indices = pool
        if down:
            indices = [e for e in indices if e not in down]
        if prefix is not None and (down or self._was_down) and prefix.subscriber is not None:
            prefix.subscriber.engines_down(down)  # an engine down lost its cache
            self._was_down = bool(down)
        n = len(indices)
        if n == 1:
            return indices[0]
        if prefix is not None and prefix.index.block_size and not (
                req.lora_request or req.mm_features or req.cache_salt):
            cached = prefix.index.match(req.prompt_token_ids)
            if cached:
                return self._route_by_cache(indices, cached, len(req.prompt_token_ids), prefix.weight)
        return self._cheapest(indices, self.loads(indices))

    def _cheapest(self, indices: list[int], costs: list[float]) -> int:
        """The engine of least cost: the first from a start that turns with each request, so
        equal engines take turns."""
        n = len(indices)
        start = self._rr % n  # (fewer engines may be up than when it was set)
        best = start
        for k in range(1, n):
            j = (start + k) % n
            if costs[j] < costs[best]:
                best = j
        self._rr = (start + 1) % n
        return indices[best]

    def loads(self, indices: list[int]) -> list[int]:
        """Each engine's load as `route` weighs it: its requests in flight here, plus the
        running and waiting requests of its scheduler stats while they are fresh."""
        in_flight = self._inflight.count
        out = [in_flight[e] for e in indices]
        stats = self._stats
        latest = stats.latest
        if latest:
            fresh_since = time.time() - STATS_MAX_AGE_S
            received = stats.received_at
            for k, e in enumerate(indices):
                sample = latest.get(e)
                if sample and received.get(e, 0.0) >= fresh_since:
                    out[k] += (sample.get("num_running_reqs") or 0) + (sample.get("num_waiting_reqs") or 0)
        return out

    def _route_by_cache(self, indices: list[int], cached: dict[int, int], prompt_len: int, weight: float) -> int:
        loads = self.loads(indices)
        n = len(indices)
        worth = weight * (sum(loads) / n + PrefixRouting.IDLE_LOAD) / prompt_len
        return self._cheapest(indices, [loads[k] - worth * cached.get(e, 0) for k, e in enumerate(indices)])
