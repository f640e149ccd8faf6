"""`--otlp-traces-endpoint`: one span per request, vLLM's name and attributes, exported over
OTLP/gRPC to a receiver started here, a child of the client's `traceparent`."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import urllib.request
from concurrent import futures

import pytest

from tests.reliability.helpers import SERVED, chat_body, sim_args, wait_for
from tests.inprocess import InProcessStack
from tests.ops.otlp_receiver import otlp_receiver

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN}-01"


@pytest.fixture
def receiver():
    with otlp_receiver() as r:
        yield r


def _attrs(span) -> dict:
    out = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value"))
    return out


def test_one_span_per_request_parented_to_traceparent(receiver):
    endpoint, servicer = receiver
    with InProcessStack(sim_args("--otlp-traces-endpoint", endpoint, workers=1),
                        env={"OTEL_BSP_SCHEDULE_DELAY": "100"}) as stack:
        req = urllib.request.Request(
            stack.base_url + "/v1/chat/completions",
            data=chat_body(max_tokens=5, temperature=0.5, top_p=0.9, n=2),
            headers={"Content-Type": "application/json", "traceparent": TRACEPARENT})
        with urllib.request.urlopen(req, timeout=30) as r:
            body = json.loads(r.read())
        span = servicer.spans.get(timeout=20)
        assert span.name == "llm_request"
        assert span.kind == span.SPAN_KIND_SERVER
        assert span.trace_id.hex() == TRACE_ID
        assert span.parent_span_id.hex() == PARENT_SPAN
        attrs = _attrs(span)
        assert attrs["gen_ai.request.id"] == body["id"]
        assert attrs["gen_ai.response.model"] == SERVED
        assert attrs["gen_ai.usage.prompt_tokens"] == body["usage"]["prompt_tokens"]
        assert attrs["gen_ai.usage.completion_tokens"] == body["usage"]["completion_tokens"] == 10
        assert attrs["gen_ai.request.n"] == 2
        assert attrs["gen_ai.request.max_tokens"] == 5
        assert attrs["gen_ai.request.temperature"] == pytest.approx(0.5)
        assert attrs["gen_ai.request.top_p"] == pytest.approx(0.9)
        assert 0 < attrs["gen_ai.latency.time_to_first_token"] <= attrs["gen_ai.latency.e2e"] < 30
        assert 0 <= attrs["gen_ai.latency.time_in_queue"] < attrs["gen_ai.latency.e2e"]
        assert span.end_time_unix_nano > span.start_time_unix_nano
        # A request without traceparent starts its own trace.
        urllib.request.urlopen(urllib.request.Request(
            stack.base_url + "/v1/completions",
            data=json.dumps({"model": SERVED, "prompt": "hi", "max_tokens": 2}).encode(),
            headers={"Content-Type": "application/json"}), timeout=30).read()
        span = servicer.spans.get(timeout=20)
        assert span.name == "llm_request" and not span.parent_span_id
        assert span.trace_id.hex() != TRACE_ID


def test_no_opentelemetry_import_without_the_flag():
    """The worker modules never import OpenTelemetry unless the flag asks for it."""
    code = ("import sys; import vllm_pyfrontend.server.worker, vllm_pyfrontend.server.app; "
            "print(any(m.startswith('opentelemetry') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_detailed_traces_need_an_endpoint():
    from vllm_pyfrontend.supervisor.cli import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--engine", "sim", "--collect-detailed-traces", "all", "demo:deepseek-v4"])
    opts = parse_args(["--engine", "sim", "--otlp-traces-endpoint", "http://h:4317",
                       "--collect-detailed-traces", "model", "demo:deepseek-v4"])
    assert opts.policy.otlp_traces_endpoint == "http://h:4317"
    # The engine traces its own side too (vLLM's ObservabilityConfig).
    assert opts.engine_args[-4:] == ["--otlp-traces-endpoint", "http://h:4317", "--collect-detailed-traces", "model"]
