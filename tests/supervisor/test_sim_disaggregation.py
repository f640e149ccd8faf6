"""The simulated engine in prefill/decode disaggregation (supervisor/sim/kv_transfer.py): a
prefill-role request's final output carries vLLM's NixlConnector map (read with the frontend's
own decoder), a decode-role request waits for its transfer and reports the prompt as loaded,
failed loads follow `kv_load_failure_policy`, `kv_role` picks the roles, and the prefill cost
model (`prefill_time_per_token`) lengthens the steps that compute prompt tokens."""

from __future__ import annotations

import json
import time
from typing import Any

import ormsgpack
import pytest

from vllm_pyfrontend.engine import wire as fwire
from vllm_pyfrontend.supervisor.engine_launch import split_sim_flags
from vllm_pyfrontend.supervisor.sim import wire
from vllm_pyfrontend.supervisor.sim.__main__ import build_parser, config_from_args
from vllm_pyfrontend.supervisor.sim.kv_transfer import KvTransferConfig
from vllm_pyfrontend.supervisor.sim.scheduler import Scheduler
from vllm_pyfrontend.supervisor.sim.tokens import TokenSource
from tests.supervisor.sim_harness import (
    TOKENIZER_DIR,
    FakeFrontend,
    add_request_array,
    engines_for,
    sampling_params,
)

# What the frontend sends a prefill engine (vLLM's proxies send the same).
REMOTE_DECODE = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                 "remote_block_ids": None, "remote_host": None, "remote_port": None}
# vLLM 0.32's NixlConnector `request_finished` keys (nixl/pull_scheduler.py), and the one the
# scheduler adds when the final output carries the prefill stats.
NIXL_KEYS = {"do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id",
             "remote_request_id", "remote_host", "remote_port", "tp_size", "dcp_size", "pp_size",
             "remote_num_tokens", "remote_blocks_expiry_time", "transfer_mode"}


def prompt(n: int, start: int = 100) -> list[int]:
    return list(range(start, start + n))


def kv_params(params: dict[str, Any], max_tokens: int = 4, **extra: Any) -> dict[str, Any]:
    return sampling_params(max_tokens=max_tokens, eos=None, extra_args={"kv_transfer_params": params}, **extra)


def remote_prefill(**changes: Any) -> dict[str, Any]:
    """The map a prefill engine returned, as the frontend passes it to a decode engine."""
    return {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [[1, 2, 3]],
            "remote_engine_id": "sim-prefill_dp0", "remote_request_id": "r", "remote_host": "localhost",
            "remote_port": 5600, "tp_size": 1, "dcp_size": 1, "pp_size": 1, "remote_num_tokens": 40,
            "remote_blocks_expiry_time": None, "transfer_mode": "pull", **changes}


def kv_config(role: str = "kv_both", policy: str | None = None, **extra: Any) -> KvTransferConfig:
    data: dict[str, Any] = {"kv_connector": "NixlConnector", "kv_role": role,
                            "kv_connector_extra_config": {"transfer_time_per_token": 0.0, **extra}}
    if policy is not None:
        data["kv_load_failure_policy"] = policy
    return KvTransferConfig.parse(json.dumps(data))


@pytest.fixture()
def make_engine(tmp_path):
    """A sim engine (in a thread) joined to a FakeFrontend; `prefix_cache=True` models one."""
    yield from engines_for(tmp_path)


@pytest.fixture(autouse=True)
def _side_channel(monkeypatch):
    monkeypatch.setenv("VLLM_NIXL_SIDE_CHANNEL_HOST", "10.0.0.7")
    monkeypatch.setenv("VLLM_NIXL_SIDE_CHANNEL_PORT", "7000")


class Seen:
    """A request's outputs as the frontend decodes them: (raw output, EngineOutput, the batch's
    engine timestamp, the local monotonic time it arrived)."""

    def __init__(self) -> None:
        self.items: list[tuple[list[Any], fwire.EngineOutput, float, float]] = []

    @property
    def first(self) -> fwire.EngineOutput:
        return self.items[0][1]

    @property
    def last(self) -> fwire.EngineOutput:
        return self.items[-1][1]

    @property
    def tokens(self) -> list[int]:
        return [t for _, out, _, _ in self.items for t in out.new_token_ids]


def collect(fe: FakeFrontend, ids: list[str], timeout: float = 10.0,
            stats: list[dict[str, Any]] | None = None) -> dict[str, Seen]:
    """Read raw batches until every id in `ids` finished, decoding them with the frontend's
    wire module (vLLM 0.32's layout)."""
    got: dict[str, Seen] = {}
    pending = set(ids)
    deadline = time.monotonic() + timeout
    while pending:
        left = deadline - time.monotonic()
        assert left > 0 and fe.outputs[0].poll(int(left * 1000)), f"timed out waiting for {pending}"
        frames = fe.outputs[0].recv_multipart()
        arrived = time.monotonic()
        head, raws = fwire.decode_message(frames, fwire.LAYOUT_0_32)
        if stats is not None and head.scheduler_stats is not None:
            stats.append(head.scheduler_stats)
        for o in raws:
            out = fwire.decode_output(o, frames, fwire.LAYOUT_0_32)
            got.setdefault(o[0], Seen()).items.append((o, out, head.timestamp, arrived))
            if out.finish_reason is not None:
                pending.discard(o[0])
    return got


# ---------------------------------------------------------------------------- prefill role


def test_prefill_role_returns_nixl_params_at_index_8(make_engine):
    fe, _ = make_engine(engine_index=2, kv_transfer_config=kv_config())
    fe.add("p", prompt(40), kv_params(REMOTE_DECODE, max_tokens=1))
    fe.add("plain", prompt(40), sampling_params(max_tokens=1, eos=None))
    got = collect(fe, ["p", "plain"])
    raw, out, _, _ = got["p"].items[-1]
    assert fwire.LAYOUT_0_32.output_index("kv_transfer_params") == 8
    assert out.finish_reason == wire.FINISH_LENGTH and len(out.new_token_ids) == 1
    params = out.kv_transfer_params
    assert params == raw[8] and set(params) == NIXL_KEYS | {"remote_prefill_cached_tokens"}
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    blocks = params["remote_block_ids"]
    assert len(blocks) == 1 and len(blocks[0]) == 3 and all(b > 0 for b in blocks[0])  # 40 tokens, 16 a block
    assert params["remote_engine_id"].endswith("_dp2")
    assert (params["remote_host"], params["remote_port"]) == ("10.0.0.7", 7002)
    assert params["remote_request_id"] == "p" and params["remote_num_tokens"] == 40
    assert (params["tp_size"], params["dcp_size"], params["pp_size"]) == (1, 1, 1)
    assert params["transfer_mode"] == "pull" and params["remote_prefill_cached_tokens"] == 0
    assert got["plain"].last.kv_transfer_params is None  # an ordinary request gets none


def test_prefill_params_only_when_it_stopped_or_hit_its_length(make_engine):
    fe, eng = make_engine(kv_transfer_config=kv_config("kv_producer"))
    fe.add("three", prompt(20), kv_params(REMOTE_DECODE, max_tokens=3))
    params = collect(fe, ["three"])["three"].last.kv_transfer_params
    # The final output is not the first: no prefill stats, so no remote_prefill_cached_tokens.
    assert set(params) == NIXL_KEYS and params["remote_num_tokens"] == 22
    fe.add("cut", prompt(20), kv_params(REMOTE_DECODE, max_tokens=10_000))
    while not any(item[0] == "cut" for item in fe.recv()[1]):
        pass
    eng.stop()  # shutdown aborts the request: vLLM's request_finished returns no params
    got = fe.collect(["cut"], timeout=5)["cut"]
    assert got.finish_reason == wire.FINISH_ABORT and got.items[-1][8] is None


def test_without_the_flag_kv_transfer_params_are_ignored(make_engine):
    fe, _ = make_engine()
    fe.add("p", prompt(40), kv_params(REMOTE_DECODE, max_tokens=1))
    fe.add("d", prompt(40), kv_params(remote_prefill()))
    got = collect(fe, ["p", "d"])
    assert got["p"].last.kv_transfer_params is None
    assert got["d"].first.num_cached_tokens == 0 and got["d"].first.num_computed_tokens == 40


# ---------------------------------------------------------------------------- decode role


def test_prefill_engine_to_decode_engine(make_engine):
    """The frontend's two phases: the prefill engine's map goes, as is, to the decode engine,
    which reports the whole prompt as loaded (external) and generates as usual."""
    pfe, _ = make_engine(kv_transfer_config=kv_config("kv_producer"))
    dfe, _ = make_engine(engine_index=1, kv_transfer_config=kv_config("kv_consumer"))
    pfe.add("r", prompt(40), kv_params(REMOTE_DECODE, max_tokens=1))
    params = collect(pfe, ["r"])["r"].last.kv_transfer_params
    dfe.add("r", prompt(40), kv_params(params, max_tokens=5))
    got = collect(dfe, ["r"])["r"]
    stats = got.items[0][0][11]
    assert stats == {"num_prompt_tokens": 40, "num_computed_tokens": 0, "num_cached_tokens": 40,
                     "num_local_cached_tokens": 0, "num_external_cached_tokens": 40,
                     "num_cache_creation_tokens": 0}
    assert got.first.num_cached_tokens == 40 and got.first.num_computed_tokens == 0
    assert len(got.tokens) == 5 and got.last.finish_reason == wire.FINISH_LENGTH
    assert got.last.kv_transfer_params is None  # a decode engine returns none


def test_decode_role_with_a_local_prefix_hit_loads_the_rest(make_engine):
    fe, _ = make_engine(prefix_cache=True, kv_transfer_config=kv_config())
    fe.add("warm", prompt(40), sampling_params(max_tokens=2, eos=None))
    collect(fe, ["warm"])
    fe.add("d", prompt(40) + prompt(30, 5000), kv_params(remote_prefill()))
    stats = collect(fe, ["d"])["d"].items[0][0][11]
    assert stats["num_local_cached_tokens"] == 32  # two full blocks cached here
    assert stats["num_external_cached_tokens"] == 70 - 32 and stats["num_cached_tokens"] == 70
    assert stats["num_computed_tokens"] == 0


def test_transfer_time_is_waited_out_without_taking_a_running_slot(make_engine):
    """One running slot: the decode-role request waits for its KV (0.4 s) outside it, counted as
    a deferred waiting request, while an ordinary request runs to its end."""
    fe, _ = make_engine(max_num_seqs=1, kv_transfer_config=kv_config(transfer_time_per_token=2e-4))
    sent = time.monotonic()
    fe.add("d", prompt(2000), kv_params(remote_prefill(), max_tokens=3))
    time.sleep(0.05)
    fe.add("plain", prompt(10), sampling_params(max_tokens=3, eos=None))
    stats: list[dict[str, Any]] = []
    got = collect(fe, ["d", "plain"], stats=stats)
    first_d = got["d"].items[0][3]
    assert first_d - sent >= 0.4  # 2000 tokens at 2e-4 s
    assert got["plain"].items[-1][3] < first_d  # it ran (and ended) during the transfer
    assert got["d"].first.num_cached_tokens == 2000 and len(got["d"].tokens) == 3
    loading = [s for s in stats if s["num_skipped_waiting_reqs"] == 1]
    assert loading and all(s["num_waiting_reqs"] == 0 for s in loading)
    assert any(s["num_running_reqs"] == 1 for s in loading)  # the ordinary one
    assert any(s["num_kv_fetch_reqs_by_stage"]["in_progress"] == 1 for s in loading)
    hits = sum(s["connector_prefix_cache_stats"]["hits"] for s in stats)
    assert hits == 2000


# ---------------------------------------------------------------------------- failed loads


def test_failed_load_ends_the_request_under_policy_fail(make_engine):
    assert KvTransferConfig.parse({"kv_role": "kv_both"}).kv_load_failure_policy == "fail"  # 0.32's default
    fe, _ = make_engine(kv_transfer_config=kv_config(transfer_time_per_token=1e-4))
    sent = time.monotonic()
    fe.add("f", prompt(1000), kv_params(remote_prefill(sim_fail_load=True)))
    got = collect(fe, ["f"])["f"]
    raw, out, _, arrived = got.items[-1]
    assert len(got.items) == 1 and arrived - sent >= 0.1  # it fails when the transfer ends
    assert out.finish_reason == wire.FINISH_ERROR and out.new_token_ids == []
    assert [e["type"] for e in raw[7]] == [wire.EVENT_QUEUED] and raw[11] is None
    fe.add("ok", prompt(1000), kv_params(remote_prefill()))  # the engine goes on
    assert collect(fe, ["ok"])["ok"].first.num_cached_tokens == 1000


def test_every_nth_load_fails(make_engine):
    fe, _ = make_engine(kv_transfer_config=kv_config(policy="fail", fail_load_every=2))
    ids = [f"d{i}" for i in range(4)]
    for rid in ids:
        fe.add(rid, prompt(40), kv_params(remote_prefill()))
    fe.add("plain", prompt(40), sampling_params(max_tokens=2, eos=None))  # not counted
    got = collect(fe, ids + ["plain"])
    assert [got[rid].last.finish_reason for rid in ids] == [1, 3, 1, 3]
    assert got["plain"].last.finish_reason == 1


def test_failed_load_recomputes_the_prompt_under_policy_recompute(make_engine):
    fe, _ = make_engine(prefill_time_per_token=1e-4,
                        kv_transfer_config=kv_config(policy="recompute", transfer_time_per_token=5e-5))
    sent = time.monotonic()
    fe.add("r", prompt(2000), kv_params(remote_prefill(sim_fail_load=True), max_tokens=3))
    got = collect(fe, ["r"])["r"]
    assert got.items[0][3] - sent >= 0.1 + 0.2  # the transfer, then the whole prompt's prefill
    assert got.first.num_cached_tokens == 0 and got.first.num_computed_tokens == 2000
    assert got.items[0][0][11]["num_external_cached_tokens"] == 0
    assert len(got.tokens) == 3 and got.last.finish_reason == wire.FINISH_LENGTH


# ---------------------------------------------------------------------------- roles


def test_producer_serves_decode_role_requests_as_ordinary_ones(make_engine):
    fe, _ = make_engine(kv_transfer_config=kv_config("kv_producer", transfer_time_per_token=1.0))
    fe.add("d", prompt(40), kv_params(remote_prefill()))
    got = collect(fe, ["d"], timeout=5)["d"]  # no 40 s transfer
    assert got.first.num_cached_tokens == 0 and got.first.num_computed_tokens == 40


def test_consumer_returns_nothing_for_prefill_role_requests(make_engine):
    fe, _ = make_engine(kv_transfer_config=kv_config("kv_consumer"))
    fe.add("p", prompt(40), kv_params(REMOTE_DECODE, max_tokens=1))
    fe.add("d", prompt(40), kv_params(remote_prefill()))
    got = collect(fe, ["p", "d"])
    assert got["p"].last.kv_transfer_params is None and got["p"].last.finish_reason == 1
    assert got["d"].first.num_cached_tokens == 40


# ---------------------------------------------------------------------------- prefill cost


def _scheduler(prefill_time_per_token: float, budget: int = 1024) -> Scheduler:
    return Scheduler(TokenSource(TOKENIZER_DIR), wire.Layout("0.32.0"), max_num_seqs=8, max_model_len=16384,
                     block_size=16, num_gpu_blocks=4096, max_num_batched_tokens=budget,
                     prefill_time_per_token=prefill_time_per_token)


def _add(sched: Scheduler, rid: str, n: int, max_tokens: int = 50) -> None:
    payload = ormsgpack.packb(add_request_array(rid, prompt(n), sampling_params(max_tokens=max_tokens, eos=None)))
    assert sched.add(wire.decode_add(payload), time.monotonic()) is None


def _first_token_step(sched: Scheduler, rid: str) -> tuple[int, list[int]]:
    """Steps until `rid` has its first token, and the prompt tokens each step computed."""
    computed = []
    for n in range(1, 50):
        result = sched.step(time.monotonic())
        computed.append(result.prefill_tokens)
        if any(item[0] == rid for items in result.outputs.values() for item in items):
            return n, computed
    raise AssertionError(f"{rid} never produced a token")


def test_no_prefill_cost_keeps_prompts_free():
    sched = _scheduler(0.0)
    _add(sched, "long", 4000)
    assert _first_token_step(sched, "long") == (1, [0])


def test_prefill_cost_chunks_prompts_by_the_token_budget():
    sched = _scheduler(1e-5)
    _add(sched, "a", 10)
    assert _first_token_step(sched, "a") == (1, [10])
    _add(sched, "long", 3000)
    steps, computed = _first_token_step(sched, "long")
    assert steps == 3 and computed == [1023, 1023, 954]  # "a" decodes first in each step


def test_prefill_cost_lengthens_the_steps_of_every_stream(make_engine):
    fe, _ = make_engine(step_time=0.005, prefill_time_per_token=1e-4)
    fe.add("a", prompt(4), sampling_params(max_tokens=400, eos=None))
    time.sleep(0.1)  # some ordinary steps first
    fe.add("long", prompt(3000), sampling_params(max_tokens=1, eos=None))
    got = collect(fe, ["long"])
    fe.abort(["a"])
    # The step that computed the 3000 prompt tokens lasted 0.3 s more: "a"'s token of that step
    # came with the long prompt's first token, 0.3 s after the step before it.
    stamps = [ts for _, _, ts, _ in got["a"].items]
    step = next(i for i, ts in enumerate(stamps) if i and ts == got["long"].items[0][2])
    assert stamps[step] - stamps[step - 1] >= 0.3
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert sorted(gaps)[len(gaps) // 2] < 0.1  # the other steps are ordinary ones


# ---------------------------------------------------------------------------- flags


def test_flags_reach_the_config():
    kv = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_consumer", "kv_load_failure_policy": "recompute",
                     "kv_connector_extra_config": {"transfer_time_per_token": 1e-5, "fail_load_every": 3}})
    args = ["--handshake-address", "tcp://127.0.0.1:1", "--kv-transfer-config", kv, "--prefill-time-per-token", "2e-6"]
    cfg = config_from_args(build_parser().parse_args(args))
    assert cfg.prefill_time_per_token == 2e-6
    assert cfg.kv_transfer_config == KvTransferConfig("kv_consumer", "recompute", 1e-5, 3)
    assert config_from_args(build_parser().parse_args(args[:2])).kv_transfer_config is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(args[:2] + ["--kv-transfer-config", '{"kv_role": "kv_sender"}'])
    picked, rest = split_sim_flags(["--kv-transfer-config", kv, "--prefill-time-per-token", "1e-6", "-tp", "2"])
    assert picked == ["--kv-transfer-config", kv, "--prefill-time-per-token", "1e-6"] and rest == ["-tp", "2"]
