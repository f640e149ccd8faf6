"""Prompt logprobs in vLLM's two response forms.

The engine sends, for prompt positions 1.., a row `[prompt token, top-1 .. top-K]` with the
prompt token's rank (`Generation.prompt_logprobs`). vLLM's frontend turns each row into a
`{token_id: Logprob(logprob, rank, decoded_token)}` dict (later duplicates overwrite earlier
ones, keys keep their first position), puts `None` for position 0, and clamps -inf to -9999.0.
Completions with `echo` and `logprobs` also list the prompt's tokens in `logprobs` (the first
one with no logprob).

Each token is decoded on its own; one that decodes to an unfinished UTF-8 sequence (ending in
U+FFFD) is decoded again after up to 4 preceding prompt tokens, as vLLM's LogprobsProcessor
does (its context skips position 0, which has no entry).
"""

from __future__ import annotations

from typing import Any, Callable

from vllm_pyfrontend.engine.types import Logprobs

_FLOOR = -9999.0
_REPLACEMENT = "\ufffd"

Decode = Callable[[list[int]], str]


class SampledTexts:
    """Texts of sampled-logprob rows, per choice, with the same UTF-8 repair (vLLM's context
    there: the last 4 sampled tokens, column 0 of the rows before)."""

    def __init__(self, token_text: Callable[[int], str], decode: Decode | None):
        self.token_text = token_text
        self.decode = decode
        self._context: dict[int, list[int]] = {}

    def seed(self, choice: int, context: list[int]) -> None:
        """Start `choice` with sampled ids from before (streaming derender carries them over)."""
        self._context[choice] = list(context)[-4:]

    def row(self, choice: int, ids: list[int]) -> dict[int, str]:
        """The text of each token of one position's row; call once per position, in order."""
        text = self.token_text
        names = {t: text(t) for t in ids}
        context = self._context.get(choice, [])
        if self.decode is not None and any(x.endswith(_REPLACEMENT) for x in names.values()):
            names = {t: _corrected(t, context, self.decode) if x.endswith(_REPLACEMENT) else x
                     for t, x in names.items()}
        if ids:
            self._context[choice] = (context + [ids[0]])[-4:]
        return names


def _corrected(token_id: int, context: list[int], decode: Decode) -> str:
    """vLLM's LogprobsProcessor._correct_decoded_token."""
    for num_ctx in range(1, min(len(context), 4) + 1):
        ctx = context[-num_ctx:]
        full = decode(ctx + [token_id])
        if full.endswith(_REPLACEMENT):
            continue
        clean_end = len(ctx)
        for j in range(len(ctx) - 1, -1, -1):
            if decode([ctx[j]]).endswith(_REPLACEMENT):
                clean_end = j
            else:
                break
        prefix = decode(ctx[:clean_end]) if clean_end > 0 else ""
        if full.startswith(prefix):
            return full[len(prefix):]
        common = 0
        for a, b in zip(prefix, full):
            if a != b:
                break
            common += 1
        return full[common:]
    return ""


def _row_dict(rows: Logprobs, pos: int, token_text: Callable[[int], str],
              decode: Decode | None) -> dict[int, dict[str, Any]]:
    ids = rows.token_ids[pos]
    texts = [token_text(t) for t in ids]
    if decode is not None and any(t.endswith(_REPLACEMENT) for t in texts):
        # Entries before this one: [None, row 0, .., row pos-1]; their first tokens, last 4.
        context = [rows.token_ids[i - 1][0] for i in range(max(1, pos + 1 - 4), pos + 1)]
        texts = [_corrected(t, context, decode) if x.endswith(_REPLACEMENT) else x for t, x in zip(ids, texts)]
    ranks = [rows.sampled_ranks[pos], *range(1, len(ids))]
    out: dict[int, dict[str, Any]] = {}
    for t, v, r, x in zip(ids, rows.logprobs[pos], ranks, texts):
        out[t] = {"logprob": max(v, _FLOOR), "rank": r, "decoded_token": x}
    return out


def prompt_logprobs_json(rows: Logprobs | None, token_text: Callable[[int], str],
                         decode: Decode | None = None) -> list[Any]:
    """vLLM's `prompt_logprobs` field: `[None, {id: {logprob, rank, decoded_token}}, ...]`."""
    out: list[Any] = [None]
    if rows is not None:
        out.extend(_row_dict(rows, pos, token_text, decode) for pos in range(len(rows.token_ids)))
    return out


def echo_logprobs(prompt_ids: list[int], rows: Logprobs | None, token_text: Callable[[int], str],
                  top: int, decode: Decode | None = None) -> dict[str, list]:
    """The prompt part of a completion's `logprobs` with `echo` (offsets from 0)."""
    tokens: list[str] = []
    token_lps: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    offset = 0
    for pos, tid in enumerate(prompt_ids):
        row = None
        if pos > 0 and rows is not None and pos - 1 < len(rows.token_ids):
            row = _row_dict(rows, pos - 1, token_text, decode)
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
