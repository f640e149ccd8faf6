"""configs/: the YAML --config file (same options as the equivalent flags; the command line
wins), the Kubernetes manifests, the Prometheus scrape config and the Grafana dashboard."""

from __future__ import annotations

import json
import dataclasses
import os
import re
import shutil
import subprocess

import pytest
import yaml

from vllm_pyfrontend.config import WorkerConfig
from vllm_pyfrontend.metrics import MULTIPROC_ENV, WorkerMetrics
from vllm_pyfrontend.supervisor.cli import parse_args

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(REPO, "configs")


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)


def write(tmp_path, text: str) -> str:
    path = tmp_path / "frontend.yaml"
    path.write_text(text)
    return str(path)


def test_yaml_config_equals_the_equivalent_flags(tmp_path):
    path = write(tmp_path, """
model: /models/m
workers: 4
port: 9000
max-model-len: 16k
max_num_seqs: 64                  # underscores work too
served-model-name: [a, b]
engine: sim
sim-step-time: 0.01
api-key: [k1, k2]
allowed-origins: ["https://x.example"]
allow-credentials: true
enable-request-id-headers: true
trust-request-chat-template: false
metrics-require-api-key: true
max-log-len: 100
gpu-memory-utilization: 0.9       # an engine flag: forwarded
enforce-eager: true               # an engine switch
hf-overrides: {rope_scaling: {factor: 2}}
data-parallel-size: 2
""")
    flags = ["--workers", "4", "--port", "9000", "--max-model-len", "16k", "--max-num-seqs", "64",
             "--served-model-name", "a", "b", "--engine", "sim", "--sim-step-time", "0.01",
             "--api-key", "k1", "k2", "--allowed-origins", "https://x.example", "--allow-credentials",
             "--enable-request-id-headers", "--no-trust-request-chat-template", "--metrics-require-api-key",
             "--max-log-len", "100", "--gpu-memory-utilization", "0.9", "--enforce-eager",
             "--hf-overrides", json.dumps({"rope_scaling": {"factor": 2}}), "--data-parallel-size", "2",
             "/models/m"]
    from_file = parse_args(["--config", path])
    from_flags = parse_args(flags)
    assert from_file == from_flags
    assert from_file.workers == 4 and from_file.max_model_len == 16000
    assert from_file.served_model_names == ["a", "b"] and from_file.model == "/models/m"
    assert from_file.api_keys == ["k1", "k2"]
    assert "--gpu-memory-utilization" in from_file.engine_args and "--enforce-eager" in from_file.engine_args
    assert "--max-model-len" in from_file.engine_args  # read by us and given to the engine
    assert parse_args([f"--config={path}"]) == from_file


def test_command_line_wins(tmp_path):
    path = write(tmp_path, "model: /models/file\nworkers: 4\nserved-model-name: [a, b]\n"
                           "gpu-memory-utilization: 0.9\nenable-log-requests: true\n")
    opts = parse_args(["--workers", "2", "--config", path, "--served-model-name", "c",
                       "--gpu-memory-utilization", "0.5", "--no-enable-log-requests", "/models/cli"])
    assert opts.workers == 2
    assert opts.model == "/models/cli"
    assert opts.served_model_names == ["c"]
    assert opts.policy.enable_log_requests is False
    args = opts.engine_args
    # Both reach the engine; vLLM's parser keeps the last (the command line's).
    assert args.index("0.5") > args.index("0.9")
    # The file's model when the command line has none, even after a multi-value flag.
    opts = parse_args(["--config", path, "--served-model-name", "x", "y"])
    assert opts.model == "/models/file" and opts.served_model_names == ["x", "y"]
    opts = parse_args(["--config", path, "/models/cli", "--served-model-name", "x", "y"])
    assert opts.model == "/models/cli" and opts.served_model_names == ["x", "y"]


def test_config_file_errors(tmp_path):
    for text in ("- just\n- a list\n", "workers: [unclosed\n", "config: other.yaml\n"):
        with pytest.raises(SystemExit):
            parse_args(["--config", write(tmp_path, text)])
    with pytest.raises(SystemExit):
        parse_args(["--config", str(tmp_path / "missing.yaml")])
    with pytest.raises(SystemExit):
        parse_args(["/models/m", "--config"])


def test_api_key_sources_and_secrecy(tmp_path, monkeypatch):
    assert parse_args(["/m"]).api_keys == []
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    assert parse_args(["/m"]).api_keys == ["from-env"]
    opts = parse_args(["--api-key", "a", "b", "/m"])  # the flag wins over the environment
    assert opts.api_keys == ["a", "b"]
    assert "a" not in [v for v in repr(opts).split("'")]  # not in the options' repr
    config = WorkerConfig(worker_index=0, num_workers=1, host="", port=0, model="m", served_model_names=["m"],
                          input_address="", output_address="", api_keys=["s3cret"])
    assert "s3cret" not in config.to_json()  # workers get keys through the environment


def test_one_policy_for_the_cli_the_dropin_and_the_workers(tmp_path):
    """WorkerPolicy is declared once: every field is a CLI flag of the same name, the CLI and the
    drop-in (vLLM's jsonified args, same names) build equal policies, and it survives the JSON
    hop to the workers."""
    from vllm_pyfrontend.config import WorkerPolicy
    from vllm_pyfrontend.supervisor.cli import build_parser
    from vllm_pyfrontend.supervisor.dropin import serve_settings

    dests = {a.dest for a in build_parser()._actions}
    derived = {"profiler_enabled"}  # read off the engine's --profiler-config, not a flag of its own
    assert set(WorkerPolicy.__dataclass_fields__) - derived <= dests
    assert parse_args(["/m"]).policy == WorkerPolicy()
    opts = parse_args(["--metrics-require-api-key", "--allowed-origins", "https://a", "--allow-credentials",
                       "--allowed-methods", "GET", "POST", "--enable-log-requests", "--max-log-len", "7",
                       "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3",
                       "/m"])
    vllm_args = {"model_tag": str(tmp_path), "metrics_require_api_key": True, "allowed_origins": ["https://a"],
                 "allow_credentials": True, "allowed_methods": ["GET", "POST"], "enable_log_requests": True,
                 "max_log_len": 7, "enable_auto_tool_choice": True, "tool_call_parser": "hermes",
                 "reasoning_parser": "qwen3", "allowed_headers": None}
    # (one difference by design: under vLLM's launcher an engine's death ends everything, so the
    # drop-in does not move requests to a live engine)
    assert serve_settings(vllm_args, environ={}).policy == dataclasses.replace(opts.policy, migration_limit=0)
    assert opts.policy.allowed_headers == ["*"] and opts.policy.max_log_len == 7
    config = WorkerConfig(worker_index=0, num_workers=1, host="", port=0, model="m", served_model_names=["m"],
                          input_address="", output_address="", policy=opts.policy)
    again = WorkerConfig.from_json(config.to_json())
    assert again == config and isinstance(again.policy, WorkerPolicy)


def test_shipped_frontend_yaml_parses():
    opts = parse_args(["--config", os.path.join(CONFIGS, "frontend.yaml")])
    assert opts.workers == 16 and opts.max_model_len == 16384 and opts.model == "/models/Qwen3-8B"
    assert opts.policy.enable_request_id_headers and not opts.policy.trust_request_chat_template
    assert "--gpu-memory-utilization" in opts.engine_args


def _k8s_docs() -> dict[str, dict]:
    docs = {}
    folder = os.path.join(CONFIGS, "kubernetes")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".yaml"):
            with open(os.path.join(folder, name)) as f:
                for doc in yaml.safe_load_all(f):
                    if doc:
                        docs[doc["kind"]] = doc
    return docs


def test_kubernetes_manifests_parse_and_fit_together(tmp_path):
    docs = _k8s_docs()
    assert {"Deployment", "Service", "PodMonitor", "ServiceMonitor", "ConfigMap", "Kustomization"} <= set(docs)
    kustomization = docs["Kustomization"]
    for res in kustomization["resources"]:
        assert os.path.isfile(os.path.join(CONFIGS, "kubernetes", res))
    dep = docs["Deployment"]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (container,) = pod["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    port_names = {p["name"] for p in container["ports"]}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] in port_names
    assert docs["Service"]["spec"]["selector"].items() <= labels.items()
    assert docs["PodMonitor"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert docs["PodMonitor"]["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics"
    # The container reads the ConfigMap's file through --config, and that file is valid.
    args = container["args"]
    config_path = args[args.index("--config") + 1]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    mount = os.path.dirname(config_path)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mounts[mount])
    configmap = docs["ConfigMap"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    file_text = configmap["data"][os.path.basename(config_path)]
    opts = parse_args(["--config", write(tmp_path, file_text)])
    # The drain window fits in the pod's grace period.
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pre_stop + opts.shutdown_timeout < pod["spec"]["terminationGracePeriodSeconds"]


def test_prometheus_config_parses():
    with open(os.path.join(CONFIGS, "prometheus.yml")) as f:
        config = yaml.safe_load(f)
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "vllm-pyfrontend"]
    assert job["metrics_path"] == "/metrics"
    if shutil.which("promtool"):
        r = subprocess.run(["promtool", "check", "config", os.path.join(CONFIGS, "prometheus.yml")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr


def test_grafana_dashboard_uses_only_metrics_we_export():
    with open(os.path.join(CONFIGS, "grafana", "dashboard.json")) as f:
        dashboard = json.load(f)
    m = WorkerMetrics("m", [0], 1024)
    r = m.start_request(arrival=0.0)
    r.on_output(0.1)
    r.on_output(0.2)
    r.on_finished("stop", 3, 2, max_tokens=5, queue_time_s=0.01, now=1.0)
    m.observe_http("GET", "/v1/models", 200, 0.01)
    exported = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)", m.render().decode(), re.M))
    used = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used |= set(re.findall(r"\b(vllm:[a-z0-9_]+|vllm_frontend_[a-z_]+|http_[a-z_]+)", target["expr"]))
    assert used and used <= exported, used - exported
    families = {re.sub(r"_(bucket|sum|count|total)$", "", n) for n in used}
    for needed in ("vllm:request_success", "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                   "vllm:e2e_request_latency_seconds", "vllm:num_requests_running", "vllm:num_requests_waiting",
                   "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits", "http_requests",
                   "vllm_frontend_workers_draining"):
        assert needed in families, needed
