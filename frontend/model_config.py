"""What the frontend reads of a model's `config.json`: its type (parser auto-detection) and
its vocabulary size (the bound on token ids the engine may see: an id past the model's
embedding table would fail inside the engine)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any


def read_json_object(model_dir: str, name: str) -> dict[str, Any]:
    """A JSON object file of the model folder (`config.json`, `tokenizer_config.json`); `{}` when
    it is missing, unreadable or not an object."""
    try:
        with open(os.path.join(model_dir, name), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True, slots=True)
class ModelConfig:
    model_type: str | None = None
    vocab_size: int | None = None

    @classmethod
    def load(cls, model_dir: str) -> "ModelConfig":
        config = read_json_object(model_dir, "config.json")
        vocab = config.get("vocab_size")
        text = config.get("text_config")
        if not isinstance(vocab, int) and isinstance(text, dict):
            vocab = text.get("vocab_size")  # multimodal models keep it with the language model
        model_type = config.get("model_type")
        return cls(model_type if isinstance(model_type, str) else None,
                   vocab if isinstance(vocab, int) and vocab > 0 else None)
