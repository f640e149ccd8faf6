"""Client inputs of the pooling routes -> prompt token ids, as vLLM's pooling IO processors
tokenize them (text with special tokens unless told otherwise, chat messages through the chat
template without a generation prompt, truncation on the tokenizer's side: the right)."""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.llm.prompt import check_prompt_ids
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.chat.messages import normalize_messages

# Inputs in one request (OpenAI's embeddings API takes at most 2048); each is an engine request.
MAX_INPUTS = 2048


def _is_ids(x: Any) -> bool:
    return isinstance(x, list) and bool(x) and all(type(t) is int for t in x)


def _is_message(x: Any) -> bool:
    return isinstance(x, dict) and isinstance(x.get("role"), str)


def _is_conversation(x: Any) -> bool:
    return isinstance(x, list) and bool(x) and all(_is_message(m) for m in x)


def check_count(n: int, param: str) -> None:
    if n == 0:
        raise APIError(400, f"`{param}` must not be empty.", param)
    if n > MAX_INPUTS:
        raise APIError(400, f"`{param}` has {n} inputs; at most {MAX_INPUTS} are allowed in one request.", param)


def truncate(ids: list[int], truncate_prompt_tokens: int | None, side: str | None, max_len: int) -> list[int]:
    """vLLM's `truncate_prompt_tokens` for pooling: -1 is the model's length; the right side
    is cut (the first tokens are kept) unless `truncation_side` is "left"."""
    if truncate_prompt_tokens is None:
        return ids
    if truncate_prompt_tokens > max_len:
        raise APIError(400, f"truncate_prompt_tokens={truncate_prompt_tokens} cannot be greater than "
                       f"max_model_len = {max_len}. Please request a smaller truncation size.",
                       "truncate_prompt_tokens")
    keep = max_len if truncate_prompt_tokens == -1 else truncate_prompt_tokens
    if len(ids) <= keep:
        return ids
    return ids[len(ids) - keep:] if side == "left" else ids[:keep]


def encode_truncated(state: Any, text: str, add_special: bool, truncate_prompt_tokens: int | None,
                     side: str | None) -> list[int]:
    """A text's ids, truncated as vLLM has the tokenizer truncate them when no side is asked
    for: the special tokens stay (BERT's closing [SEP] too) and the text loses its last tokens.
    With a side (or none to add), `truncate` cuts the ids afterwards."""
    full = state.tokenizer.encode(text, add_special_tokens=add_special)
    if truncate_prompt_tokens is None or side is not None or not add_special:
        return full
    max_len = state.max_model_len
    keep = max_len if truncate_prompt_tokens == -1 else truncate_prompt_tokens
    if len(full) <= keep or truncate_prompt_tokens > max_len:
        return full
    content = state.tokenizer.encode(text, add_special_tokens=False)
    extra = len(full) - len(content)
    start = next((k for k in range(extra + 1) if full[k:k + len(content)] == content), None)
    if start is None or keep < extra:
        return full
    return full[:start] + content[:keep - extra] + full[start + len(content):]


def check_length(ids: list[int], max_len: int, param: str) -> list[int]:
    if len(ids) > max_len:
        raise APIError(400, f"This model's maximum context length is {max_len} tokens. However, you "
                       f"requested {len(ids)} tokens in the input. Please reduce the length of the input "
                       "or set `truncate_prompt_tokens`.", param)
    if not ids:
        raise APIError(400, "The input is empty after tokenization.", param)
    return ids


def prompts_from(state: Any, req: Any) -> list[list[int]]:
    """The prompt ids of an embeddings / classification / pooling request: `input` (a string,
    strings, token ids, lists of token ids, a conversation or conversations) or `messages`."""
    check_removed(req)
    if req.messages is not None:
        if req.input is not None:
            raise APIError(400, "Give `input` or `messages`, not both.", "messages")
        return _conversations(state, req, req.messages, "messages")
    return _plain_inputs(state, req, req.input)


def check_removed(req: Any) -> None:
    """vLLM refuses the removed `normalize` parameter and the removed tasks by name."""
    if req.normalize is not msgspec.UNSET:
        raise APIError(400, "Parameter `normalize` was removed; use `use_activation` instead.", "normalize")
    if req.task in ("score", "encode"):
        hint = "`classify`" if req.task == "score" else "`token_embed` or `token_classify`"
        raise APIError(400, f"`{req.task}` task was removed; use {hint} instead.", "task")


def _plain_inputs(state: Any, req: Any, data: Any) -> list[list[int]]:
    if data is None:
        raise APIError(400, "`input` is required.", "input")
    if _is_conversation(data) or (isinstance(data, list) and data and all(_is_conversation(c) for c in data)):
        return _conversations(state, req, data, "input")
    if isinstance(data, str):
        items: list[Any] = [data]
    elif _is_ids(data):
        items = [data]
    elif isinstance(data, list) and (all(isinstance(x, str) for x in data) or all(_is_ids(x) for x in data)):
        items = data
    else:
        raise APIError(400, "`input` must be a string, a list of strings, a list of token ids, a list of "
                       "token-id lists or chat messages, and not empty.", "input")
    check_count(len(items), "input")
    add_special = True if req.add_special_tokens is None else req.add_special_tokens
    max_len = state.max_model_len
    out = []
    for x in items:
        if isinstance(x, str):
            ids = encode_truncated(state, x, add_special, req.truncate_prompt_tokens, req.truncation_side)
        else:
            try:
                ids = check_prompt_ids(list(x), state.limits.vocab_size, "input")
            except InvalidRequestError as e:
                raise APIError(400, e.message, e.param) from None
        out.append(check_length(truncate(ids, req.truncate_prompt_tokens, req.truncation_side, max_len),
                                max_len, "input"))
    return out


def _conversations(state: Any, req: Any, data: Any, param: str) -> list[list[int]]:
    if _is_conversation(data):
        convs = [data]
    elif isinstance(data, list) and all(_is_conversation(c) for c in data):
        convs = data
    else:
        raise APIError(400, f"`{param}` must be a list of chat messages or a list of conversations.", param)
    check_count(len(convs), param)
    if req.continue_final_message and req.add_generation_prompt:
        raise APIError(400, "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                       "continue_final_message")
    max_len = state.max_model_len
    out = []
    for conv in convs:
        ids = state.render_and_tokenize(
            normalize_messages(conv),
            add_generation_prompt=req.add_generation_prompt,
            continue_final_message=req.continue_final_message,
            chat_template_kwargs=req.chat_template_kwargs,
        )
        if req.add_special_tokens:
            ids = state.tokenizer.with_special_tokens(ids)
        out.append(check_length(truncate(ids, req.truncate_prompt_tokens, req.truncation_side, max_len),
                                max_len, param))
    return out


def score_texts(value: Any, param: str) -> list[str]:
    """A score/rerank side: a string or a list of strings (multimodal parts: not here)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return list(value)
    if value is None:
        raise APIError(400, f"`{param}` is required.", param)
    raise APIError(400, f"`{param}` must be a string or a list of strings (multimodal score inputs are not "
                   "supported by this text-only model).", param)
