"""The simulated EngineCore, driven over real ZMQ sockets by a bare frontend (plain zmq +
ormsgpack, see sim_harness.py): handshake, generation and stop rules, aborts, utilities,
queueing, stats, fault behaviour, step clock, and the CLI process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from tokenizers import Tokenizer

from tests.supervisor.sim_harness import (
    EOS,
    TOKENIZER_DIR,
    FakeFrontend,
    add_request_array,
    engines_for,
    sampling_params,
)

READY_KEYS = {
    "max_model_len", "num_gpu_blocks", "block_size", "dp_stats_address", "dtype",
    "vllm_version", "world_size", "data_parallel_size", "tensor_parallel_size",
    "pipeline_parallel_size", "decode_context_parallel_size", "data_parallel_rank",
    "max_num_seqs", "max_num_batched_tokens", "instance_id", "supports_lora", "max_loras",
}  # fmt: skip
PROMPT = [0, 1000, 2000, 3000]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(os.path.join(TOKENIZER_DIR, "tokenizer.json"))


@pytest.fixture()
def make_engine(tmp_path):
    """Start a sim engine (in a thread) joined to a FakeFrontend; stop both afterwards."""
    yield from engines_for(tmp_path)


def test_handshake_messages(make_engine):
    fe, _ = make_engine(num_clients=2, engine_index=3, max_model_len=4096, max_num_seqs=7)
    assert fe.identity == (3).to_bytes(2, "little")
    assert fe.hello == {"status": "HELLO", "local": False, "headless": True}
    assert fe.ready_msg == {"status": "READY", "local": False, "headless": True}
    assert len(fe.ready_responses) == 2
    for resp in fe.ready_responses:
        assert READY_KEYS <= set(resp)
        assert resp["max_model_len"] == 4096
        assert resp["max_num_seqs"] == 7
        assert resp["data_parallel_rank"] == 3
        assert resp["vllm_version"] == "0.32.0"


def test_runs_to_max_tokens_with_readable_text(make_engine, tokenizer):
    fe, _ = make_engine()
    fe.add("r1", PROMPT, sampling_params(max_tokens=12, seed=7))
    got = fe.collect(["r1"])["r1"]
    assert len(got.tokens) == 12
    assert got.finish_reason == 1 and got.stop_reason is None
    assert all(len(item[1]) == 1 for item in got.items)  # one token per step
    first = got.items[0]
    assert len(first) == 18  # EngineCoreOutput, 0.32 layout
    assert first[11]["num_prompt_tokens"] == len(PROMPT)
    assert [e["type"] for e in first[7]] == [1, 2]  # QUEUED, SCHEDULED
    assert all(item[7] is None and item[11] is None for item in got.items[1:])
    text = tokenizer.decode(got.tokens)
    assert len(text.split()) >= 8 and all(ch.isascii() for ch in text)
    # Same seed, same text.
    fe.add("r2", PROMPT, sampling_params(max_tokens=12, seed=7))
    assert fe.collect(["r2"])["r2"].tokens == got.tokens


def test_eos_is_sent_as_last_token(make_engine):
    fe, _ = make_engine()
    fe.add("e", PROMPT, sampling_params(max_tokens=50, extra_args={"sim_eos_after": 3}))
    got = fe.collect(["e"])["e"]
    assert len(got.tokens) == 4 and got.tokens[-1] == EOS
    assert got.finish_reason == 0 and got.stop_reason is None


def test_ignore_eos_runs_to_length(make_engine):
    fe, _ = make_engine()
    fe.add("i", PROMPT, sampling_params(max_tokens=6, eos=None, extra_args={"sim_eos_after": 2}))
    got = fe.collect(["i"])["i"]
    assert len(got.tokens) == 6 and EOS not in got.tokens and got.finish_reason == 1


def test_min_tokens_holds_back_eos(make_engine):
    fe, _ = make_engine()
    fe.add("m", PROMPT, sampling_params(max_tokens=20, min_tokens=5, extra_args={"sim_eos_after": 1}))
    got = fe.collect(["m"])["m"]
    assert len(got.tokens) == 6 and got.tokens[-1] == EOS and got.finish_reason == 0


def test_scripted_text_then_eos(make_engine, tokenizer):
    fe, _ = make_engine()
    text = "Hello there, this is scripted."
    fe.add("s", PROMPT, sampling_params(max_tokens=100, extra_args={"sim_text": text}))
    got = fe.collect(["s"])["s"]
    assert got.tokens[-1] == EOS and got.finish_reason == 0
    assert tokenizer.decode(got.tokens[:-1]) == text
    # Capped by max_tokens.
    fe.add("s2", PROMPT, sampling_params(max_tokens=2, extra_args={"sim_text": text}))
    got2 = fe.collect(["s2"])["s2"]
    assert got2.tokens == got.tokens[:2] and got2.finish_reason == 1


def test_stop_token_id(make_engine, tokenizer):
    fe, _ = make_engine()
    world = tokenizer.encode(" world", add_special_tokens=False).ids
    assert len(world) == 1
    params = sampling_params(
        max_tokens=100, stop_token_ids=world, extra_args={"sim_text": "hello world and more"}
    )
    fe.add("st", PROMPT, params)
    got = fe.collect(["st"])["st"]
    assert got.tokens[-1] == world[0]
    assert got.finish_reason == 0 and got.stop_reason == world[0]
    assert tokenizer.decode(got.tokens) == "hello world"


def test_abort_sends_nothing_back(make_engine):
    fe, eng = make_engine()
    fe.add("a", PROMPT, sampling_params(max_tokens=100000, eos=None))
    fe.add("b", PROMPT, sampling_params(max_tokens=30, eos=None))
    seen = 0
    while seen < 3:
        msg = fe.recv()
        seen += sum(1 for item in msg[1] if item[0] == "a")
    fe.abort(["a", "never-existed"])
    got = fe.collect(["b"])
    assert "a" not in got or got["a"].finish_reason is None  # no final output for a
    assert "a" not in eng.engine.scheduler.requests
    while (msg := fe.try_recv(timeout=0.2)) is not None:
        assert msg[1] == []  # only the stats batch vLLM sends after requests finish


def test_utilities(make_engine):
    fe, _ = make_engine()
    cid = fe.utility("get_supported_tasks")
    msg = fe.recv()
    assert msg[1] == [] and msg[4] == [cid, None, [None, ["generate"]]]
    cid = fe.utility("reset_prefix_cache", False, False)
    assert fe.recv()[4] == [cid, None, [None, True]]
    cid = fe.utility("is_sleeping")
    assert fe.recv()[4] == [cid, None, [None, False]]
    cid = fe.utility("no_such_method")
    out = fe.recv()[4]
    assert out[0] == cid and out[2] is None
    assert out[1].startswith("Call to no_such_method method failed")


def test_max_num_seqs_queues_fifo(make_engine):
    fe, _ = make_engine(max_num_seqs=2)
    for i in range(4):
        fe.add(f"q{i}", PROMPT, sampling_params(max_tokens=5, eos=None))
    batches: list = []
    got = fe.collect([f"q{i}" for i in range(4)], batches=batches)
    assert all(len(got[f"q{i}"].tokens) == 5 for i in range(4))
    first_ids = {item[0] for item in batches[0][1]}
    assert first_ids == {"q0", "q1"}
    assert all(len(b[1]) <= 2 for b in batches)
    stats = batches[0][2]
    assert stats["num_running_reqs"] == 2 and stats["num_waiting_reqs"] == 2
    assert stats["prefix_cache_stats"]["requests"] == 2
    assert stats["prefix_cache_stats"]["queries"] == 2 * len(PROMPT)
    assert 0.0 < stats["kv_cache_usage"] < 1.0


def test_outputs_go_to_the_requests_client_and_stats_rotate(make_engine):
    fe, _ = make_engine(num_clients=2)
    fe.add("c0", PROMPT, sampling_params(max_tokens=8, eos=None), client=0)
    fe.add("c1", PROMPT, sampling_params(max_tokens=8, eos=None), client=1)
    b0: list = []
    b1: list = []
    assert set(fe.collect(["c0"], client=0, batches=b0)) == {"c0"}
    assert set(fe.collect(["c1"], client=1, batches=b1)) == {"c1"}
    with_stats = sum(b[2] is not None for b in b0) + sum(b[2] is not None for b in b1)
    assert sum(b[2] is not None for b in b0) >= 2 and sum(b[2] is not None for b in b1) >= 2
    assert with_stats <= len(b0)  # one stats map per step, not per client
    assert all(b[0] == 0 and len(b) == 9 for b in b0 + b1)


def test_finished_set_when_enabled(make_engine):
    fe, _ = make_engine(include_finished_set=True)
    fe.add("f", PROMPT, sampling_params(max_tokens=2, eos=None))
    batches: list = []
    fe.collect(["f"], batches=batches)
    # As in vLLM's scheduler, the id rides in the same batch as the final output.
    assert [b[5] for b in batches] == [None, ["f"]]


def test_vllm_0_33_layout(make_engine):
    fe, _ = make_engine(vllm_version="0.33.0")
    fe.add("v", PROMPT, sampling_params(max_tokens=2))
    got = fe.collect(["v"])["v"]
    assert all(len(item) == 19 for item in got.items)
    assert fe.ready_responses[0]["vllm_version"] == "0.33.0"


@pytest.mark.parametrize(
    "bad",
    [
        ["short"],  # fewer than the 9 required fields
        add_request_array("x", PROMPT, {"max_tokens": True}),  # bool in an int field
        add_request_array("x", PROMPT, {"max_tokens": 4, "temperature": 3.0}),  # fails __post_init__
        add_request_array("x", PROMPT, {"max_tokens": 4.0}),  # float in an int field
    ],
)
def test_undecodable_request_kills_engine(make_engine, bad):
    fe, eng = make_engine(num_clients=2)
    fe.send(0, b"\x00", bad)
    assert fe.recv(0) == b"ENGINE_CORE_DEAD"
    assert fe.recv(1) == b"ENGINE_CORE_DEAD"
    eng.thread.join(5)
    assert eng.exit_code == 1


def test_duplicate_request_id_kills_engine(make_engine):
    fe, eng = make_engine()
    fe.add("dup", PROMPT, sampling_params(max_tokens=1000, eos=None))
    fe.add("dup", PROMPT, sampling_params(max_tokens=1000, eos=None))
    while (msg := fe.recv()) != b"ENGINE_CORE_DEAD":
        pass
    eng.thread.join(5)
    assert eng.exit_code == 1


def test_null_max_tokens_is_a_request_error(make_engine):
    fe, _ = make_engine()
    fe.add("n", PROMPT, {"max_tokens": None, "_eos_token_id": EOS})
    got = fe.collect(["n"])["n"]
    assert got.finish_reason == 3 and got.tokens == []
    fe.add("ok", PROMPT, sampling_params(max_tokens=2))  # engine still serves
    assert fe.collect(["ok"])["ok"].finish_reason == 1


def test_deaf_mode_stops_reading(make_engine):
    fe, eng = make_engine(on_bad_request="deaf")
    fe.send(0, b"\x00", ["short"])
    fe.add("late", PROMPT, sampling_params(max_tokens=2))
    assert fe.try_recv(timeout=0.3) is None
    assert eng.thread.is_alive()


def test_die_after_steps(make_engine):
    fe, eng = make_engine(die_after_steps=3)
    fe.add("d", PROMPT, sampling_params(max_tokens=100, eos=None))
    msgs = []
    while (msg := fe.recv()) != b"ENGINE_CORE_DEAD":
        msgs.append(msg)
    assert len(msgs) == 3
    eng.thread.join(5)
    assert eng.exit_code == 1


def test_hang_after_steps(make_engine):
    fe, eng = make_engine(hang_after_steps=2)
    fe.add("h", PROMPT, sampling_params(max_tokens=100, eos=None))
    fe.recv()
    fe.recv()
    assert fe.try_recv(timeout=0.3) is None
    fe.utility("is_sleeping")
    assert fe.try_recv(timeout=0.3) is None
    assert eng.thread.is_alive()


def test_cli_process_serves_and_aborts_on_sigterm(tmp_path):
    fe = FakeFrontend(tmp_path, 1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_pyfrontend.supervisor.sim", "--handshake-address",
         fe.handshake_address, "--engine-index", "0", "--model", TOKENIZER_DIR,
         "--step-time", "0.005"],
        start_new_session=True,
    )  # fmt: skip
    try:
        fe.do_handshake(timeout=30)
        fe.add("p", PROMPT, sampling_params(max_tokens=4))
        assert fe.collect(["p"])["p"].finish_reason == 1
        fe.add("long", PROMPT, sampling_params(max_tokens=100000, eos=None))
        fe.recv()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        got = fe.collect(["long"], timeout=5)["long"]
        assert got.finish_reason == 2  # vLLM aborts in-flight requests on shutdown
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        fe.close()
