"""`SubscribeKvEvents` over gRPC (frontend/api/grpc/kv_stream.py), directly and behind smg.

Two deployments of simulated engines that model a prefix cache and publish vLLM's KV events,
each serving vLLM's gRPC service:
- a gRPC client's subscription gets each batch under its rank's sequence number, with the
  stored blocks' tokens and 64-bit hashes, and a non-zero start is refused (OUT_OF_RANGE);
- smg in gRPC mode with the `cache_aware` policy subscribes to both (its event-driven KV index):
  its metrics show each deployment's batches applied and neither marked as serving no KV events
  (the mark an UNIMPLEMENTED answer sets).
"""

from __future__ import annotations

import json
import os
import re
import time

import grpc
import httpx
import pytest
from smg_grpc_proto import vllm_engine_pb2_grpc as pb_grpc
from smg_grpc_proto.generated import common_pb2

from tests.gateway.test_smg import Gateway
from tests.routing.test_prefix_routing_sim import _ports
from tests.stack import REPO, Stack, free_port
from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4

MODEL_NAME = "dsv4"


def _deployment(model: str) -> Stack:
    grpc_port = free_port()
    pub, _ = _ports()
    replay, _ = _ports()
    kv = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{pub}",
                     "replay_endpoint": f"tcp://*:{replay}"})
    stack = Stack(["--engine", "sim", "--workers", "2", "--sim-step-time", "0.01", "--max-model-len", "4096",
                   "--served-model-name", MODEL_NAME, "--shutdown-timeout", "2", "--grpc-port", str(grpc_port),
                   "--kv-events-config", kv, "--enable-prompt-tokens-details", model], ready_timeout=120)
    stack.grpc_port = grpc_port
    return stack


@pytest.fixture(scope="module")
def fleet():
    model_dir = materialize_deepseek_v4(os.path.join(REPO, ".cache", "demo-deepseek-v4"))
    a = _deployment(model_dir)
    try:
        b = _deployment(model_dir)
    except BaseException:
        a.stop()
        raise
    try:
        yield a, b, model_dir
    finally:
        a.stop()
        b.stop()


def _chat(base: str, content: str, max_tokens: int = 4) -> httpx.Response:
    return httpx.post(base + "/v1/chat/completions", timeout=60, json={
        "model": MODEL_NAME, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens})


def test_subscribe_kv_events_streams_the_engines_batches(fleet):
    a, _, _ = fleet
    with grpc.insecure_channel(f"127.0.0.1:{a.grpc_port}") as channel:
        stub = pb_grpc.VllmEngineStub(channel)
        refused = stub.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(start_sequence_number=5))
        with pytest.raises(grpc.RpcError) as e:
            next(refused)
        assert e.value.code() == grpc.StatusCode.OUT_OF_RANGE
        stream = stub.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(), timeout=30)
        # The subscription is live once its headers came; a prompt stored after that is seen.
        stream.initial_metadata()
        prompt = "Blocks for the subscriber to see, said at length. " * 12
        assert _chat(a.base_url, prompt).status_code == 200
        batch = next(stream)
        stream.cancel()
    assert batch.dp_rank == 0 and batch.sequence_number >= 0
    stored = [ev.stored for ev in batch.events if ev.WhichOneof("data") == "stored"]
    assert stored and all(len(b.token_ids) == 16 and b.block_size == 16 for b in stored[0].blocks)
    assert stored[0].tier == common_pb2.KV_CACHE_TIER_DEVICE


def _metric(text: str, name: str, worker: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") or worker not in line:
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_smg_cache_aware_receives_both_deployments_kv_events(fleet):
    """Each deployment caches a prompt the gateway never saw (sent to it directly): smg applies
    the KV event batches of both (with SubscribeKvEvents answered UNIMPLEMENTED it would apply
    none and mark both `smg_kv_events_unavailable`)."""
    a, b, model_dir = fleet
    prom = free_port()
    urls = [f"grpc://127.0.0.1:{a.grpc_port}", f"grpc://127.0.0.1:{b.grpc_port}"]
    gw = Gateway(urls, ["--model-path", model_dir, "--prometheus-port", str(prom)], policy="cache_aware")
    try:
        gw.wait_tokenizer(60)
        metrics = f"http://127.0.0.1:{prom}/metrics"
        before = httpx.get(metrics, timeout=10).text
        applied0 = [_metric(before, "smg_kv_event_batches_total", u.split("//")[1], disposition="applied")
                    for u in urls]
        prompts = {}
        for name, stack in (("a", a), ("b", b)):
            prompts[name] = f"Deployment {name} alone holds this long preamble, block after block. " * 12
            assert _chat(stack.base_url, prompts[name]).status_code == 200
        deadline = time.monotonic() + 30
        while True:
            text = httpx.get(metrics, timeout=10).text
            applied = [_metric(text, "smg_kv_event_batches_total", u.split("//")[1], disposition="applied")
                       for u in urls]
            if all(n > n0 for n, n0 in zip(applied, applied0)):
                break
            assert time.monotonic() < deadline, (applied, [x for x in text.splitlines() if "kv_event" in x])
            time.sleep(0.2)
        unavailable = [line for line in text.splitlines()
                       if line.startswith("smg_kv_events_unavailable{") and line.endswith(" 1")]
        assert not unavailable, unavailable
        subscribed = [_metric(text, "smg_kv_event_subscriptions_total", u.split("//")[1]) for u in urls]
        assert all(n >= 1 for n in subscribed), subscribed
        r = _chat(gw.base_url, prompts["a"] + " A question?")
        assert r.status_code == 200, r.text
    finally:
        gw.stop()
