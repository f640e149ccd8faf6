"""Fixtures shared across test packages."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_pair():
    """This frontend (2 workers) and vLLM's own Python server, each with its own real EngineCore
    on CPU serving the tiny chat model as `tiny`: started once per session, for every
    differential test that needs no other engine flags."""
    from tests.e2e.vllm_pair import start_pair

    with start_pair() as pair:
        yield pair
    # A graceful stop (SIGTERM, drain) with a real engine ends with exit code 0.
    assert pair.exit_code == 0, pair.stack.logs()


@pytest.fixture
def addresses(tmp_path):
    """ipc:// input and output addresses for an engine client and a fake engine."""
    return f"ipc://{tmp_path}/in", f"ipc://{tmp_path}/out"


@pytest.fixture
def zctx():
    """A ZMQ context for a fake engine's sockets, closed after the test."""
    import zmq

    ctx = zmq.Context()
    yield ctx
    ctx.term()
