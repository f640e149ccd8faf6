"""One accepted request in flight: its choices (one engine request each) and their pipeline.

`RequestRun` is the state of one request; each of its choices has one `ChoiceStep`, the
consumer of that choice's `llm.Generation` (the engine client's output sink, which counts the
tokens and tracks the finish). Per choice the pipeline is: engine output -> TextStream
(detokenizer + stop strings) -> assistant stream (content / reasoning / tool calls) -> the API's
`Formatter`, which either writes SSE bytes to the transport (streaming) or accumulates the
final body (non-streaming). Both modes see the same events, so they agree by construction.
The handler coroutine only awaits `run.done`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from vllm_pyfrontend.chat.assistant import AssistantDelta, AssistantStream
from vllm_pyfrontend.engine.types import Failure, FailureKind, Logprobs
from vllm_pyfrontend.llm.generation import Generation
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.sse import SSEWriter
from vllm_pyfrontend.text.text_stream import TextStream


class Choice:
    __slots__ = (
        "index", "gen", "text", "assistant", "content", "reasoning", "tool_calls",
        "logprobs", "token_ids", "finished", "tools_called", "metrics", "plain", "fast", "step",
    )  # fmt: skip

    def __init__(self, index: int, text: TextStream, assistant):
        self.index = index
        self.gen: Generation | None = None
        self.text = text
        self.assistant = assistant
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.logprobs: list[Any] = []
        self.token_ids: list[int] = []
        self.finished = False
        self.tools_called = False
        self.plain = type(assistant) is AssistantStream  # no parser: text is content
        self.fast = False  # plain content that RequestRun writes as chunks itself (set by RequestRun)
        self.metrics = None  # vllm_pyfrontend.metrics.RequestMetrics of this choice's engine request
        self.step: ChoiceStep | None = None  # the consumer of `gen` (RequestRun.step)


class Formatter(Protocol):
    """Turns pipeline events into the API's wire format (chat or text completion).

    A formatter whose `stream_delta` writes nothing for a running step without a delta,
    logprobs or token ids says so with a true `quiet_empty_deltas` class attribute: such steps
    then skip it."""

    def stream_delta(
        self, run: "RequestRun", choice: Choice, delta: AssistantDelta | None, logprobs: Any,
        token_ids: list[int] | None, finish: str | None, stop_reason: int | str | None,
    ) -> None: ...

    def format_logprobs(self, choice: Choice, token_ids: list[int], logprobs: Logprobs) -> Any: ...

    def stream_usage(self, run: "RequestRun") -> None: ...

    def body(self, run: "RequestRun") -> dict[str, Any]: ...


class RequestRun:
    """State of one request. Each choice's Generation is consumed by the choice's `ChoiceStep`
    (`step`); the run is a GenerationConsumer too, for a Generation made with it (it hands each
    step to the choice's `ChoiceStep`)."""

    def __init__(
        self,
        *,
        response_id: str,
        model: str,
        created: int,
        choices: list[Choice],
        num_prompt_tokens: int,
        stream: bool,
        include_usage: bool,
        continuous_usage: bool,
        formatter: Formatter,
        want_logprobs: bool = False,
        return_token_ids: bool = False,
        num_cached_tokens_wanted: bool = False,
        sse: SSEWriter | None = None,
        prompt_token_ids: list[int] | None = None,
        include_reasoning: bool = True,
        parallel_tool_calls: bool = True,
        named_tool_choice: bool = False,
        echo_text: str | None = None,
        stream_interval: int = 1,
    ):
        self.response_id = response_id
        self.model = model
        self.created = created
        self.choices = choices
        self.num_prompt_tokens = num_prompt_tokens
        self.stream = stream
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage
        self.formatter = formatter
        self.system_fingerprint: str | None = None
        self.echo_text = echo_text  # chat `echo`: the last message's content, repeated
        self.include_reasoning = include_reasoning
        self.parallel_tool_calls = parallel_tool_calls
        self.named_tool_choice = named_tool_choice  # vLLM: a named tool choice finishes with "stop"
        self.want_logprobs = want_logprobs
        self.return_token_ids = return_token_ids
        # vLLM's stream interval: a streamed choice's running chunk waits for this many tokens
        # (its first and its last do not wait); 1: every step goes out.
        self.stream_interval = stream_interval if stream else 1
        self.prompt_token_ids = prompt_token_ids  # the body's `prompt_token_ids` (vLLM: with return_token_ids)
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Set while the handler waits for the first engine output (`first_output`).
        self.awaiting_output: asyncio.Future[None] | None = None
        self.error: APIError | None = None
        self.error_sent = False  # streaming: the error event went to the writer
        self.sse = sse  # streaming: where the run writes its events (None: one body at the end)
        # The handler writes the stream's end with `SSEWriter.last_frame` (serving/responder.py):
        # the events of the drain that ends the stream can wait for it (`SSEWriter.ending`).
        self.ends_with_last_frame = False
        self._remaining = len(choices)
        # Plain content chunks may skip the assistant/formatter layers (`Choice.fast`).
        fast = (stream and getattr(formatter, "plain_content_chunks", False) and not want_logprobs
                and not return_token_ids and not continuous_usage)
        for c in choices:
            c.fast = fast and c.plain
        # A running step whose delta is empty needs no formatter call (ChoiceStep.on_delta).
        self._skip_empty = not want_logprobs and not return_token_ids and (
            not stream or (getattr(formatter, "quiet_empty_deltas", False) and not continuous_usage))

    async def first_output(self, wait: float) -> None:
        """Wait for the first engine output of any choice or the run's end, at most `wait`
        seconds: a streamed answer's headers go out then, with its role chunk and the events of
        that output, in one write (vLLM's server, too, sends the role chunk with the first
        output)."""
        done = self.done
        if done.done() or wait <= 0:
            return
        loop = asyncio.get_running_loop()
        waiter = self.awaiting_output = loop.create_future()

        def wake(_: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        done.add_done_callback(wake)
        timer = loop.call_later(wait, wake)
        try:
            await waiter
        finally:
            timer.cancel()
            done.remove_done_callback(wake)
            self.awaiting_output = None

    def step(self, choice: Choice) -> "ChoiceStep":
        """The consumer of `choice`'s Generation, made on first use: when the request is
        submitted (serving/responder.py), once the run's writer is set (the step keeps it)."""
        step = choice.step
        if step is None:
            step = choice.step = ChoiceStep(self, choice)
        return step

    # -- GenerationConsumer (a Generation made with the run as its consumer) ----------------
    def on_delta(
        self,
        gen: Generation,
        token_ids: list[int],
        logprobs: Logprobs | None,
        finish_reason: str | None,
        stop_reason: int | str | None,
    ) -> None:
        self.step(self.choices[gen.index]).on_delta(gen, token_ids, logprobs, finish_reason, stop_reason)

    def _send_delta(
        self,
        gen: Generation,
        choice: Choice,
        token_ids: list[int],
        logprobs: Logprobs | None,
        finish_reason: str | None,
        stop_reason: int | str | None,
        delta: AssistantDelta | None,
    ) -> None:
        """The assistant stream's delta of a step to the formatter (streaming) or the body."""
        if delta is not None:
            delta = self._shape_delta(delta)
        if delta is not None and delta.tool_calls:
            choice.tools_called = True
        lp = None
        if self.want_logprobs and logprobs is not None and token_ids:
            lp = self.formatter.format_logprobs(choice, token_ids, logprobs)
        if self.stream:
            if self.sse is not None:
                self.formatter.stream_delta(
                    self, choice, delta, lp, token_ids if self.return_token_ids else None,
                    finish_reason, stop_reason,
                )
                if not self.sse.alive:
                    self.cancel()
                    return
        else:
            if delta is not None:
                if delta.content:
                    choice.content.append(delta.content)
                if delta.reasoning:
                    choice.reasoning.append(delta.reasoning)
                if delta.tool_calls:
                    choice.tool_calls.extend(delta.tool_calls)
            if lp is not None:
                choice.logprobs.append(lp)
            if self.return_token_ids:
                choice.token_ids.extend(token_ids)
        if finish_reason is not None:
            self._choice_done(choice)

    def _shape_delta(self, delta: AssistantDelta) -> AssistantDelta | None:
        """Request options applied to parser output: include_reasoning, parallel_tool_calls,
        and one item per tool call and delta (id, name and arguments together)."""
        if delta.reasoning and not self.include_reasoning:
            delta = AssistantDelta(content=delta.content, tool_calls=delta.tool_calls)
        calls = delta.tool_calls
        if calls and (len(calls) > 1 or not self.parallel_tool_calls):  # (one item: nothing to fold)
            calls = fold_tool_calls(calls)
            if not self.parallel_tool_calls:
                calls = [c for c in calls if c.get("index", 0) == 0]
            delta = AssistantDelta(content=delta.content, reasoning=delta.reasoning, tool_calls=calls)
        return None if delta.is_empty() else delta

    def on_error(self, gen: Generation, failure: Failure) -> None:
        if self.done.done():
            return
        if self.choices[gen.index].finished and failure.kind is not FailureKind.INTERNAL:
            return  # this choice had its answer; the engine failing later does not undo it
        # (INTERNAL: our own code raised, possibly while finishing this choice's answer, e.g.
        # writing the usage chunk: the request must still end.)
        self.fail(APIError(503 if failure.kind.engine_unavailable else 500, failure.message))

    # -- accounting -----------------------------------------------------------------------
    @property
    def completion_tokens(self) -> int:
        return sum(c.gen.num_output_tokens for c in self.choices if c.gen is not None)

    def usage(self) -> dict[str, int]:
        completion = self.completion_tokens
        return {
            "prompt_tokens": self.num_prompt_tokens,
            "total_tokens": self.num_prompt_tokens + completion,
            "completion_tokens": completion,
        }

    def choice_usage(self, choice: Choice) -> dict[str, Any]:
        """Continuous usage stats are per choice (vLLM): its own prompt's tokens and its own
        completion tokens so far; for chat (a formatter with `reasoning_details`) also
        `completion_tokens_details`: null, or the choice's reasoning tokens so far when a
        reasoning parser is configured."""
        gen = choice.gen
        prompt = gen.num_prompt_tokens if gen is not None else self.num_prompt_tokens
        completion = gen.num_output_tokens if gen is not None else 0
        usage: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                                 "completion_tokens": completion}
        details = getattr(self.formatter, "reasoning_details", None)
        if details is not None:
            usage["completion_tokens_details"] = (
                {"reasoning_tokens": choice.assistant.reasoning_tokens} if details else None)
        return usage

    def finish_reason_of(self, choice: Choice) -> str:
        gen = choice.gen
        reason = gen.finish_reason if gen is not None and gen.finish_reason else "stop"
        if reason == "stop" and choice.tools_called and not self.named_tool_choice:
            return "tool_calls"
        return reason

    # -- completion -------------------------------------------------------------------------
    def _choice_done(self, choice: Choice) -> None:
        choice.finished = True
        self._remaining -= 1
        if self._remaining == 0:
            if self.stream and self.sse is not None:
                if self.include_usage:
                    self.formatter.stream_usage(self)
                if self.ends_with_last_frame:
                    self.sse.ending = True
            # [DONE] goes out with the end of the body, from the handler (SSEWriter.last_frame).
            if not self.done.done():
                self.done.set_result(None)

    def fail(self, error: APIError) -> None:
        """End the whole request with an error (mid-stream: error event, then [DONE] from the
        handler)."""
        if self.done.done():
            return
        self.error = error
        try:
            for c in self.choices:
                c.finished = True
                if c.gen is not None and not c.gen.finished:
                    c.gen.cancel()
            if self.stream and self.sse is not None:
                frame = self.error_frame(error)
                if frame:
                    self.sse.write(frame)
                self.error_sent = True
        finally:
            # Even if writing the error event fails, the handler must wake up and end the
            # response (its [DONE] goes out with the end of the body).
            self.done.set_result(None)

    def error_frame(self, error: APIError) -> bytes:
        """The error event of a failed stream, in this API's SSE framing (OpenAI's here)."""
        return b"data: " + error.to_bytes() + b"\n\n"

    def release(self) -> None:
        """The handler is done with this request: its generations and its choices let go of
        their steps (see `Generation.detach`), which hold the run, so reference counting frees
        the request at once."""
        for c in self.choices:
            c.step = None
            if c.gen is not None:
                c.gen.detach()

    def cancel(self) -> None:
        """Client gone: abort every engine request, finish quietly."""
        for c in self.choices:
            c.finished = True
            if c.gen is not None:
                c.gen.cancel()
        if not self.done.done():
            self.done.set_result(None)


class ChoiceStep:
    """The consumer of one choice's Generation: every step of its engine request, from the new
    token ids to the writer, in `on_delta`.

    The common step, a running step of one token whose whole text the text stream's `feed_one`
    takes (nothing pending in the detokenizer, no stop string can begin or end in it), is the
    one call from the Generation; any other step takes `TextStream.feed`, and a step that ends
    the choice (the engine finished it, or a stop string matched) goes on to `_last`. A running
    step's text has one tail: plain streamed content (`Choice.fast`) straight to the writer,
    anything else through the assistant stream to the formatter (`RequestRun._send_delta`),
    skipped when the delta is empty and the API writes nothing for that
    (`Formatter.quiet_empty_deltas`).

    With a stream interval above 1 (vLLM's `--stream-interval` / `stream_interval`), a running
    step's text, token ids and logprobs wait (`held`) until that many tokens have gathered since
    the last step that went out, and then go out together; the first step and the last never
    wait. The text stream still takes every step as it comes, so a stop string ends the request
    (and aborts it in the engine) at the step that completes it, as in vLLM's output processor."""

    __slots__ = ("run", "choice", "text", "assistant", "index", "sse", "quiet", "interval", "held", "started")

    def __init__(self, run: RequestRun, choice: Choice):
        self.run = run
        self.choice = choice
        self.text = choice.text
        self.assistant = choice.assistant
        self.index = choice.index
        # The writer of plain streamed content; None: the assistant stream's path.
        self.sse = run.sse if choice.fast else None
        # A running step's empty delta needs no formatter call (see RequestRun.__init__).
        self.quiet = run._skip_empty
        self.interval = run.stream_interval
        self.held: list | None = None  # [text, token ids, logprobs] waiting for the interval
        self.started = False  # a step with tokens went out (vLLM's first step never waits)

    def on_delta(
        self,
        gen: Generation,
        token_ids: list[int],
        logprobs: Logprobs | None,
        finish_reason: str | None,
        stop_reason: int | str | None,
    ) -> None:
        choice = self.choice
        if choice.finished:
            return
        waiter = self.run.awaiting_output
        if waiter is not None and not waiter.done():  # the handler waits to send the headers
            waiter.set_result(None)
        if token_ids:
            metrics = choice.metrics
            if metrics is not None:  # inter-token latency, by the engine client's output clock
                clock = gen.clock
                if clock.steps == 1:
                    metrics.on_output(clock.now or None)
                else:  # a backlog's steps at once: each step still counts for ITL, as in vLLM
                    metrics.on_steps(clock.now, clock.last, clock.steps)
        if finish_reason is not None:
            text, matched = self.text.feed(token_ids, finish_reason == "stop")
            self._last(gen, token_ids, logprobs, finish_reason, stop_reason, text, matched)
            return
        text = self.text.feed_one(token_ids[0]) if len(token_ids) == 1 else None
        if text is None:
            text, matched = self.text.feed(token_ids, False)
            if matched is not None:
                self._last(gen, token_ids, logprobs, None, None, text, matched)
                return
        if self.interval != 1:
            out = self._hold(text, token_ids, logprobs)
            if out is None:
                return
            text, token_ids, logprobs = out
        sse = self.sse
        if sse is not None:
            if text:
                sse.write_content(self.index, text)
                if not sse.alive:
                    self.run.cancel()
            return
        delta = self.assistant.feed(text, token_ids)
        if delta is not None or not self.quiet:
            self.run._send_delta(gen, choice, token_ids, logprobs, None, None, delta)

    def _last(
        self,
        gen: Generation,
        token_ids: list[int],
        logprobs: Logprobs | None,
        finish_reason: str | None,
        stop_reason: int | str | None,
        text: str,
        matched: str | None,
    ) -> None:
        """The step that ends the choice: a stop string matched in its text (`matched`), or the
        engine finished it (`finish_reason`). Its text, with what the text stream and the
        assistant stream still hold, to the formatter with the finish."""
        if matched is not None:
            finish_reason, stop_reason = "stop", matched
            kept = self.text.num_kept
            # Tokens of this step after the one that completed the stop string (several tokens
            # per step): not part of the output, its usage or its logprobs (vLLM).
            unused = len(token_ids) - kept if kept < len(token_ids) else 0
            gen.stop_early("stop", matched, unused)
            if unused:
                token_ids = token_ids[:kept]
                if logprobs is not None:
                    logprobs = logprobs.head(kept)
        elif finish_reason != "stop":
            text += self.text.finish()
        held = self.held
        if held is not None:  # the steps waiting for the stream interval go out with the last
            self.held = None
            text = held[0] + text
            token_ids = held[1] + token_ids
            if held[2] is not None:
                logprobs = held[2].then(logprobs)
        assistant = self.assistant
        delta = assistant.feed(text, token_ids)
        tail = assistant.finish()
        if tail is not None:
            delta = _merge(delta, tail)
        self.run._send_delta(gen, self.choice, token_ids, logprobs, finish_reason, stop_reason, delta)

    def _hold(
        self, text: str, token_ids: list[int], logprobs: Logprobs | None,
    ) -> tuple[str, list[int], Logprobs | None] | None:
        """A running step under the stream interval: None while it waits, else what goes out now
        (the waiting steps, then this one). vLLM's rule: out when no token went out yet, or
        when the tokens since the last step that went out reach the interval."""
        held = self.held
        if held is None:
            if not self.started or len(token_ids) >= self.interval:
                if token_ids:
                    self.started = True
                return text, token_ids, logprobs
            self.held = [text, list(token_ids), logprobs]
            return None
        held[0] += text
        held[1] += token_ids
        if logprobs is not None:
            held[2] = logprobs if held[2] is None else held[2].then(logprobs)
        if len(held[1]) < self.interval:
            return None
        self.held = None
        return held[0], held[1], held[2]

    def on_error(self, gen: Generation, failure: Failure) -> None:
        self.run.on_error(gen, failure)


def fold_tool_calls(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge the items of one delta that share a call index (header + argument pieces)."""
    out: dict[int, dict[str, Any]] = {}
    for item in items:
        idx = item.get("index", 0)
        cur = out.get(idx)
        if cur is None:
            cur = out[idx] = {k: v for k, v in item.items() if k != "function"}
            cur["function"] = dict(item.get("function") or {})
            continue
        for k, v in item.items():
            if k != "function" and k not in cur:
                cur[k] = v
        fn = item.get("function") or {}
        if fn.get("name") and not cur["function"].get("name"):
            cur["function"]["name"] = fn["name"]
        if "arguments" in fn:
            cur["function"]["arguments"] = cur["function"].get("arguments", "") + (fn["arguments"] or "")
    return [out[i] for i in sorted(out)]


def _merge(a: AssistantDelta | None, b: AssistantDelta) -> AssistantDelta:
    if a is None:
        return b
    return AssistantDelta(
        content=((a.content or "") + (b.content or "")) or None,
        reasoning=((a.reasoning or "") + (b.reasoning or "")) or None,
        tool_calls=a.tool_calls + b.tool_calls,
    )
