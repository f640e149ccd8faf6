"""Request state and one engine step of the simulated engine.

Like vLLM's scheduler: at most `max_num_seqs` requests run, the rest wait in FIFO order;
every step each running request gets one new token; a request stops on its EOS token
(finish 0, stop_reason None), on a token in `stop_token_ids` (finish 0, stop_reason = the
id), or at `max_tokens` / `max_model_len` (finish 1), checked in vLLM's order, and the
stopping token is included in `new_token_ids`. EOS and stop ids are never produced before
`min_tokens` (a real sampler masks them). The first output of a request carries its
`events` (QUEUED, SCHEDULED) and `prefill_stats`, as vLLM's do with stats logging on.

With a prefix cache (`prefix_cache`, see prefix_cache.py) a request's first token comes once its
uncached prompt tokens are prefilled, `max_num_batched_tokens` per step shared by all running
requests (decodes first), and its `prefill_stats` report the cached tokens. The same budget
applies, with or without a prefix cache, when prompt tokens cost time
(`prefill_time_per_token`): the step then reports the prompt tokens it computed
(`StepResult.prefill_tokens`) and the engine lengthens it by that many times the cost per
token. Without either, a prompt is computed within its first step, at no cost.

With a KV connector (`connector`, see kv_transfer.py) a decode-role request first waits in
`loading` for its KV transfer: it holds its blocks but no running slot, and is counted as a
deferred waiting request (`num_skipped_waiting_reqs`), as vLLM counts WAITING_FOR_REMOTE_KVS.
"""

from __future__ import annotations

import zlib

from collections import deque
from dataclasses import dataclass
from typing import Any

from vllm_pyfrontend.supervisor.sim import wire
from vllm_pyfrontend.supervisor.sim.continuation import greedy_offset, scripted_done
from vllm_pyfrontend.supervisor.sim.kv_transfer import DECODE, PREFILL, KvConnector
from vllm_pyfrontend.supervisor.sim.tokens import TokenSource


class FatalEngineError(RuntimeError):
    """A request that kills a real EngineCore (e.g. a duplicate in-flight request id)."""


class SimRequest:
    """One in-flight request; `__slots__` because thousands are stepped every few ms."""

    __slots__ = (
        "request_id",
        "client_index",
        "prompt_len",
        "cap",
        "min_tokens",
        "eos",
        "stops",
        "script",
        "eos_after",
        "offset",
        "n_out",
        "queued_ts",
        "first",
        "aborted",
        "logprobs",
        "logprob_ids",
        "pool_dim",
        "prompt",
        "kv",
        "role",
        "load",
        "prefill_left",
        "scheduled_ts",
    )

    def __init__(
        self,
        request_id: str,
        client_index: int,
        prompt_len: int,
        cap: int,
        min_tokens: int,
        eos: int | None,
        stops: frozenset[int] | None,
        script: list[int] | None,
        eos_after: int | None,
        offset: int,
        queued_ts: float,
        logprobs: int | None = None,
        pool_dim: int | None = None,
        logprob_ids: list[int] | None = None,
    ):
        self.request_id = request_id
        self.client_index = client_index
        self.prompt_len = prompt_len
        self.cap = cap
        self.min_tokens = min_tokens
        self.eos = eos
        self.stops = stops
        self.script = script
        self.eos_after = eos_after
        self.offset = offset
        self.n_out = 0
        self.queued_ts = queued_ts
        self.first = True
        self.aborted = False
        self.logprobs = logprobs  # top-k asked for (None: no logprobs)
        self.logprob_ids = logprob_ids  # `logprob_token_ids`: these ids after the sampled one
        self.pool_dim = pool_dim  # a pooling request: the size of its vector
        self.prompt: list[int] | None = None  # kept only with a prefix cache
        self.kv = None  # its prefix_cache.CachedPrompt once admitted
        self.role: str | None = None  # kv_transfer.PREFILL / DECODE with a KV connector
        self.load = None  # a decode-role request's kv_transfer.RemoteLoad
        self.prefill_left = 0  # prompt tokens still to compute (when prefill is modelled)
        self.scheduled_ts = 0.0  # when it joined the running set (its SCHEDULED event)

    @property
    def scripted(self) -> bool:
        return self.script is not None or self.eos_after is not None


@dataclass
class StepResult:
    """What one step sends: outputs per client, and the stats (for one client only)."""

    outputs: dict[int, list[list[Any]]]
    finished: dict[int, list[str]]
    stats: dict[str, Any] | None
    stats_client: int
    prefill_tokens: int = 0  # prompt tokens computed in the step (with a prefill cost)


class Scheduler:
    def __init__(
        self,
        tokens: TokenSource,
        layout: wire.Layout,
        *,
        max_num_seqs: int,
        max_model_len: int,
        block_size: int,
        num_gpu_blocks: int,
        log_stats: bool = True,
        include_finished_set: bool = False,
        pooling_dim: int | None = None,
        max_num_batched_tokens: int = 8192,
        prefill_time_per_token: float = 0.0,
        connector: KvConnector | None = None,
    ):
        self.tokens = tokens
        # A pooling model (None: generation only): every pooled vector is a slice of this one.
        self.pooling_dim = pooling_dim
        self._pooled = b""
        if pooling_dim:
            import random
            import struct

            rng = random.Random(1234)
            values = [rng.gauss(0.0, 1.0) for _ in range(pooling_dim)]
            norm = sum(v * v for v in values) ** 0.5
            self._pooled = struct.pack(f"<{pooling_dim}f", *(v / norm for v in values))
        self.layout = layout
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.kv_capacity = max(1, num_gpu_blocks * block_size)
        self.log_stats = log_stats
        self.include_finished_set = include_finished_set

        self.requests: dict[str, SimRequest] = {}  # every in-flight request, by id
        self.running: dict[str, SimRequest] = {}
        self.loading: dict[str, SimRequest] = {}  # decode-role requests awaiting their KV
        self.waiting: deque[SimRequest] = deque()
        self.num_waiting = 0  # waiting minus aborted-while-waiting
        self.kv_tokens = 0  # tokens held by running requests and those loading their KV
        self.step_counter = 0
        self._finished_sets: dict[int, set[str]] = {}
        self._step_due = False  # a step owed after aborts (vLLM steps for finished ids)
        self._stats_rr = 0
        self._prefix_reset = False
        # Off unless prefix caching is on (prefix_cache.py; sim/__main__.py attaches it).
        self.prefix_cache = None
        self.max_num_batched_tokens = max_num_batched_tokens
        self.prefill_time_per_token = prefill_time_per_token
        self.connector = connector

    # ------------------------------------------------------------------ inputs

    def has_work(self) -> bool:
        return bool(self.running) or self.num_waiting > 0 or self._step_due or bool(self.loading)

    def add(self, req: wire.SimEngineRequest, now: float) -> list[Any] | None:
        """Queue a decoded ADD. Returns an error output for the request when vLLM would
        answer it with one (finish_reason 3) instead of running it."""
        rid = req.request_id
        if rid in self.requests:
            raise FatalEngineError(f"duplicate request id {rid!r}")
        params = req.sampling_params
        prompt = req.prompt_token_ids
        if req.pooling_params is not None:
            return self._add_pooling(req, now)
        if params is None or not prompt or params.max_tokens is None:
            return wire.output_item(self.layout, rid, [], wire.FINISH_ERROR)
        prompt_len = len(prompt)
        if prompt_len >= self.max_model_len:
            return wire.output_item(self.layout, rid, [], wire.FINISH_ERROR)
        if req.abort_immediately:
            return None

        extra = params.extra_args or {}
        script: list[int] | None = None
        if "sim_token_ids" in extra:
            script = [int(t) for t in extra["sim_token_ids"]]
        elif "sim_text" in extra:
            script = self.tokens.encode(str(extra["sim_text"]))
        eos_after = extra.get("sim_eos_after")
        if script:
            done = scripted_done(prompt, script)  # a continuation goes on where it was
            if done:
                script = script[done:]
                if eos_after is not None:
                    eos_after = max(0, int(eos_after) - done)
        stops = frozenset(params.stop_token_ids) if params.stop_token_ids else None
        r = SimRequest(
            request_id=rid,
            client_index=req.client_index,
            prompt_len=prompt_len,
            cap=min(params.max_tokens, self.max_model_len - prompt_len),
            min_tokens=params.min_tokens,
            eos=params._eos_token_id,
            stops=stops,
            script=script,
            eos_after=int(eos_after) if eos_after is not None else None,
            offset=self._offset(params, prompt, rid),
            queued_ts=now,
            logprobs=(len(params.logprob_token_ids) if params.logprob_token_ids
                      else None if params.logprobs is None else (20 if params.logprobs == -1 else params.logprobs)),
            logprob_ids=list(params.logprob_token_ids) if params.logprob_token_ids else None,
        )
        if self.prefix_cache is not None:
            r.prompt = prompt
        if self.connector is not None:
            r.role = self.connector.role(extra)
            if r.role == DECODE:
                r.load = self.connector.new_load(extra)
        self.requests[rid] = r
        self.waiting.append(r)
        self.num_waiting += 1
        return None

    def _offset(self, params, prompt: list[int], rid: str) -> int:
        """Where the request reads the word stream: a greedy request from its prompt, so that
        a continuation (sim/continuation.py) goes on where its original would have."""
        if params.seed is None and params.temperature < 1e-5:
            return greedy_offset(prompt, self.tokens.stream, self.tokens.mask)
        return self.tokens.offset_for(_text_seed(params, prompt), rid)

    def _add_pooling(self, req: wire.SimEngineRequest, now: float) -> list[Any] | None:
        """A pooling request: it runs its prefill step and finishes with a vector."""
        rid = req.request_id
        if not self.pooling_dim:
            # vLLM's EngineCore.add_request raises for a task the model does not have.
            raise FatalEngineError(f"Unsupported task: pooling (request {rid!r})")
        prompt = req.prompt_token_ids
        if not prompt or len(prompt) > self.max_model_len:
            return wire.output_item(self.layout, rid, [], wire.FINISH_ERROR)
        params = req.pooling_params
        dims = params[1] if isinstance(params, list) and len(params) > 1 else None
        dim = dims if isinstance(dims, int) and 0 < dims < self.pooling_dim else self.pooling_dim
        r = SimRequest(rid, req.client_index, len(prompt), 1, 0, None, None, None, None, 0, now, pool_dim=dim)
        self.requests[rid] = r
        self.waiting.append(r)
        self.num_waiting += 1
        return None

    def abort(self, request_ids: list[str]) -> None:
        """Client abort: drop the requests; like vLLM, nothing is sent back for them."""
        for rid in request_ids:
            r = self.requests.pop(rid, None)
            if r is None:
                continue
            if r.kv is not None:
                self.prefix_cache.release(r.kv)
            if self.running.pop(rid, None) is not None:
                self.kv_tokens -= r.prompt_len + r.n_out
            elif self.loading.pop(rid, None) is not None:
                self.kv_tokens -= r.prompt_len
            else:
                r.aborted = True
                self.num_waiting -= 1
            self._note_finished(r)
            self._step_due = True

    def abort_all(self) -> dict[int, list[list[Any]]]:
        """Shutdown: abort everything in flight and return the abort outputs per client
        (vLLM's shutdown with shutdown_timeout=0 sends these)."""
        outputs: dict[int, list[list[Any]]] = {}
        for r in self.requests.values():
            outputs.setdefault(r.client_index, []).append(
                wire.output_item(self.layout, r.request_id, [], wire.FINISH_ABORT)
            )
        if self.prefix_cache is not None:
            for r in self.requests.values():
                if r.kv is not None:
                    self.prefix_cache.release(r.kv)
        self.requests.clear()
        self.running.clear()
        self.loading.clear()
        self.waiting.clear()
        self.num_waiting = 0
        self.kv_tokens = 0
        return outputs

    def reset_prefix_cache(self) -> bool:
        self._prefix_reset = True
        if self.prefix_cache is not None:
            self.prefix_cache.reset()
        return True

    def _note_finished(self, r: SimRequest) -> None:
        if self.include_finished_set:
            self._finished_sets.setdefault(r.client_index, set()).add(r.request_id)

    # ------------------------------------------------------------------ step

    def step(self, now: float) -> StepResult:
        """Run the requests whose KV arrived, admit waiting requests, prefill, and give every
        running request done prefilling one token."""
        self.step_counter += 1
        self._step_due = False
        layout_extra = self.layout.output_extra
        log_stats = self.log_stats

        new_requests = 0
        new_queries = 0
        new_hits = 0
        running = self.running
        waiting = self.waiting
        cache = self.prefix_cache
        costed = self.prefill_time_per_token > 0
        outputs: dict[int, list[list[Any]]] = {}
        if self.loading:
            self._finish_loads(now, outputs)
        while waiting and len(running) < self.max_num_seqs:
            r = waiting.popleft()
            if r.aborted:
                continue
            self.num_waiting -= 1
            new_requests += 1
            new_queries += r.prompt_len
            self.kv_tokens += r.prompt_len
            cached = 0
            if cache is not None and r.prompt is not None:
                r.kv = cache.admit(r.prompt)
                r.prompt = None
                cached = r.kv.cached_tokens
                new_hits += cached
            if self.connector is not None:
                self.connector.record_lookup(r.prompt_len - cached, r.load is not None)
            if r.load is not None:  # its prompt's KV comes from the prefill engine first
                self.connector.start_load(r.load, r.prompt_len - cached, now)
                self.loading[r.request_id] = r
                continue
            running[r.request_id] = r
            r.scheduled_ts = now
            if costed or r.kv is not None:
                r.prefill_left = r.prompt_len - cached
        prefilling = None
        prefill_tokens = 0
        if cache is not None or costed:
            prefilling, prefill_tokens = _prefill_step(self)

        stream = self.tokens.stream
        mask = self.tokens.mask
        done: list[SimRequest] = []
        for r in running.values() if not prefilling else [r for r in running.values() if r.request_id not in prefilling]:
            if r.pool_dim is not None:
                r.n_out = 1
                item = wire.output_item(
                    self.layout, r.request_id, [], wire.FINISH_STOP, None,
                    [wire.event(wire.EVENT_QUEUED, r.queued_ts), wire.event(wire.EVENT_SCHEDULED, r.scheduled_ts)]
                    if log_stats else None,
                    wire.prefill_stats(r.prompt_len, self.block_size),
                )
                item[4] = wire.pooled_tensor(self._pooled[:4 * r.pool_dim], r.pool_dim)
                outputs.setdefault(r.client_index, []).append(item)
                done.append(r)
                continue
            n = r.n_out
            if r.script is None and r.eos_after is None:
                tok = stream[(r.offset + n) & mask]
            else:
                tok = _scripted_token(r, n, stream, mask)
            if r.min_tokens > n and (tok == r.eos or (r.stops is not None and tok in r.stops)):
                tok = stream[(r.offset + n) & mask]
            n += 1
            r.n_out = n

            finish = None
            stop_reason = None
            if tok == r.eos:
                finish = wire.FINISH_STOP
            elif r.stops is not None and tok in r.stops:
                finish = wire.FINISH_STOP
                stop_reason = tok
            elif n >= r.cap:
                finish = wire.FINISH_LENGTH

            if r.first:
                r.first = False
                item = wire.output_item(
                    self.layout,
                    r.request_id,
                    [tok],
                    finish,
                    stop_reason,
                    [wire.event(wire.EVENT_QUEUED, r.queued_ts), wire.event(wire.EVENT_SCHEDULED, r.scheduled_ts)]
                    if log_stats
                    else None,
                    self._prefill_stats(r),
                )
            else:
                # The common case, spelled out: one list literal per token.
                item = [
                    r.request_id, [tok], None, None, None, finish, stop_reason, None,
                    None, None, None, None, None, 0, None, None, None, None,
                ]  # fmt: skip
                if layout_extra:
                    item += layout_extra
            if r.logprobs is not None:
                # The sampled token first, then k others from the same word stream.
                alternatives = r.logprob_ids or [stream[(r.offset + n + 17 * j) & mask] for j in range(1, r.logprobs + 1)]
                item[2] = wire.logprobs_lists(tok, alternatives)
            client_outputs = outputs.get(r.client_index)
            if client_outputs is None:
                outputs[r.client_index] = [item]
            else:
                client_outputs.append(item)
            if finish is not None:
                done.append(r)
                if r.role == PREFILL:
                    stats = item[11]
                    item[8] = self.connector.finished_params(
                        r.request_id, r.prompt_len + n - 1, stats["num_cached_tokens"] if stats else None
                    )

        self.kv_tokens += len(running)
        for r in done:
            del running[r.request_id]
            del self.requests[r.request_id]
            self.kv_tokens -= r.prompt_len + r.n_out
            if r.kv is not None:
                cache.release(r.kv)
            self._note_finished(r)
        if cache is not None:
            cache.publish()
        if done:
            # vLLM steps once more after requests finish (has_finished_requests), which
            # sends a stats-only batch when stats are on.
            self._step_due = True

        finished: dict[int, list[str]] = {}
        if self._finished_sets:
            finished = {c: list(ids) for c, ids in self._finished_sets.items()}
            self._finished_sets.clear()

        stats = None
        stats_client = 0
        if log_stats:
            stats = wire.scheduler_stats(
                num_running=len(running),
                num_waiting=self.num_waiting,
                kv_cache_usage=min(1.0, self.kv_tokens / self.kv_capacity),
                prefix_requests=new_requests,
                prefix_queries=new_queries,
                prefix_hits=new_hits,
                reset=self._prefix_reset,
            )
            if self.connector is not None:
                self._connector_stats(stats, now)
            self._prefix_reset = False
            clients = sorted(outputs) or sorted(finished)
            if clients:
                stats_client = clients[self._stats_rr % len(clients)]
                self._stats_rr += 1
        return StepResult(outputs, finished, stats, stats_client, prefill_tokens)

    def _prefill_stats(self, r: SimRequest) -> dict[str, int]:
        """A request's PrefillStats: the prompt less what the local prefix cache and a KV
        transfer brought (vLLM's PrefillStats.set at its first scheduling)."""
        stats = wire.prefill_stats(r.prompt_len, self.block_size)
        local = r.kv.cached_tokens if r.kv is not None else 0
        external = r.load.tokens if r.load is not None else 0
        if local or external:
            stats["num_cached_tokens"] = local + external
            stats["num_local_cached_tokens"] = local
            stats["num_external_cached_tokens"] = external
            stats["num_computed_tokens"] = r.prompt_len - local - external
            # vLLM's PrefillStats.finalize: the full blocks cached after the prefill, less those
            # that were cached before it.
            stats["num_cache_creation_tokens"] = max(0, stats["num_cache_creation_tokens"] - local - external)
        return stats

    def _finish_loads(self, now: float, outputs: dict[int, list[list[Any]]]) -> None:
        """Decode-role requests whose transfer has ended: a failed load ends the request
        (policy "fail") or leaves its whole prompt to compute ("recompute"); then they run,
        ahead of the waiting queue as in vLLM, while there is room."""
        running = self.running
        for r in list(self.loading.values()):
            load = r.load
            if load.ready_at > now:
                continue
            if load.fails:
                load.fails = False
                load.tokens = 0
                if not self.connector.recompute_failures:
                    self._fail_load(r, outputs)
                    continue
            if len(running) >= self.max_num_seqs:
                continue
            del self.loading[r.request_id]
            running[r.request_id] = r
            r.scheduled_ts = now
            if self.prefill_time_per_token > 0 or r.kv is not None:
                # All but the prompt's last token arrived (vLLM computes that one to sample).
                local = r.kv.cached_tokens if r.kv is not None else 0
                r.prefill_left = max(1, r.prompt_len - local - load.tokens)

    def _fail_load(self, r: SimRequest, outputs: dict[int, list[list[Any]]]) -> None:
        """vLLM's "fail" policy: the request ends with finish reason error and no tokens; its
        events are the QUEUED one only (it was never scheduled to run)."""
        del self.loading[r.request_id]
        del self.requests[r.request_id]
        self.kv_tokens -= r.prompt_len
        if r.kv is not None:
            self.prefix_cache.release(r.kv)
        events = [wire.event(wire.EVENT_QUEUED, r.queued_ts)] if self.log_stats else None
        item = wire.output_item(self.layout, r.request_id, [], wire.FINISH_ERROR, None, events)
        outputs.setdefault(r.client_index, []).append(item)
        self._note_finished(r)
        self._step_due = True

    def _connector_stats(self, stats: dict[str, Any], now: float) -> None:
        """What vLLM's stats add with a KV connector: the loads by stage, the requests waiting
        for one among the deferred waiting ones, and the connector's prefix cache stats."""
        in_progress = sum(1 for r in self.loading.values() if r.load.ready_at > now)
        stats["num_skipped_waiting_reqs"] = len(self.loading)
        stats["num_kv_fetch_reqs_by_stage"]["in_progress"] = in_progress
        stats["num_kv_fetch_reqs_by_stage"]["completed_waiting"] = len(self.loading) - in_progress
        stats["connector_prefix_cache_stats"] = self.connector.take_prefix_stats()


def _prefill_step(sched: Scheduler) -> tuple[set[str], int]:
    """Spend one step's token budget on prompts still prefilling (decodes take one token each
    first); a prompt done caches its blocks. Returns the ids still prefilling and the prompt
    tokens computed."""
    budget = sched.max_num_batched_tokens
    pending = []
    for r in sched.running.values():
        if r.prefill_left:
            pending.append(r)
        else:
            budget -= 1
    still: set[str] = set()
    computed = 0
    for r in pending:
        take = min(r.prefill_left, max(budget, 0))
        r.prefill_left -= take
        budget -= take
        computed += take
        if r.prefill_left:
            still.add(r.request_id)
        elif r.kv is not None:
            sched.prefix_cache.prefilled(r.kv)
    return still, computed


def _scripted_token(r: SimRequest, n: int, stream: list[int], mask: int) -> int:
    """Token `n` of a request with `sim_eos_after` or a `sim_text` / `sim_token_ids` script."""
    eos = r.eos
    if r.eos_after is not None and eos is not None and n >= r.eos_after:
        return eos
    script = r.script
    if script is not None:
        if n < len(script):
            return script[n]
        if eos is not None:
            return eos
    return stream[(r.offset + n) & mask]


def _text_seed(params, prompt: list[int]) -> int | None:
    """The seed that picks a request's text: its sampling seed; for greedy sampling (no seed)
    the prompt itself, so that, as with a real model, greedy output depends on the prompt only."""
    if params.seed is not None:
        return params.seed
    if params.temperature < 1e-5:
        return zlib.crc32(repr(prompt).encode())
    return None
