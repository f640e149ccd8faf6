"""Token -> raw bytes table for byte-level BPE tokenizers.

Byte-level BPE (GPT-2 style, used by DeepSeek, Llama 3, Qwen, ...) stores every
vocabulary entry as a string over a 256-character alphabet that stands for the
256 byte values. Decoding is therefore a pure table lookup followed by UTF-8
decoding, which is what makes per-token detokenization cheap: we precompute the
bytes of every token id once per tokenizer and share the table between all
requests.

The table reproduces `tokenizers`' ByteLevel decoder exactly: a token whose
characters all belong to the alphabet maps to those bytes; any other token
(typically an added token such as ``<｜User｜>``) contributes its own UTF-8
bytes unchanged.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    """The inverse of GPT-2's ``bytes_to_unicode`` alphabet."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    byte_values = printable[:]
    code_points = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            byte_values.append(b)
            code_points.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(byte_values, code_points)}


def token_string_to_bytes(token: str) -> bytes:
    """Bytes one token string decodes to under the ByteLevel decoder."""
    table = unicode_to_bytes()
    try:
        return bytes(table[c] for c in token)
    except KeyError:
        return token.encode("utf-8")


def is_pure_byte_level(tokenizer_json: dict[str, Any]) -> bool:
    """True when decoding is exactly "concatenate token bytes, decode UTF-8".

    That holds for a lone ByteLevel decoder (or a Sequence holding only
    ByteLevel decoders) and no normalizer-dependent decode step.
    """
    decoder = tokenizer_json.get("decoder")
    if not isinstance(decoder, dict):
        return False
    if decoder.get("type") == "ByteLevel":
        return True
    if decoder.get("type") == "Sequence":
        parts = decoder.get("decoders") or []
        return bool(parts) and all(
            isinstance(p, dict) and p.get("type") == "ByteLevel" for p in parts
        )
    return False


def build_token_bytes(vocab: dict[str, int], size: int) -> list[bytes]:
    """A list indexed by token id holding each token's bytes (b"" for holes)."""
    table: list[bytes] = [b""] * size
    for token, idx in vocab.items():
        if 0 <= idx < size:
            table[idx] = token_string_to_bytes(token)
    return table


def load_tokenizer_json(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
