"""vLLM's own Python frontend served by the simulated engine.

`vllm serve MODEL --data-parallel-size-local 0 ...` (vLLM's frontend with no local engine)
waits for a remote headless engine on its handshake port; `python -m vllm_pyfrontend.supervisor.sim`
joins it there. If vLLM's frontend handshakes, decodes every output and serves correct
OpenAI responses, the simulated engine speaks the real protocol, and everything measured
against it (our frontend, benchmarks) is measured against the real wire format.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from tokenizers import Tokenizer

from tests.e2e.tiny_model import REPO_ROOT, build_tiny_model, free_port
from tests.stack import stop_process_group

MAX_MODEL_LEN = 4096
START_TIMEOUT_S = 240


def _spawn(argv: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    model = build_tiny_model()
    logs = tmp_path_factory.mktemp("vllm-frontend-on-sim")
    rpc_port, http_port = free_port(), free_port()
    frontend = _spawn(
        [
            sys.executable, "-c",
            "import sys; from vllm_pyfrontend.supervisor.vllm_headless import run_vllm_cli; run_vllm_cli(sys.argv[1:])",
            "serve", model,
            "--data-parallel-size-local", "0",
            "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(rpc_port),
            "--host", "127.0.0.1", "--port", str(http_port),
            "--max-model-len", str(MAX_MODEL_LEN),
            "--served-model-name", "tiny",
        ],
        logs / "frontend.log",
    )  # fmt: skip
    engine = _spawn(
        [
            sys.executable, "-m", "vllm_pyfrontend.supervisor.sim",
            "--handshake-address", f"tcp://127.0.0.1:{rpc_port}",
            "--engine-index", "0", "--model", model,
            "--max-model-len", str(MAX_MODEL_LEN), "--step-time", "0.005",
        ],
        logs / "sim.log",
    )  # fmt: skip
    base_url = f"http://127.0.0.1:{http_port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for name, proc in (("frontend", frontend), ("sim engine", engine)):
                if proc.poll() is not None:
                    pytest.fail(f"{name} exited ({proc.returncode}); logs in {logs}")
            try:
                if httpx.get(base_url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM frontend not ready in {START_TIMEOUT_S}s; logs in {logs}")
            time.sleep(0.5)
        yield {"base_url": base_url, "model": model, "engine": engine, "frontend": frontend}
    finally:
        frontend_code = stop_process_group(frontend, 30)
        engine_code = stop_process_group(engine, 15)
    assert frontend_code == 0, f"frontend exit {frontend_code}; logs in {logs}"
    assert engine_code == 0, f"sim engine exit {engine_code}; logs in {logs}"


@pytest.fixture(scope="module")
def client(served) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=served["base_url"] + "/v1", api_key="none", max_retries=0, timeout=60
    )


@pytest.fixture(scope="module")
def tokenizer(served) -> Tokenizer:
    return Tokenizer.from_file(os.path.join(served["model"], "tokenizer.json"))


def test_completion_runs_to_length(client, tokenizer):
    r = client.completions.create(model="tiny", prompt="Hello there", max_tokens=8, seed=3)
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 8
    assert r.usage.prompt_tokens == len(tokenizer.encode("Hello there", add_special_tokens=False).ids)
    assert len(choice.text.split()) >= 5 and choice.text.isascii()


def test_completion_scripted_text_stops_on_eos(client):
    text = "Scripted answer, exactly."
    r = client.completions.create(
        model="tiny", prompt="Hi", max_tokens=50, extra_body={"vllm_xargs": {"sim_text": text}}
    )
    assert r.choices[0].text == text
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].stop_reason is None  # EOS, not a stop token


def test_stop_token_id_reported_as_stop_reason(client, tokenizer):
    world = tokenizer.encode(" world", add_special_tokens=False).ids[0]
    r = client.completions.create(
        model="tiny", prompt="Hi", max_tokens=50,
        extra_body={"vllm_xargs": {"sim_text": "hello world and more"}, "stop_token_ids": [world]},
    )  # fmt: skip
    assert r.choices[0].text == "hello"  # vLLM drops the stop token's text
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].stop_reason == world


def test_streaming_chat(client, tokenizer):
    text = "Hi! How can I help you today?"
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=100,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"vllm_xargs": {"sim_text": text}},
    )
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert content == text
    assert finishes == ["stop"]
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == len(tokenizer.encode(text, add_special_tokens=False).ids) + 1
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_streaming_chat_to_length(client):
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "tell me more"}],
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(content.split()) >= 6
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "length"
    ]
    assert chunks[-1].usage.completion_tokens == 12


def test_logprobs_decoded_by_vllm(client):
    """The sim's `new_logprobs` (LogprobsLists, small arrays inline as ext 3) as vLLM's own
    frontend decodes them: the sampled token first, top-k alternatives per position."""
    r = client.completions.create(model="tiny", prompt="Hello there", max_tokens=5, logprobs=2, seed=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == 5
    assert all(v == -0.25 for v in lp.token_logprobs)
    assert all(1 <= len(top) <= 3 for top in lp.top_logprobs)
