"""Prompt logprobs in vLLM's two response forms.

The engine sends, for prompt positions 1.., a row `[prompt token, top-1 .. top-K]` with the
prompt token's rank (`Generation.prompt_logprobs`). vLLM's frontend turns each row into a
`{token_id: Logprob(logprob, rank, decoded_token)}` dict (later duplicates overwrite earlier
ones, keys keep their first position), puts `None` for position 0, and clamps -inf to -9999.0.
Completions with `echo` and `logprobs` also list the prompt's tokens in `logprobs` (the first
one with no logprob).
"""

from __future__ import annotations

from typing import Any, Callable

from vllm_pyfrontend.engine.types import Logprobs

_FLOOR = -9999.0


def _row_dict(rows: Logprobs, pos: int, token_text: Callable[[int], str]) -> dict[int, dict[str, Any]]:
    ranks = [rows.sampled_ranks[pos], *range(1, len(rows.token_ids[pos]))]
    out: dict[int, dict[str, Any]] = {}
    for t, v, r in zip(rows.token_ids[pos], rows.logprobs[pos], ranks):
        out[t] = {"logprob": max(v, _FLOOR), "rank": r, "decoded_token": token_text(t)}
    return out


def prompt_logprobs_json(rows: Logprobs | None, token_text: Callable[[int], str]) -> list[Any]:
    """vLLM's `prompt_logprobs` field: `[None, {id: {logprob, rank, decoded_token}}, ...]`."""
    out: list[Any] = [None]
    if rows is not None:
        out.extend(_row_dict(rows, pos, token_text) for pos in range(len(rows.token_ids)))
    return out


def echo_logprobs(prompt_ids: list[int], rows: Logprobs | None, token_text: Callable[[int], str],
                  top: int) -> dict[str, list]:
    """The prompt part of a completion's `logprobs` with `echo` (offsets from 0)."""
    tokens: list[str] = []
    token_lps: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    offset = 0
    for pos, tid in enumerate(prompt_ids):
        row = None
        if pos > 0 and rows is not None and pos - 1 < len(rows.token_ids):
            row = _row_dict(rows, pos - 1, token_text)
        if row is None or tid not in row:
            tok = token_text(tid)
            tokens.append(tok)
            token_lps.append(None)
            tops.append(None)
        else:
            tok = row[tid]["decoded_token"]
            tokens.append(tok)
            token_lps.append(row[tid]["logprob"])
            tops.append({e["decoded_token"]: e["logprob"] for i, e in enumerate(row.values()) if i <= top})
        offsets.append(offset)
        offset += len(tok)
    return {"text_offset": offsets, "token_logprobs": token_lps, "tokens": tokens, "top_logprobs": tops}
