"""Which engine takes a new request (data parallel), and the engines' load reports it weighs.

A request pinned to a rank (`data_parallel_rank`) goes there. Any other goes to the engine that
is up with the least load: its requests in flight here plus the running and waiting requests of
its latest scheduler stats (which count every worker's requests, but only as often as a sample
reaches this worker). Equal engines take turns.

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

from typing import Iterable

from .inflight import InFlight
from .types import EngineRequest, Failure, InvalidEngineRequest


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
        in_flight = self._inflight.count
        latest = self._stats.latest
        best, best_score = indices[0], None
        start = self._rr
        for k in range(n):
            e = indices[(start + k) % n]
            score = in_flight[e]
            stats = latest.get(e)
            if stats:
                score += (stats.get("num_running_reqs") or 0) + (stats.get("num_waiting_reqs") or 0)
            if best_score is None or score < best_score:
                best, best_score = e, score
        # Rotate the tie-break so equal engines share the load.
        self._rr = (start + 1) % n
        return best

    def loads(self, indices: list[int]) -> list[int]:
        """Each engine's load as `route` weighs it."""
        in_flight = self._inflight.count
        latest = self._stats.latest
        out = []
        for e in indices:
            score = in_flight[e]
            stats = latest.get(e)
            if stats:
                score += (stats.get("num_running_reqs") or 0) + (stats.get("num_waiting_reqs") or 0)
            out.append(score)
        return out

    def _route_by_cache(self, indices: list[int], cached: dict[int, int], prompt_len: int, weight: float) -> int:
        loads = self.loads(indices)
        n = len(indices)
        worth = weight * (sum(loads) / n + PrefixRouting.IDLE_LOAD) / prompt_len
        start = self._rr
        best, best_cost = indices[0], None
        for k in range(n):
            i = (start + k) % n
            e = indices[i]
            cost = loads[i] - worth * cached.get(e, 0)
            if best_cost is None or cost < best_cost:
                best, best_cost = e, cost
        self._rr = (start + 1) % n
        return best
