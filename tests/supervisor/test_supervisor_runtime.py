"""The private runtime dir: client addresses per worker, recorded engine info, cleanup."""

from __future__ import annotations

import json
import os
import stat

from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.supervisor.deployment import Supervisor
from vllm_pyfrontend.supervisor.options import SupervisorOptions
from vllm_pyfrontend.supervisor.runtime import RuntimeDir, tcp_uri


def test_ipc_addresses_live_in_the_private_dir():
    rt = RuntimeDir()
    try:
        assert stat.S_IMODE(os.stat(rt.path).st_mode) == 0o700
        addrs = rt.client_addresses(3)
        assert [a.input for a in addrs] == [f"ipc://{rt.path}/w{i}-in.sock" for i in range(3)]
        assert [a.output for a in addrs] == [f"ipc://{rt.path}/w{i}-out.sock" for i in range(3)]
        assert all(len(a.input) - len("ipc://") < 100 for a in addrs)  # unix socket path limit
    finally:
        rt.cleanup()
    assert not os.path.exists(rt.path)


def test_tcp_addresses_for_remote_engines_are_distinct():
    rt = RuntimeDir()
    try:
        addrs = rt.client_addresses(4, tcp_host="127.0.0.1")
        all_addrs = [a.input for a in addrs] + [a.output for a in addrs]
        assert len(set(all_addrs)) == 8
        assert all(a.startswith("tcp://127.0.0.1:") for a in all_addrs)
    finally:
        rt.cleanup()


def test_tcp_uri_brackets_ipv6():
    assert tcp_uri("10.0.0.5", 29550) == "tcp://10.0.0.5:29550"
    assert tcp_uri("::1", 5) == "tcp://[::1]:5"


def test_engine_infos_read_back():
    rt = RuntimeDir()
    try:
        assert rt.read_engine_infos() is None
        with open(rt.engine_info_path, "w") as f:
            f.write("{half")
        assert rt.read_engine_infos() is None  # a torn or foreign file is not trusted
        infos = [{"engine_index": 0, "max_model_len": 4096, "vllm_version": "0.32.0"}]
        with open(rt.engine_info_path, "w") as f:
            json.dump(infos, f)
        assert rt.read_engine_infos() == infos
    finally:
        rt.cleanup()


def test_worker_config_carries_the_options():
    opts = SupervisorOptions(
        model="/models/x", model_arg="x", workers=2, host="127.0.0.1", port=8123,
        served_model_names=[], tokenizer="/tok", chat_template="{{ messages }}", max_model_len=2048,
        shutdown_timeout=7.0, engine_ready_timeout=99.0, log_level="debug", data_parallel_size=2,
    )
    sup = Supervisor(opts)
    sup.runtime = RuntimeDir()
    try:
        from vllm_pyfrontend.supervisor.workers import WorkerSlot

        slot = WorkerSlot(index=1, addresses=sup.runtime.client_addresses(2)[1])
        cfg = sup._worker_config(slot)
        assert isinstance(cfg, WorkerConfig)
        assert (cfg.worker_index, cfg.num_workers, cfg.host, cfg.port) == (1, 2, "127.0.0.1", 8123)
        assert cfg.model == "/models/x" and cfg.served_model_names == ["x"]
        assert cfg.input_address.endswith("/w1-in.sock") and cfg.output_address.endswith("/w1-out.sock")
        assert cfg.engine_indices == [0, 1]
        assert cfg.engine_infos is None  # first start: the engines send their ready responses
        assert (cfg.tokenizer, cfg.chat_template, cfg.max_model_len) == ("/tok", "{{ messages }}", 2048)
        assert (cfg.shutdown_timeout, cfg.engine_ready_timeout, cfg.log_level) == (7.0, 99.0, "debug")
        assert cfg.runtime_dir == sup.runtime.path and cfg.reuse_port
        assert WorkerConfig.from_json(cfg.to_json()) == cfg

        with open(sup.runtime.engine_info_path, "w") as f:
            json.dump([{"engine_index": 0, "max_model_len": 1, "vllm_version": "v"}], f)
        slot.starts = 1  # a restart gets the recorded ready responses
        assert sup._worker_config(slot).engine_infos == [
            {"engine_index": 0, "max_model_len": 1, "vllm_version": "v"}]
    finally:
        sup.runtime.cleanup()
