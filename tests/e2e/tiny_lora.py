"""A seeded random-weight LoRA adapter (PEFT format) for the tiny Qwen3 model of tiny_model.py.

Written with safetensors and torch directly (no peft): adapter_config.json and
adapter_model.safetensors with lora_A / lora_B for the attention and MLP projections of both
layers, with values large enough that the adapter changes what the model generates.
"""

from __future__ import annotations

import json
from pathlib import Path

RANK = 8
_SHAPES = {  # module -> (in, out) of the tiny model (hidden 128, 2 heads + 1 KV head of 64, MLP 256)
    "self_attn.q_proj": (128, 128),
    "self_attn.k_proj": (128, 64),
    "self_attn.v_proj": (128, 64),
    "self_attn.o_proj": (128, 128),
    "mlp.gate_proj": (128, 256),
    "mlp.up_proj": (128, 256),
    "mlp.down_proj": (256, 128),
}


def build_tiny_lora(dest: str | Path, seed: int, base_model: str = "tiny", scale: float = 0.5) -> str:
    import torch
    from safetensors.torch import save_file

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(2):
        for module, (n_in, n_out) in _SHAPES.items():
            prefix = f"base_model.model.model.layers.{layer}.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(RANK, n_in, generator=gen) * scale
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(n_out, RANK, generator=gen) * scale
    save_file(tensors, str(dest / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model,
        "r": RANK, "lora_alpha": 2 * RANK, "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
        "target_modules": sorted({m.split(".")[1] for m in _SHAPES}), "modules_to_save": None,
        "use_rslora": False, "use_dora": False,
    }
    (dest / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return str(dest)
