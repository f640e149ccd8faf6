"""Wire formats of the two generation APIs: chat completions and text completions.

Field order and presence follow what vLLM's serving code emits (`model_dump_json(
exclude_unset=True)` for stream chunks, full models for bodies), so clients see the same JSON.
Logprobs follow vLLM's rules: the engine's row for a position is [sampled, top-1..top-K]
(deduplicated, first occurrence wins), logprobs are clamped at -9999.0, chat lists the first
`top_logprobs` entries, completions map the first K+1 entries.
"""

from __future__ import annotations

from typing import Any, Callable

import msgspec

from vllm_pyfrontend.chat.assistant import AssistantDelta
from vllm_pyfrontend.engine.types import Logprobs
from vllm_pyfrontend.serving.per_request_metrics import body_metrics, stream_metrics
from vllm_pyfrontend.serving.prompt_logprobs import SampledTexts, echo_logprobs, prompt_logprobs_json
from vllm_pyfrontend.serving.request_pipeline import Choice, RequestRun, fold_tool_calls

_enc = msgspec.json.encode


def _row(lp: Logprobs, i: int) -> dict[int, float]:
    row: dict[int, float] = {}
    for t, v in zip(lp.token_ids[i], lp.logprobs[i]):
        if t not in row:
            row[t] = v
    return row


def _clamp(v: float) -> float:
    return max(v, -9999.0)


def token_id_text(token_id: int) -> str:
    """A logprob token as vLLM writes it with `return_tokens_as_token_ids`."""
    return "token_id:%d" % token_id


_ALL = 1 << 62  # a top-k that lists every entry of a row (`-1`, or explicit `logprob_token_ids`)


def prompt_details(run: RequestRun, enabled: bool, created: bool = False) -> dict[str, Any] | None:
    """`usage.prompt_tokens_details` as vLLM words it with --enable-prompt-tokens-details: the
    prompt tokens the engine found in its prefix cache (None unless enabled and reported) and,
    for chat (`created`), those it computed and wrote to the cache (vLLM's completions leave
    `created_cache_tokens` null)."""
    if not enabled or not run.choices:
        return None
    gen = run.choices[0].gen
    if gen is None:
        return None
    cached = gen.num_cached_tokens
    written = gen.num_cache_creation_tokens if created else None
    if cached is None and written is None:
        return None
    return {"cached_tokens": cached, "created_cache_tokens": written, "multimodal_tokens": None}


def _usage_with_details(run: RequestRun, enabled: bool, created: bool = False) -> dict[str, Any]:
    usage: dict[str, Any] = run.usage()
    if enabled:
        usage["prompt_tokens_details"] = prompt_details(run, True, created)
    return usage


def reasoning_tokens(choices: list[Choice]) -> int:
    """The output tokens the choices' reasoning parsers counted inside reasoning (each parser
    counts from the token ids it is fed, as it goes: nothing is decoded again here)."""
    return sum(c.assistant.reasoning_tokens for c in choices)


class _OpenAIFormatter:
    """The usage chunk of OpenAI's chat and completion streams and their bodies' shared fields, with vLLM's
    --enable-prompt-tokens-details and --enable-per-request-metrics (`prompt_tokens_details`,
    `per_request_metrics`, set by each formatter)."""

    prompt_tokens_details = False
    per_request_metrics = False
    created_cache_tokens = False  # prompt_tokens_details reports the tokens written to the cache (chat)
    # `usage.completion_tokens_details`: None, no such key in the stream's usage (completions);
    # False, null (chat without --reasoning-parser); True, `{"reasoning_tokens": N}` (chat with
    # one: vLLM reports the reasoning tokens whenever a reasoning parser is configured, with
    # `include_reasoning: false` too). RequestRun.choice_usage reads it for continuous usage.
    reasoning_details: bool | None = None

    def completion_details(self, choices: list[Choice]) -> dict[str, int] | None:
        return {"reasoning_tokens": reasoning_tokens(choices)} if self.reasoning_details else None

    def stream_usage(self, run: RequestRun) -> None:
        assert run.sse is not None
        usage = _usage_with_details(run, self.prompt_tokens_details, self.created_cache_tokens)
        if self.reasoning_details:  # (vLLM's usage chunk leaves out null fields)
            usage["completion_tokens_details"] = self.completion_details(run.choices)
        run.sse.usage_chunk(usage,
                            stream_metrics(run.choices, run.completion_tokens) if self.per_request_metrics else None)

    def _body(self, run: RequestRun, object_: str, choices: list[dict[str, Any]], system_fingerprint: str | None,
              **prompt_fields: Any) -> dict[str, Any]:
        """The non-streaming body both styles share, `prompt_fields` (chat's prompt logprobs and
        ids) between `usage` and the transfer params, in vLLM's key order."""
        return {
            "id": run.response_id,
            "object": object_,
            "created": run.created,
            "model": run.model,
            "choices": choices,
            "service_tier": None,
            "system_fingerprint": system_fingerprint,
            "usage": {**run.usage(), "prompt_tokens_details": prompt_details(run, self.prompt_tokens_details,
                                                                           self.created_cache_tokens),
                      "completion_tokens_details": self.completion_details(run.choices)},
            **prompt_fields,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": body_metrics(run.choices, run.completion_tokens) if self.per_request_metrics else None,
        }


class ChatFormatter(_OpenAIFormatter):
    created_cache_tokens = True  # vLLM's chat reports the prompt tokens written to the prefix cache
    plain_content_chunks = True  # RequestRun may write content chunks itself (SSEWriter.content_chunk_bytes)
    quiet_empty_deltas = True  # an empty running delta writes nothing (ChoiceStep.on_delta)

    def __init__(self, token_text: Callable[[int], str], top_logprobs: int, *, prompt_logprobs: bool = False,
                 decode: Callable[[list[int]], str] | None = None, token_bytes: bool = True,
                 as_token_ids: bool = False, all_top: bool = False, role: str = "assistant",
                 prompt_tokens_details: bool = False, per_request_metrics: bool = False,
                 reasoning_details: bool = False, forced_tool_choice: bool = False):
        self.token_text = token_text
        self.reasoning_details = reasoning_details  # a --reasoning-parser is configured (see _OpenAIFormatter)
        # "required" or a named tool choice: vLLM's message content is "" rather than null
        self.forced_tool_choice = forced_tool_choice
        self.prompt_tokens_details = prompt_tokens_details  # vLLM's --enable-prompt-tokens-details
        self.per_request_metrics = per_request_metrics  # vLLM's --enable-per-request-metrics
        self.role = role  # of the generated message (vLLM's --response-role, or the continued message's)
        # -1 (or `logprob_token_ids`): every entry the engine returned for a position
        self.top = _ALL if all_top or top_logprobs == -1 else top_logprobs
        # `return_tokens_as_token_ids`: tokens written "token_id:N" (the sampled token's `bytes`
        # stay its text's, as vLLM's)
        self.as_token_ids = as_token_ids
        self.prompt_logprobs = prompt_logprobs  # the engine computes them: the body lists them
        # ids -> text: vLLM's UTF-8 repair of logprob tokens (serving/prompt_logprobs.py); None
        # (beam search, whose tokens vLLM decodes one by one) repairs nothing.
        self.decode = decode
        self.token_bytes = token_bytes  # beam search: vLLM leaves the chosen token's `bytes` null
        self._texts: SampledTexts | None = None

    def format_logprobs(self, choice: Choice, token_ids: list[int], lp: Logprobs) -> list[dict[str, Any]]:
        if self._texts is None:
            self._texts = SampledTexts(self.token_text, self.decode)
        out = []
        for i, tid in enumerate(token_ids):
            if i >= len(lp.token_ids):
                break
            row = _row(lp, i)
            names = self._texts.row(choice.index, lp.token_ids[i])
            tok = names[tid] if tid in names else self.token_text(tid)
            tops = []
            for j, (t, v) in enumerate(row.items()):
                if j >= self.top:
                    break
                s = token_id_text(t) if self.as_token_ids else names[t]
                tops.append({"token": s, "logprob": _clamp(v), "bytes": list(s.encode("utf-8"))})
            out.append({
                "token": token_id_text(tid) if self.as_token_ids else tok,
                "logprob": _clamp(row.get(tid, lp.logprobs[i][0])),
                "bytes": list(tok.encode("utf-8")) if self.token_bytes else None,
                "top_logprobs": tops,
            })
        return out

    def stream_delta(self, run: RequestRun, choice: Choice, delta: AssistantDelta | None, logprobs,
                     token_ids, finish, stop_reason) -> None:
        sse = run.sse
        assert sse is not None
        usage = run.choice_usage(choice) if run.continuous_usage else None
        if finish is None and logprobs is None and token_ids is None:
            if delta is None or delta.is_empty():
                return
            calls = delta.tool_calls
            if not delta.reasoning:
                if delta.content and not calls:
                    sse.content_chunk(choice.index, delta.content, usage)
                    return
                if not delta.content and len(calls) == 1 and len(item := calls[0]) == 2:
                    # An open call's next argument text (most of a tool call's tokens).
                    fn = item.get("function")
                    if fn is not None and len(fn) == 1 and "arguments" in fn:
                        sse.write(sse.arguments_chunk_bytes(choice.index, item["index"], fn["arguments"], usage))
                        return
        d = _delta_dict(delta)
        item = b'{"index":%d,"delta":%b,"logprobs":%b,"finish_reason":%b' % (
            choice.index,
            _enc(d),
            _enc({"content": logprobs}) if logprobs is not None else b"null",
            _enc(run.finish_reason_of(choice) if finish is not None else None),
        )
        if finish is not None:
            item += b',"stop_reason":' + _enc(stop_reason)
        item += b',"token_ids":' + _enc(token_ids)
        data = sse.prefix + item + b"}]"
        if usage:
            data += b',"usage":' + _enc(usage)
        if finish is not None and not run.include_usage:
            # vLLM stamps the fingerprint on terminal chunks (the usage chunk when there is one).
            data += b',"system_fingerprint":' + _enc(run.system_fingerprint)
        sse.write(data + b"}\n\n")

    def body(self, run: RequestRun, system_fingerprint: str | None = None) -> dict[str, Any]:
        choices = []
        for c in run.choices:
            gen = c.gen
            # vLLM: null content when the parsers leave none (tool calls, or a reasoning parser
            # that took the whole output); the text as it is otherwise ("" for an empty answer);
            # always text ("" for none) with a "required" or named tool choice.
            parsed_away = not self.forced_tool_choice and (c.tool_calls or (
                run.echo_text is None and getattr(c.assistant, "reasoning", None) is not None))
            message: dict[str, Any] = {
                "role": self.role,
                "content": (run.echo_text or "") + "".join(c.content) if (c.content or not parsed_away) else None,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "reasoning": "".join(c.reasoning) if c.reasoning else None,
            }
            if c.reasoning:
                message["reasoning_content"] = message["reasoning"]  # the older name
            if c.tool_calls:
                message["tool_calls"] = [
                    {k: v for k, v in call.items() if k != "index"} for call in fold_tool_calls(c.tool_calls)
                ]
            choices.append({
                "index": c.index,
                "message": message,
                "logprobs": {"content": [e for part in c.logprobs for e in part]} if run.want_logprobs else None,
                "finish_reason": run.finish_reason_of(c),
                "stop_reason": gen.stop_reason if gen else None,
                "token_ids": c.token_ids if run.return_token_ids else None,
                "routed_experts": None,
            })
        return self._body(run, "chat.completion", choices, system_fingerprint,
                          prompt_logprobs=self._prompt_logprobs(run),
                          prompt_token_ids=run.prompt_token_ids if run.return_token_ids else None,
                          prompt_text=None)


    def _prompt_logprobs(self, run: RequestRun) -> list | None:
        if not self.prompt_logprobs or not run.choices or run.choices[0].gen is None:
            return None
        return prompt_logprobs_json(run.choices[0].gen.prompt_logprobs, self.token_text, self.decode)


def _delta_dict(delta: AssistantDelta | None) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if delta is not None:
        if delta.reasoning:
            d["reasoning"] = delta.reasoning
            d["reasoning_content"] = delta.reasoning  # the older name, for older clients
        if delta.content is not None:
            d["content"] = delta.content
        if delta.tool_calls:
            d["tool_calls"] = delta.tool_calls
    if not d:
        d["content"] = ""
    return d


class CompletionFormatter(_OpenAIFormatter):
    """Text completions (/v1/completions): text deltas, integer logprobs, echo."""

    def __init__(self, token_text: Callable[[int], str], top_logprobs: int,
                 echo_texts: list[str] | None = None, *, prompt_logprobs: bool = False,
                 decode: Callable[[list[int]], str] | None = None, echo_ids: list[list[int]] | None = None,
                 prompt_ids: list[list[int]] | None = None, stream_prompt_ids: bool = False,
                 all_top: bool = False, prompt_tokens_details: bool = False, per_request_metrics: bool = False):
        # `return_tokens_as_token_ids`: the caller passes `token_id_text` and no `decode`
        self.token_text = token_text
        self.prompt_tokens_details = prompt_tokens_details  # vLLM's --enable-prompt-tokens-details
        self.per_request_metrics = per_request_metrics  # vLLM's --enable-per-request-metrics
        self.top = _ALL if all_top or top_logprobs == -1 else top_logprobs
        self.echo_texts = echo_texts  # per choice: prompt text to put in front
        self.prompt_logprobs = prompt_logprobs  # the engine computes them: each choice lists them
        self.decode = decode  # ids -> text: vLLM's UTF-8 repair of logprob tokens (serving/prompt_logprobs.py)
        self._texts: SampledTexts | None = None
        # echo + logprobs: per choice, the prompt ids whose logprobs open `logprobs`
        self.echo_ids = echo_ids
        self._offsets: dict[int, int] = {}
        self._started: set[int] = set()  # choices whose first (echo-carrying) chunk went out
        # Per choice, its prompt's token ids: in the body with `return_token_ids`, and in the
        # choice's first chunk when streaming with `return_token_ids` or `echo` (vLLM).
        self.prompt_ids = prompt_ids
        self.stream_prompt_ids = stream_prompt_ids

    def format_logprobs(self, choice: Choice, token_ids: list[int], lp: Logprobs) -> dict[str, list]:
        text = self.token_text
        tokens, token_lps, tops, offsets = [], [], [], []
        offset = self._offsets.get(choice.index)
        if offset is None and self.echo_ids is not None:
            # The first logprobs of an echoed choice start with the prompt's (vLLM).
            head = echo_logprobs(self.echo_ids[choice.index], choice.gen.prompt_logprobs if choice.gen else None,
                                 text, self.top, self.decode)
            tokens, token_lps, tops, offsets = (head["tokens"], head["token_logprobs"], head["top_logprobs"],
                                                head["text_offset"])
            offset = offsets[-1] + len(tokens[-1]) if tokens else 0
        elif offset is None:
            offset = len(self.echo_texts[choice.index]) if self.echo_texts else 0
        if self._texts is None:
            self._texts = SampledTexts(text, self.decode)
        for i, tid in enumerate(token_ids):
            if i >= len(lp.token_ids):
                break
            row = _row(lp, i)
            names = self._texts.row(choice.index, lp.token_ids[i])
            tok = names[tid] if tid in names else text(tid)
            tokens.append(tok)
            token_lps.append(_clamp(row.get(tid, lp.logprobs[i][0])))
            tops.append({names[t]: _clamp(v) for j, (t, v) in enumerate(row.items()) if j <= self.top})
            offsets.append(offset)
            offset += len(tok)
        self._offsets[choice.index] = offset
        return {"text_offset": offsets, "token_logprobs": token_lps, "tokens": tokens, "top_logprobs": tops}

    def _text_of(self, choice: Choice, delta: AssistantDelta | None, first: bool) -> str:
        text = (delta.content or "") if delta is not None else ""
        if first and self.echo_texts is not None:
            text = self.echo_texts[choice.index] + text
        return text

    def stream_delta(self, run: RequestRun, choice: Choice, delta, logprobs, token_ids, finish, stop_reason) -> None:
        sse = run.sse
        assert sse is not None
        first = choice.index not in self._started
        text = self._text_of(choice, delta, first)
        if not text and finish is None and logprobs is None and token_ids is None:
            return
        self._started.add(choice.index)
        item = {
            "index": choice.index,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": finish,
            "stop_reason": stop_reason if finish is not None else None,
            "prompt_token_ids": (self.prompt_ids[choice.index]
                                 if first and self.stream_prompt_ids and self.prompt_ids else None),
            "token_ids": token_ids,
        }
        data = sse.prefix + _enc(item) + b"]"
        if run.continuous_usage:
            data += b',"usage":' + _enc(run.choice_usage(choice))
        sse.write(data + b"}\n\n")

    def body(self, run: RequestRun, system_fingerprint: str | None = None) -> dict[str, Any]:
        choices = []
        for c in run.choices:
            gen = c.gen
            text = "".join(c.content)
            if self.echo_texts is not None:
                text = self.echo_texts[c.index] + text
            lp = None
            if run.want_logprobs:
                lp = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
                for part in c.logprobs:
                    for k in lp:
                        lp[k].extend(part[k])
            choices.append({
                "index": c.index,
                "text": text,
                "logprobs": lp,
                "finish_reason": gen.finish_reason if gen and gen.finish_reason else "stop",
                "stop_reason": gen.stop_reason if gen else None,
                "token_ids": c.token_ids if run.return_token_ids else None,
                "prompt_logprobs": (prompt_logprobs_json(gen.prompt_logprobs if gen else None, self.token_text, self.decode)
                                    if self.prompt_logprobs else None),
                "prompt_token_ids": self.prompt_ids[c.index] if run.return_token_ids and self.prompt_ids else None,
                "routed_experts": None,
            })
        return self._body(run, "text_completion", choices, system_fingerprint)
