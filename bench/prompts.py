"""Long random prompts, generated once and cached as a `bench serve` custom dataset (JSONL).

`bench serve --dataset-name random` builds each prompt by decoding random token ids and then
adjusting the text until it re-tokenizes to the exact length; for 10,000-token prompts that
takes ~80 ms of one core per prompt (~3 minutes for 2,000 prompts, on every run and for every
frontend). The same kind of prompt (random vocabulary ids, decoded, trimmed to about the target
length on re-encoding) is made here with the `tokenizers` library in a fraction of that, stored
under .cache/bench-prompts/ and shared by all frontends, so they all see the same text.
Every prompt in the pool is distinct; a run needing more prompts than the pool reuses them.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

from bench.frontends import REPO

CACHE = REPO / ".cache" / "bench-prompts"


def prompt_pool(model_dir: str, input_len: int, count: int, seed: int = 0) -> Path:
    """JSONL with `count` distinct prompts of ~`input_len` tokens (within 0.5%)."""
    path = CACHE / f"random-{input_len}tok-{count}-seed{seed}.jsonl"
    tmp = path.with_suffix(".tmp")
    for _ in range(1800):  # another process is writing this pool: wait for it
        if path.exists() or not tmp.exists() or time.time() - tmp.stat().st_mtime > 60:
            break
        time.sleep(1)
    if path.exists():
        return path
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    vocab = tok.get_vocab_size(with_added_tokens=False)
    added = set(tok.get_added_tokens_decoder()) if hasattr(tok, "get_added_tokens_decoder") else set()
    rng = random.Random(seed)
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(tmp, "w", encoding="utf-8") as out:
        for _ in range(count):
            ids = [i for i in (rng.randrange(vocab) for _ in range(input_len)) if i not in added]
            text = tok.decode(ids)
            enc = tok.encode(text, add_special_tokens=False)
            if len(enc.ids) > input_len:  # cut at a token boundary (offsets map tokens to chars)
                text = text[: enc.offsets[input_len][0]]
            out.write(json.dumps({"prompt": text}) + "\n")
    tmp.replace(path)
    return path
