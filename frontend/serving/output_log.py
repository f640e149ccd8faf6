"""Generated outputs in the request log (`--enable-log-outputs`, with `--enable-log-requests`),
as vLLM 0.32's `RequestLogger.log_outputs` writes them for chat completions (and the Messages
API, which vLLM serves through its chat code):

- a streamed choice: each chunk's delta, when it has content, reasoning or tool-call arguments
  (`--enable-log-deltas`, on by default), then, once the stream is over, the choice's whole text
  (the raw generated text, markup of reasoning and tool calls included);
- an answer in one body: each choice's content, or its tool calls as `[tool_calls: name(args)]`;
- a Responses request: its raw generated text, once, with the engine's finish reason
  (`attach_final`).

One INFO line each, `Generated response <id>[ (streaming delta)| (streaming complete)]: output:
'<text>', finish_reason: <reason>` (the text as Python's repr, at most --max-log-len
characters), and at DEBUG the token ids. The lines go to this frontend's request log
(`vllm_pyfrontend.requests`), whose formatter escapes whatever a client could use to forge a
line (server/log_lines.py).

A worker with the flag has one `OutputLog` (`ServerState.output_log`, None without it). The
per-token path pays nothing when it is off: `OutputLog.attach` is the only entry, called once
per request, and it swaps in the pieces that record (`_LoggedFormatter` around the API's
formatter, `_RecordedText` around each choice's text stream) and takes the run off the
plain-content fast path. Completions are not logged (vLLM's completion serving has no output
log).
"""

from __future__ import annotations

import logging
from typing import Any

from vllm_pyfrontend.serving.request_pipeline import RequestRun, fold_tool_calls

log = logging.getLogger("vllm_pyfrontend.requests")



class OutputLog:
    """The output log of one worker: `deltas` (--enable-log-deltas: each streamed delta too) and
    `max_log_len` (--max-log-len: the text and the ids cut to it; None: whole)."""

    def __init__(self, deltas: bool = True, max_log_len: int | None = None):
        self.deltas = deltas
        self.max_log_len = max_log_len

    def attach(self, run: RequestRun) -> None:
        """Log `run`'s outputs (a chat-shaped request that is not a beam search), before it is
        submitted. Nothing is logged for a request that fails or whose client went away."""
        for c in run.choices:
            c.fast = False  # every step through the assistant stream and the formatter
            c.text = _RecordedText(c.text)
        if run.stream and self.deltas:
            run.formatter = _LoggedFormatter(run.formatter, self)
        run.done.add_done_callback(lambda _: self._log_end(run))

    def attach_final(self, run: RequestRun, streaming: bool) -> None:
        """Log `run`'s final output only, as vLLM's Responses serving does: the raw text of its
        one choice with the engine's finish reason, `(streaming complete)` for a stream."""
        choice = run.choices[0]
        choice.fast = False
        choice.text = _RecordedText(choice.text)

        def end(_) -> None:
            gen = choice.gen
            if run.error is not None or gen is None or gen.finish_reason in (None, "abort"):
                return
            self.log_output(run.response_id, "".join(choice.text.parts), gen.output_ids, gen.finish_reason,
                            streaming=streaming)

        run.done.add_done_callback(end)

    def log_output(self, request_id: str, text: str, token_ids: list[int] | None, finish_reason: str | None,
                   streaming: bool = False, delta: bool = False) -> None:
        """vLLM's `RequestLogger.log_outputs`: the text (and finish reason) at INFO, the token ids
        at DEBUG, each cut to --max-log-len."""
        limit = self.max_log_len
        if limit is not None and text is not None:
            text = text[:limit]
        info = (" (streaming delta)" if delta else " (streaming complete)") if streaming else ""
        if log.isEnabledFor(logging.DEBUG):
            ids = list(token_ids)[:limit] if limit is not None and token_ids is not None else token_ids
            log.debug("Generated response %s%s details: output_token_ids: %s", request_id, info, ids)
        log.info("Generated response %s%s: output: %r, finish_reason: %s", request_id, info, text, finish_reason)

    def _log_end(self, run: RequestRun) -> None:
        if run.error is not None:
            return
        if run.stream:
            if run.sse is None or not run.sse.alive:
                return
            for c in run.choices:  # vLLM: the raw text of each choice, as streamed
                self.log_output(run.response_id, "".join(c.text.parts), None, "streaming_complete",
                                streaming=True, delta=False)
            return
        for c in run.choices:
            gen = c.gen
            if gen is None or gen.finish_reason == "abort":
                continue
            text = ""
            content = (run.echo_text or "") + "".join(c.content) if (c.content or not c.tool_calls) else None
            if content:
                text = content
            elif c.tool_calls:
                calls = ", ".join(f"{(t.get('function') or {}).get('name')}({(t.get('function') or {}).get('arguments')})"
                                  for t in fold_tool_calls(c.tool_calls))
                text = f"[tool_calls: {calls}]"
            if text:
                ids = c.token_ids if run.return_token_ids else gen.output_ids
                self.log_output(run.response_id, text, ids, run.finish_reason_of(c))


class _RecordedText:
    """A choice's text stream (text/text_stream.py) that also keeps what it released (the raw
    text of the choice) and the token ids of the latest step."""

    __slots__ = ("inner", "parts", "ids")

    def __init__(self, inner: Any):
        self.inner = inner
        self.parts: list[str] = []
        self.ids: list[int] = []

    def feed_one(self, token_id: int) -> str | None:
        text = self.inner.feed_one(token_id)
        if text is not None:
            self.parts.append(text)
            self.ids = [token_id]
        return text

    def feed(self, token_ids: list[int], engine_stopped: bool) -> tuple[str, str | None]:
        text, matched = self.inner.feed(token_ids, engine_stopped)
        self.parts.append(text)
        self.ids = token_ids
        return text, matched

    def finish(self) -> str:
        text = self.inner.finish()
        self.parts.append(text)
        return text

    @property
    def num_kept(self) -> int:
        return self.inner.num_kept

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _LoggedFormatter:
    """The API's formatter, with each streamed delta logged first (vLLM logs the delta of a
    chunk it is about to send)."""

    def __init__(self, inner: Any, output_log: OutputLog):
        self.inner = inner
        self.output_log = output_log
        self.quiet_empty_deltas = getattr(inner, "quiet_empty_deltas", False)

    def stream_delta(self, run: RequestRun, choice: Any, delta: Any, logprobs: Any, token_ids: Any,
                     finish: str | None, stop_reason: Any) -> None:
        if delta is not None:
            parts = []
            if delta.content:
                parts.append(delta.content)
            if delta.reasoning:
                parts.append(f"[reasoning: {delta.reasoning}]")
            if delta.tool_calls:
                args = "".join((c.get("function") or {}).get("arguments") or "" for c in delta.tool_calls)
                if args:
                    parts.append(f"[tool_calls: {args}]")
            if parts:
                recorded = choice.text
                ids = recorded.ids if isinstance(recorded, _RecordedText) else token_ids
                self.output_log.log_output(run.response_id, " ".join(parts), ids, finish, streaming=True, delta=True)
        self.inner.stream_delta(run, choice, delta, logprobs, token_ids, finish, stop_reason)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
