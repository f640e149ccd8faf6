"""Delivery, the one way an engine output reaches its sink, driven with encoded engine messages
(the simulated engine's wire format) on a client that is not started (nothing is sent)."""

from __future__ import annotations

import pytest

from vllm_pyfrontend.engine.client import EngineClient
from vllm_pyfrontend.engine.delivery import OutputClock
from vllm_pyfrontend.engine.types import EngineOutput, FailureKind
from vllm_pyfrontend.engine.wire import decode_message, layout_for_version
from vllm_pyfrontend.supervisor.sim import wire as sim_wire

VERSION = "0.32.0"
LAYOUT = layout_for_version(VERSION)
SIM_LAYOUT = sim_wire.Layout(VERSION)


def _message(*items: tuple) -> tuple[list, list]:
    """(raw outputs, frames) of one engine message; each item (rid, ids[, finish_reason])."""
    frames = [sim_wire.pack_outputs(0, [sim_wire.output_item(SIM_LAYOUT, *item) for item in items], 1.0)]
    _, raw = decode_message(frames, LAYOUT)
    return raw, frames


class OutputsOnly:
    """A sink without the optional `on_tokens`; it reads `clock` (its client's) as it is fed."""

    def __init__(self, clock: OutputClock, fail_on: str | None = None):
        self.clock = clock
        self.seen: list[tuple] = []
        self.failures = []
        self.fail_on = fail_on

    def on_output(self, o: EngineOutput) -> None:
        c = self.clock
        self.seen.append(("output", list(o.new_token_ids), o.finish_reason, c.steps, c.now, c.last))
        if self.fail_on == "output":
            raise RuntimeError("sink bug")

    def on_failure(self, failure) -> None:
        self.failures.append(failure)


class WithTokens(OutputsOnly):
    def on_tokens(self, ids: list[int]) -> None:
        c = self.clock
        self.seen.append(("tokens", list(ids), None, c.steps, c.now, c.last))
        if self.fail_on == "tokens":
            raise RuntimeError("sink bug")


class Observer:
    """An engine client's observer that records what it hears."""

    def __init__(self):
        self.iterations: list[tuple[int, int]] = []

    def record_scheduler_stats(self, engine, stats, engine_time=None) -> None: ...

    def observe_iteration(self, engine: int, tokens: int) -> None:
        self.iterations.append((engine, tokens))

    def count_migration(self, reason: str) -> None: ...

    def count_migration_failure(self, reason: str) -> None: ...


def _client(observer: Observer | None = None) -> EngineClient:
    return EngineClient(client_index=0, input_address="inproc://in", output_address="inproc://out",
                        engine_indices=[0], observer=observer)


@pytest.fixture
def client():
    return _client()


def _at(client: EngineClient, now: float) -> None:
    client.clock.now = client.clock.last = now
    client.clock.steps = 1


def test_plain_steps_go_to_on_tokens_and_the_rest_to_on_output(client):
    a, b = WithTokens(client.clock), OutputsOnly(client.clock)
    client._inflight.track("a", a, 0)
    client._inflight.track("b", b, 0)
    _at(client, 1.0)
    raw, frames = _message(("a", [5]), ("b", [6]), ("a", [7], sim_wire.FINISH_LENGTH))
    assert raw[0][1] == [5]
    client._delivery.deliver(raw, frames, LAYOUT, 0, None)
    assert a.seen == [("tokens", [5], None, 1, 1.0, 1.0), ("output", [7], 1, 1, 1.0, 1.0)]
    assert b.seen == [("output", [6], None, 1, 1.0, 1.0)]  # on_tokens is optional
    assert client.num_in_flight == 1 and client.in_flight_by_engine() == {0: 1}  # a finished


def test_gathered_steps_come_back_through_the_same_path_with_their_clock(client):
    """During a backlog the plain steps are gathered per stream; a stream's finish brings its
    gathered steps out first; the rest come at the drain's end, in the order they were
    gathered, each with its own number of steps and arrival times on the client's clock."""
    a, b, c = WithTokens(client.clock), WithTokens(client.clock), OutputsOnly(client.clock)
    for rid, sink in (("a", a), ("b", b), ("c", c)):
        client._inflight.track(rid, sink, 0)
    gathering: dict[str, list] = {}
    _at(client, 1.0)
    client._delivery.deliver(*_message(("a", [1]), ("b", [2]), ("c", [3])), LAYOUT, 0, gathering)
    _at(client, 2.0)
    client._delivery.deliver(*_message(("a", [4]), ("b", [5])), LAYOUT, 0, gathering)
    assert a.seen == b.seen == c.seen == []
    _at(client, 3.0)
    client._delivery.deliver(*_message(("b", [6], sim_wire.FINISH_STOP)), LAYOUT, 0, gathering)
    assert b.seen == [("tokens", [2, 5], None, 2, 1.0, 2.0), ("output", [6], 0, 1, 3.0, 3.0)]
    assert list(gathering) == ["a", "c"]
    client._delivery.deliver_gathered(gathering, LAYOUT)
    assert a.seen == [("tokens", [1, 4], None, 2, 1.0, 2.0)]
    assert c.seen == [("output", [3], None, 1, 1.0, 1.0)]
    assert (client.clock.now, client.clock.last, client.clock.steps) == (3.0, 3.0, 1)  # put back


def test_a_stream_ended_before_its_gathered_steps_gets_nothing_more(client):
    a = WithTokens(client.clock)
    client._inflight.track("a", a, 0)
    gathering: dict[str, list] = {}
    client._delivery.deliver(*_message(("a", [1])), LAYOUT, 0, gathering)
    client.abort(["a"])
    client._delivery.deliver_gathered(gathering, LAYOUT)
    assert a.seen == [] and client._aborts.pending == {0: ["a"]}  # the abort only


@pytest.mark.parametrize("sink_type, fail_on", [(WithTokens, "tokens"), (OutputsOnly, "output")])
def test_a_sink_that_raises_fails_its_request(client, sink_type, fail_on):
    """Aborted here and at the engine, ended with an internal error; its later outputs are
    dropped quietly (no second abort)."""
    sink = sink_type(client.clock, fail_on=fail_on)
    client._inflight.track("a", sink, 0)
    client._delivery.deliver(*_message(("a", [1])), LAYOUT, 0, None)
    assert [f.kind for f in sink.failures] == [FailureKind.INTERNAL]
    assert client.num_in_flight == 0 and client._aborts.pending == {0: ["a"]}
    client._delivery.deliver(*_message(("a", [2])), LAYOUT, 0, None)
    assert len(sink.seen) == 1 and client._aborts.pending == {0: ["a"]}


def test_an_output_nobody_waits_for_is_aborted_unless_it_is_final(client):
    client._delivery.deliver(*_message(("x", [1]), ("y", [1], sim_wire.FINISH_STOP)), LAYOUT, 0, None)
    assert client._aborts.pending == {0: ["x"]}


def test_each_engine_message_is_one_iteration_of_its_tokens():
    """vLLM's `vllm:iteration_tokens_total` counts, per EngineCoreOutputs, the new token ids plus
    the prompt tokens computed by the requests whose first output it carries (their
    prefill_stats), for requests someone waits for: one `on_iteration` call per message, none
    for a backlog's gathered replays (to the client's observer); outputs decoded in full carry
    the message's engine time."""
    observer = Observer()
    client = _client(observer)
    calls = observer.iterations
    a, b = WithTokens(client.clock), OutputsOnly(client.clock)
    times: list = []
    b.on_output = lambda o: times.append(o.engine_time)
    client._inflight.track("a", a, 0)
    client._inflight.track("b", b, 0)
    prefill = dict(sim_wire.prefill_stats(12, 16), num_computed_tokens=7, num_cached_tokens=5)
    items = [sim_wire.output_item(SIM_LAYOUT, "b", [4], prefill_stats=prefill),  # b's first output
             sim_wire.output_item(SIM_LAYOUT, "a", [1, 2]),  # a plain step of 2 tokens (spec decode)
             sim_wire.output_item(SIM_LAYOUT, "gone", [9])]  # nobody waits: not counted
    frames = [sim_wire.pack_outputs(0, items, 1.0)]
    _, raw = decode_message(frames, LAYOUT)
    client.clock.engine = 42.5
    client._delivery.deliver(raw, frames, LAYOUT, 0, None)
    assert calls == [(0, 7 + 1 + 2)] and times == [42.5]
    gathering: dict[str, list] = {}
    client._delivery.deliver(*_message(("a", [3]), ("b", [5])), LAYOUT, 0, gathering)
    client._delivery.deliver(*_message(("a", [6])), LAYOUT, 0, gathering)
    client._delivery.deliver_gathered(gathering, LAYOUT)
    assert calls == [(0, 10), (0, 2), (0, 1)]
    client._delivery.deliver(*_message(), LAYOUT, 0, None)  # no outputs: no iteration
    assert len(calls) == 3
