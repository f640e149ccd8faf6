"""Prompt token ids as the engine may receive them: in the vocabulary, not empty, truncated
as asked, and bad words lowered to the token sequences the engine must never sample."""

from __future__ import annotations

from typing import Callable

from vllm_pyfrontend.errors import InvalidRequestError

MAX_BAD_WORDS = 128  # vLLM's VLLM_MAX_NUM_BAD_WORDS default


def check_prompt_ids(ids: list[int], vocab_size: int, param: str = "prompt") -> list[int]:
    """Token ids given by a client: a non-empty list of ids inside the vocabulary."""
    if not ids:
        raise InvalidRequestError("A token-id prompt must not be empty.", param)
    bad = [t for t in ids if t < 0 or t >= vocab_size]
    if bad:
        raise InvalidRequestError(f"Token ids {bad[:5]} are out of vocabulary range.", param)
    return ids


def truncate_prompt(ids: list[int], truncate: int | None, max_model_len: int, side: str | None = None) -> list[int]:
    """vLLM's `truncate_prompt_tokens`: keep the last `truncate` ids (-1: the model's length), or
    the first ones with `truncation_side="right"`."""
    if truncate is None:
        return ids
    keep = max_model_len if truncate == -1 else truncate
    if not keep or len(ids) <= keep:
        return ids
    return ids[:keep] if side == "right" else ids[-keep:]


def bad_words_token_ids(encode: Callable[[str], list[int]], words: list[str], vocab_size: int) -> list[list[int]]:
    """vLLM's SamplingParams.update_from_tokenizer: each word, bare and with a leading space."""
    out: list[list[int]] = []
    for word in words:
        for prefix_space in (False, True):
            ids = encode((" " if prefix_space else "") + word.lstrip())
            if not ids:
                if not prefix_space:
                    raise InvalidRequestError("bad_words entries must tokenize to at least one token.", "bad_words")
                continue
            if not prefix_space or (out and ids[0] != out[-1][0] and len(ids) == len(out[-1])):
                out.append(ids)
                if len(out) > MAX_BAD_WORDS:
                    raise InvalidRequestError(f"Too many bad words after tokenization: {len(out)}. "
                                              f"The max number is {MAX_BAD_WORDS}.", "bad_words")
    bad = [t for ids in out for t in ids if t < 0 or t >= vocab_size]
    if bad:
        raise InvalidRequestError(f"bad_words tokenize to ids outside the vocabulary: {bad}.", "bad_words")
    return out
