"""schemathesis against `/openapi.json`: every operation the server describes, fuzzed from its own
description (valid and invalid bodies), must never answer 5xx and must keep to the error shape.

Examples per operation and generation mode: RELIABILITY_SCHEMA_EXAMPLES (default 40; 20 in CI
unless VLLM_PYFRONTEND_FULL=1, tests/sample_size.py).
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from schemathesis import GenerationMode
from hypothesis import HealthCheck, given, settings

from tests.reliability.helpers import request, restarts, sim_args, wait_all_serving, workers_of
from tests.sample_size import sample_size
from tests.stack import Stack

EXAMPLES = int(os.environ.get("RELIABILITY_SCHEMA_EXAMPLES", sample_size(40, 20)))


@pytest.fixture(scope="module")
def stack():
    s = Stack(sim_args(step=0.001, max_model_len=512), ready_timeout=120)
    wait_all_serving(s)
    s.workers_at_start = workers_of(s)
    yield s
    # The fuzzing left the deployment as it found it: same workers, nothing restarted.
    assert workers_of(s) == s.workers_at_start and restarts(s) == 0, s.logs()
    assert "unhandled error" not in s.logs(), s.logs()
    code = s.terminate()
    assert code == 0, s.logs()


@pytest.fixture(scope="module")
def api_schema(stack):
    return schemathesis.openapi.from_url(stack.base_url + "/openapi.json")


def error_shape(response, case) -> None:
    """A 4xx from a route is an OpenAI-style error (aiohttp's own parser errors aside), or
    Anthropic's on the /v1/messages routes."""
    if 400 <= response.status_code < 500 and case.method.upper() != "HEAD":
        if response.headers.get("content-type", [""])[0].startswith("application/json"):
            if case.operation.path.startswith("/v1/messages"):
                body = response.json()
                assert body["type"] == "error" and body["error"]["type"] and body["error"]["message"], body
                return
            err = response.json()["error"]
            assert err["message"] and err["code"] == response.status_code, err


def shorten(case) -> None:
    """Keep generations short where the fuzzer picked a valid length (CI time, not coverage:
    long valid requests are the soak's business)."""
    if case.operation.path in ("/v1/chat/completions", "/v1/completions", "/v1/messages") \
            and isinstance(case.body, dict):
        mt = case.body.get("max_tokens")
        if isinstance(mt, int) and mt > 16:
            case.body["max_tokens"] = 16
        case.body.pop("max_completion_tokens", None)
    if case.operation.path == "/v1/responses" and isinstance(case.body, dict):
        mt = case.body.get("max_output_tokens")
        if isinstance(mt, int) and mt > 16:
            case.body["max_output_tokens"] = 16


# schemathesis' pytest plugin (`from_fixture`) does not work with this pytest; the operations
# are driven with hypothesis directly, which is all the plugin does.
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_from_its_own_description(api_schema, stack, mode):
    operations = [r.ok() for r in api_schema.get_all_operations()]
    assert len(operations) >= 8
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and operation.method.upper() == "GET":
            continue  # no parameters to get wrong (the route fuzzing covers bad methods/paths)
        seen: list[int] = []

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case) -> None:
            shorten(case)
            response = case.call(base_url=stack.base_url, timeout=60)
            seen.append(response.status_code)
            assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
            error_shape(response, case)

        check()
        assert seen and max(seen) < 500, (operation.path, seen)


def test_openapi_document(stack):
    doc = request(stack, "/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    assert set(doc["paths"]) >= {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize",
                                 "/v1/models", "/health", "/version", "/load"}
    chat = doc["components"]["schemas"]["ChatCompletionRequest"]
    assert "messages" in chat["required"] and "max_tokens" in chat["properties"]
