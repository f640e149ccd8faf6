"""The `frontend` subcommand's command line, as vLLM's RustFrontendProcessManager writes it."""

from __future__ import annotations

import json

import pytest

from vllm_pyfrontend.supervisor.dropin import DropinSupervisor, main, parse_frontend_args, serve_settings
from tests.e2e.tiny_model import build_tiny_model

# As logged by `vllm serve` 0.32 ("Launching Rust frontend: ..."), trimmed.
ARGS_JSON = {
    "engine_ready_timeout_secs": 600, "host": "127.0.0.1", "http_timeout_keep_alive": 5,
    "max_model_len": 4096, "model_tag": "MODEL", "model": "MODEL", "port": 18777,
    "served_model_name": ["tiny"], "profiler_config": {"profiler": None},
}  # fmt: skip


def argv(args_json: dict, *extra: str) -> list[str]:
    return ["--listen-fd", "3", "--input-listener-fd", "4", "--output-listener-fd", "5",
            "--engine-start-index", "2", "--engine-count", "2", "--data-parallel-size", "4",
            "--coordinator-address", "tcp://127.0.0.1:1", *extra,
            "--args-json", json.dumps(args_json)]  # fmt: skip


def test_vllm_flags_parsed_and_workers_from_flag_env_or_cores():
    a = parse_frontend_args(argv(ARGS_JSON), environ={"VLLM_PYFRONTEND_WORKERS": "3"})
    assert (a.listen_fd, a.input_fd, a.output_fd) == (3, 4, 5)
    assert a.engine_indices == [2, 3] and a.data_parallel_size == 4
    assert a.coordinator_address == "tcp://127.0.0.1:1"
    assert a.workers == 3 and a.serve_args["port"] == 18777
    assert parse_frontend_args(argv(ARGS_JSON, "--workers", "5"),
                               environ={"VLLM_PYFRONTEND_WORKERS": "3"}).workers == 5
    assert parse_frontend_args(argv(ARGS_JSON), environ={}).workers >= 1


def test_unknown_flags_from_a_newer_vllm_are_tolerated():
    a = parse_frontend_args(argv(ARGS_JSON, "--some-new-flag", "x"), environ={})
    assert a.engine_count == 2


def test_serve_args_map_onto_worker_settings():
    model = build_tiny_model()
    s = serve_settings({**ARGS_JSON, "model_tag": model, "model": model, "shutdown_timeout": 7,
                        "chat_template": "/t.jinja", "generation_config": "vllm"})
    assert s.model == model and s.served_model_names == ["tiny"]
    assert (s.host, s.port, s.max_model_len) == ("127.0.0.1", 18777, 4096)
    assert s.chat_template == "/t.jinja" and s.generation_config == "vllm"
    assert s.shutdown_timeout == 7 and s.engine_ready_timeout == 600
    plain = serve_settings({"model_tag": model})
    assert plain.served_model_names == [model] and plain.max_model_len is None


def test_vllm_security_flags_carry_over():
    model = build_tiny_model()
    s = serve_settings({"model_tag": model, "api_key": ["k1", "k2"], "allowed_origins": ["http://a"],
                        "allow_credentials": True, "enable_request_id_headers": True,
                        "trust_request_chat_template": True, "max_log_len": 10,
                        "metrics_require_api_key": True},
                       environ={"VLLM_API_KEY": "env-key"})
    p = s.policy
    assert s.api_keys == ["k1", "k2"] and p.allowed_origins == ["http://a"]
    assert p.allow_credentials and p.enable_request_id_headers and p.trust_request_chat_template
    assert p.max_log_len == 10 and p.allowed_methods == ["*"]
    assert p.metrics_require_api_key  # the drop-in used to drop this one
    assert "k1" not in repr(s)
    assert serve_settings({"model_tag": model}, environ={"VLLM_API_KEY": "env-key"}).api_keys == ["env-key"]
    assert serve_settings({"model_tag": model}, environ={}).api_keys == []


def test_tokenizer_backend_from_the_environment():
    """The drop-in path has no --tokenizer-backend (vLLM's parser would refuse it): the
    environment variable picks the library; unset, auto; a wrong value stops the start."""
    model = build_tiny_model()
    env = {"VLLM_PYFRONTEND_TOKENIZER_BACKEND": "tokenizers"}
    assert serve_settings({"model_tag": model}, environ=env).policy.tokenizer_backend == "tokenizers"
    assert serve_settings({"model_tag": model}, environ={}).policy.tokenizer_backend == "auto"
    with pytest.raises(ValueError, match="not one of auto, fastokens, tokenizers"):
        serve_settings({"model_tag": model}, environ={"VLLM_PYFRONTEND_TOKENIZER_BACKEND": "hf"})


def test_vllm_network_flags_carry_over(tmp_path):
    model = build_tiny_model()
    cert = tmp_path / "c.pem"
    cert.write_text("not a certificate")
    s = serve_settings({"model_tag": model, "http_timeout_keep_alive": 7, "sse_keep_alive_interval": 15,
                        "ssl_cert_reqs": 0, "uds": "/tmp/x.sock"})
    p = s.policy
    assert (p.http_timeout_keep_alive, p.sse_keep_alive_interval) == (7.0, 15.0)
    assert p.http_header_timeout == 60 and p.ssl_certfile is None
    assert serve_settings({"model_tag": model}).policy.http_timeout_keep_alive == 5
    # TLS files are checked before anything starts, naming the flag.
    with pytest.raises(ValueError, match="--ssl-keyfile /nonexistent: not a readable file"):
        serve_settings({"model_tag": model, "ssl_keyfile": "/nonexistent", "ssl_certfile": str(cert)})
    with pytest.raises(ValueError, match="cannot load the TLS settings"):
        serve_settings({"model_tag": model, "ssl_keyfile": str(cert), "ssl_certfile": str(cert)})


def test_model_must_be_local_or_cached():
    with pytest.raises(ValueError, match="neither a local directory"):
        serve_settings({"model_tag": "/nonexistent/model"})


def test_drain_fits_in_vllms_kill_window():
    model = build_tiny_model()
    args = parse_frontend_args(argv(ARGS_JSON), environ={})
    for timeout, expected in ((0, 0), (5, 1.0), (30, 26.0)):
        sup = DropinSupervisor(args, serve_settings({"model_tag": model, "shutdown_timeout": timeout}))
        assert sup.drain_timeout == expected


def test_usage_without_frontend_subcommand(capsys):
    assert main([]) == 2
    assert "VLLM_RUST_FRONTEND_PATH" in capsys.readouterr().err


def test_admission_and_tracing_flags_carry_over():
    """vLLM's serve args of the same names: the drop-in's workers enforce and trace the same."""
    model = build_tiny_model()
    p = serve_settings({"model_tag": model, "max_num_queued_reqs": 64, "max_num_queued_tokens": 8192,
                        "otlp_traces_endpoint": "http://collector:4317",
                        "collect_detailed_traces": ["model"]}).policy
    assert (p.max_num_queued_reqs, p.max_num_queued_tokens) == (64, 8192)
    assert p.otlp_traces_endpoint == "http://collector:4317" and p.collect_detailed_traces == ["model"]
    plain = serve_settings({"model_tag": model}).policy
    assert plain.max_num_queued_reqs is None and plain.otlp_traces_endpoint is None


def test_multimodal_serve_args_reach_the_workers_processor(tmp_path):
    """vLLM's multimodal serve flags (as its --args-json carries them) reach each worker's
    WorkerConfig.engine_args, and from there the processor's vLLM model config: limits, processor
    and media kwargs, media sources, processor cache. No engine: the processor is built alone."""
    import types

    from tests.multimodal.test_processors_vs_vllm import build_qwen2_audio
    from vllm_pyfrontend.multimodal.model import MultimodalModel

    model = tmp_path / "qwen2-audio"
    model.mkdir()
    build_qwen2_audio(model)
    media = tmp_path / "media"
    media.mkdir()
    serve = {**ARGS_JSON, "model_tag": str(model), "model": str(model),
             "limit_mm_per_prompt": {"audio": 3}, "mm_processor_kwargs": {"sampling_rate": 16000},
             "media_io_kwargs": {"audio": {"foo": 1}}, "allowed_local_media_path": str(media),
             "allowed_media_domains": ["example.com", "media.example.org"], "mm_processor_cache_gb": 2.5,
             "mm_processor_cache_type": "lru", "enable_mm_embeds": True, "trust_remote_code": False}
    s = serve_settings(serve)
    sup = DropinSupervisor(parse_frontend_args(argv(serve), environ={}), s)
    sup._runtime = types.SimpleNamespace(path=str(tmp_path), read_engine_infos=lambda: None)
    slot = types.SimpleNamespace(index=0, starts=0, addresses=types.SimpleNamespace(input="ipc://i", output="ipc://o"))
    config = sup._worker_config(slot)
    assert config.engine_args == s.engine_args and "--limit-mm-per-prompt" in config.engine_args

    mm = MultimodalModel(config.model, config.engine_args, num_workers=1, num_engines=1).load()
    mc = mm.model_config
    mmc = mc.get_multimodal_config()
    assert mmc.limit_per_prompt["audio"].count == 3
    assert mmc.mm_processor_kwargs == {"sampling_rate": 16000}
    assert mmc.media_io_kwargs == {"audio": {"foo": 1}}
    assert (mmc.mm_processor_cache_gb, mmc.mm_processor_cache_type) == (2.5, "lru")
    assert mmc.enable_mm_embeds
    assert mc.allowed_local_media_path == str(media)
    assert mc.allowed_media_domains == ["example.com", "media.example.org"]
    assert mc.max_model_len == 4096
    mm.validate_count("audio", 3)
    with pytest.raises(ValueError, match="At most 3 audio"):
        mm.validate_count("audio", 4)
    # Without them: vLLM's defaults (the drop-in used to give the processor nothing).
    plain = serve_settings({"model_tag": str(model)})
    assert plain.engine_args == []
