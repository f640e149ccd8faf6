"""Workers of a text-only model never import torch/transformers/vLLM: the multimodal layer is
imported by the chat route but loads vLLM's processor only for a model whose config names a
vision/audio tower, and a media part sent to a text-only model is refused without loading."""

from __future__ import annotations

import json
import subprocess
import sys

from vllm_pyfrontend.multimodal.chat import has_media, looks_multimodal


def test_worker_modules_import_no_heavy_libraries():
    code = (
        "import sys\n"
        "import vllm_pyfrontend.server.worker, vllm_pyfrontend.api.openai.chat_routes\n"
        "import vllm_pyfrontend.multimodal.chat\n"
        "print(sorted(m for m in ('torch', 'transformers', 'vllm', 'PIL', 'numpy.core') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_has_media():
    text = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": "x"}]
    assert not has_media(text)
    for kind in ("image_url", "input_image", "image_embeds", "input_audio", "audio_url", "video_url"):
        assert has_media([{"role": "user", "content": [{"type": kind}]}])


def test_looks_multimodal(tmp_path):
    def model(cfg):
        d = tmp_path / str(len(list(tmp_path.iterdir())))
        d.mkdir()
        (d / "config.json").write_text(json.dumps(cfg))
        return str(d)

    assert not looks_multimodal(model({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}))
    assert looks_multimodal(model({"architectures": ["Idefics3ForConditionalGeneration"], "vision_config": {}}))
    assert looks_multimodal(model({"architectures": ["Qwen2VLForConditionalGeneration"]}))
    assert not looks_multimodal(str(tmp_path / "missing"))
