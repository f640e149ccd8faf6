"""What the simulated engine "generates".

Token ids come from the model's real tokenizer so the frontend detokenizes readable text:
a fixed pseudo-random stream of single-token English words (with some punctuation), which
each request reads from its own offset (derived from the request's sampling seed, or its id).
Reading `stream[(offset + i) & mask]` is all the per-token work.

Tests script exact outputs through `sampling_params.extra_args`:
`sim_text` (str: emit exactly these tokens), `sim_token_ids` (list[int]: emit these ids),
`sim_eos_after` (int: emit EOS after that many tokens).
"""

from __future__ import annotations

import logging
import os
import random
import zlib
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger(__name__)

_WORDS = (
    "the of and to in is that it for on with as was at by be this are from or have an not "
    "they which one you had his her all were there we can when more time about some would "
    "make like into them than its now only other new could these then people way two first "
    "water been called who over find long down day did get come made may part world sound "
    "light house small large city river field story song morning evening road garden window "
    "table paper market summer winter quiet bright simple careful gentle green blue yellow "
    "stone bridge letter music answer number school family friend question reason system "
    "little every under after again still along near between never always often above"
).split()
_PUNCTUATION = (".", ",")

STREAM_LEN = 4096  # a power of two: index with `& (STREAM_LEN - 1)`


class TokenSource:
    """Token ids for generated text, built from `tokenizer.json` in the model directory.

    Without a tokenizer (e.g. a model dir holding only weights) the stream falls back to a
    fixed id range and scripted text (`sim_text`) is unavailable.
    """

    def __init__(self, model_dir: str | None, seed: int = 0):
        self._tokenizer = _load_tokenizer(model_dir)
        rng = random.Random(seed)
        if self._tokenizer is not None:
            # A byte-level vocabulary without merges has no whole words: its letters, then.
            words = (self._single_token_ids([" " + w for w in _WORDS])
                     or self._single_token_ids(list("abcdefghijklmnopqrstuvwxyz ")))
            marks = self._single_token_ids(list(_PUNCTUATION))
        else:
            words, marks = list(range(1000, 1000 + len(_WORDS))), []
        stream: list[int] = []
        while len(stream) < STREAM_LEN:
            stream.append(rng.choice(words))
            if marks and rng.random() < 0.08:
                stream.append(rng.choice(marks))
        self.stream: list[int] = stream[:STREAM_LEN]
        self.mask = STREAM_LEN - 1

    @property
    def has_tokenizer(self) -> bool:
        return self._tokenizer is not None

    def _single_token_ids(self, pieces: list[str]) -> list[int]:
        assert self._tokenizer is not None
        ids: list[int] = []
        for piece in pieces:
            encoded = self._tokenizer.encode(piece, add_special_tokens=False).ids
            if len(encoded) == 1:
                ids.append(encoded[0])
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (no special tokens added)."""
        if self._tokenizer is None:
            raise ValueError("sim_text needs a tokenizer.json in the model directory")
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def offset_for(self, seed: int | None, request_id: str) -> int:
        """Where a request starts reading the stream: from its seed when it has one (so
        equal seeds give equal text), else from a stable hash of its id."""
        if seed is not None:
            return (seed * 2654435761) & self.mask
        return zlib.crc32(request_id.encode()) & self.mask


def _load_tokenizer(model_dir: str | None):
    """`tokenizers.Tokenizer` for `<model_dir>/tokenizer.json`, or None."""
    return _load_tokenizer_cached(str(model_dir) if model_dir else None)


@lru_cache(maxsize=4)
def _load_tokenizer_cached(model_dir: str | None):
    if not model_dir:
        return None
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        logger.warning("no tokenizer.json in %s: generating placeholder token ids", model_dir)
        return None
    from tokenizers import Tokenizer

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Tokenizer.from_file(str(path))
