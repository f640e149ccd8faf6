"""configs/kubernetes/smg: the manifests parse and fit together, the frontends' arguments are
ones frontend-supervisor accepts, and every flag given to smg is one smg 1.13 has."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import yaml

from vllm_pyfrontend.supervisor.cli import parse_args

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDER = os.path.join(REPO, "configs", "kubernetes", "smg")


def _docs() -> dict[tuple[str, str], dict]:
    docs = {}
    for name in sorted(os.listdir(FOLDER)):
        with open(os.path.join(FOLDER, name)) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    docs[(doc["kind"], (doc.get("metadata") or {}).get("name", ""))] = doc
    return docs


def _container(doc: dict) -> dict:
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    return container


def test_manifests_fit_together():
    docs = _docs()
    (kust,) = [d for (kind, _), d in docs.items() if kind == "Kustomization"]
    for res in kust["resources"]:
        assert os.path.isfile(os.path.join(FOLDER, res)), res
    frontend = docs[("StatefulSet", "vllm-frontend")]
    engines = docs[("StatefulSet", "vllm-engine")]
    smg = docs[("Deployment", "smg")]
    for workload in (frontend, engines, smg):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    svc = docs[("Service", "vllm-frontend")]
    assert svc["spec"]["clusterIP"] == "None" and frontend["spec"]["serviceName"] == "vllm-frontend"
    assert svc["spec"]["selector"].items() <= frontend["spec"]["template"]["metadata"]["labels"].items()
    assert docs[("Service", "smg")]["spec"]["selector"].items() <= smg["spec"]["template"]["metadata"]["labels"].items()

    # The frontends: probes on named ports, and arguments frontend-supervisor accepts.
    c = _container(frontend)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready" and c["livenessProbe"]["httpGet"]["path"] == "/health"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["port"] in ports
    args = [a.replace("$(POD_IP)", "10.1.2.3") for a in c["args"]]
    opts = parse_args(args)
    assert opts.grpc_port == ports["grpc"] and opts.port == ports["http"]
    assert opts.local_engine_count == 0 and opts.data_parallel_rpc_port == ports["dp-rpc"]
    dp = opts.data_parallel_size
    assert int(c["lifecycle"]["preStop"]["exec"]["command"][1]) + opts.shutdown_timeout \
        < frontend["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]

    # The engines: N x DP of them, each joining its group's frontend as rank k % DP.
    n = frontend["spec"]["replicas"]
    assert engines["spec"]["replicas"] == n * dp
    script = _container(engines)["args"][0]
    assert f"DP={dp};" in script and "--headless" in script
    assert "vllm-frontend-$((POD_INDEX / DP)).vllm-frontend" in script
    assert f"--data-parallel-rpc-port {ports['dp-rpc']}" in script

    # smg: one gRPC worker URL per frontend replica, on the frontends' gRPC port.
    sargs = _container(smg)["args"]
    urls = sargs[sargs.index("--worker-urls") + 1: sargs.index("--worker-urls") + 1 + n]
    assert urls == [f"grpc://vllm-frontend-{i}.vllm-frontend:{ports['grpc']}" for i in range(n)]
    sports = {p["name"]: p["containerPort"] for p in _container(smg)["ports"]}
    assert int(sargs[sargs.index("--port") + 1]) == sports["http"]
    assert int(sargs[sargs.index("--prometheus-port") + 1]) == sports["metrics"]

    # Prometheus scrapes smg and every frontend pod.
    assert docs[("PodMonitor", "smg")]["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    fm = docs[("PodMonitor", "vllm-frontend")]["spec"]
    assert fm["podMetricsEndpoints"][0]["port"] == "http" and fm["podMetricsEndpoints"][0]["path"] == "/metrics"


def test_smg_flags_exist_in_smg():
    smg = os.path.join(os.path.dirname(sys.executable), "smg")
    help_text = subprocess.run([smg, "launch", "--help"], capture_output=True, text=True, timeout=60).stdout
    flags = [a for a in _container(_docs()[("Deployment", "smg")])["args"] if a.startswith("--")]
    assert flags
    for flag in flags:
        assert re.search(rf"\[{re.escape(flag)}[ \]]", help_text), flag
