"""The speech-to-text model, as vLLM's speech-to-text serving asks it (runs in the pool only).

Everything here imports vLLM (and so torch) and runs in the multimodal pool
(frontend/multimodal), only for a model whose class vLLM's registry marks
`SupportsTranscription`. The facts come from vLLM's own code, called from here:

- the model class (`get_model_cls`): `get_speech_to_text_config` (sample rate, clip length,
  overlap, chunking), `validate_language`, `get_generation_prompt` (the prompt per audio
  chunk, encoder-decoder or not), language detection (`get_language_detection_prompt`,
  `get_language_token_ids`, `parse_language_detection_output`), `post_process_output`,
  `get_num_audio_tokens` (streamed usage), the streaming post-processor;
- audio decoding and resampling with vLLM's `load_audio` (its duration and decoded-size
  bounds: `VLLM_MAX_AUDIO_DECODE_DURATION_S`, `VLLM_MAX_AUDIO_DECODE_BYTES`) and chunking with
  its `split_audio` (low-energy split points, overlap);
- the prompt's audio goes through vLLM's processor (frontend/multimodal's `MultimodalModel`,
  its processor cache included) into the engine's `mm_features`; the text parts are tokenized
  with vLLM's tokenizer and the processor's tokenization defaults; an encoder-decoder prompt
  gets the decoder start token as vLLM's `build_enc_dec_input` adds it.

The steps mirror `SpeechToTextBaseServing` (vllm/entrypoints/speech_to_text/base/serving.py).
"""

from __future__ import annotations

import io
import threading
import zlib
from dataclasses import dataclass
from typing import Any

from vllm_pyfrontend import environment
from vllm_pyfrontend.multimodal.model import MultimodalModel, Processed


@dataclass
class Rendered:
    """One engine request's inputs: the (decoder) prompt ids and the audio's features."""

    prompt_ids: list[int]
    processed: Processed | None  # features + out-of-band frames (None: no media)


class SpeechModel:
    """vLLM's speech-to-text facts for one model and task; built by `load` in the pool."""

    def __init__(self, mm: MultimodalModel):
        self.mm = mm
        self._lock = threading.Lock()
        self._configs: dict[str, Any] = {}
        self.model_cls: Any = None
        self.supported = False
        self.supports_verbose = False
        self.supports_diarized = False
        self.detect_language = False
        self.no_space_languages: set[str] = set()
        self._tokenizer: Any = None  # vLLM's tokenizer (the renderer's)
        self._hf_tokenizer: Any = None  # what vLLM's serving decodes segments with
        self.is_encoder_decoder = False
        self.max_decode_s = environment.max_audio_decode_duration_s()
        self.max_decode_bytes = environment.max_audio_decode_bytes()

    def load(self) -> "SpeechModel":
        self.mm.load()
        with self._lock:
            if self.model_cls is None:
                self._load()
        return self

    def _load(self) -> None:
        from vllm.model_executor.model_loader import get_model_cls
        from vllm.model_executor.models.interfaces import supports_transcription

        mc = self.mm.model_config
        cls = get_model_cls(mc)
        self.model_cls = cls
        # vLLM serves the speech routes when "transcription" is a supported task: the model
        # class supports transcription and the model runs as a generator.
        self.supported = bool(supports_transcription(cls)) and mc.runner_type == "generate" and self.mm.supported
        if not self.supported:
            return
        from vllm.tokenizers import cached_tokenizer_from_config

        self._tokenizer = cached_tokenizer_from_config(mc)
        self.is_encoder_decoder = bool(mc.is_encoder_decoder)
        self.supports_verbose = bool(getattr(cls, "supports_segment_timestamp", False))
        self.supports_diarized = bool(getattr(cls, "supports_diarized_transcription", False))
        self.detect_language = bool(getattr(cls, "supports_explicit_language_detection", False))
        self.no_space_languages = set(getattr(cls, "no_space_languages", ()) or ())
        self.stream_post_processor = cls.get_streaming_post_processor_cls()

    def config(self, task: str) -> Any:
        cfg = self._configs.get(task)
        if cfg is None:
            cfg = self._configs[task] = self.model_cls.get_speech_to_text_config(self.mm.model_config, task)
        return cfg

    def hf_tokenizer(self) -> Any:
        if self._hf_tokenizer is None:
            from vllm.tokenizers import get_tokenizer

            mc = self.mm.model_config
            self._hf_tokenizer = get_tokenizer(tokenizer_name=mc.tokenizer, tokenizer_mode=mc.tokenizer_mode)
        return self._hf_tokenizer

    # --------------------------------------------------------------------------- audio
    def validate_language(self, language: str | None) -> str | None:
        """The model's check (ValueError: unsupported)."""
        return self.model_cls.validate_language(language)

    def decode_and_chunk(self, data: bytes, task: str) -> tuple[list[Any], float]:
        """vLLM's `_decode_and_chunk_speech`: mono at the model's rate, split past the clip
        length. ValueError: the audio's fault (a 400)."""
        from vllm.multimodal.audio import get_audio_duration, split_audio
        from vllm.multimodal.media.audio import load_audio

        cfg = self.config(task)
        try:
            with io.BytesIO(data) as buf:
                y, sr = load_audio(buf, sr=cfg.sample_rate, mono=True, max_duration_s=self.max_decode_s,
                                   max_decode_bytes=self.max_decode_bytes)
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - vLLM's message for anything the decoders refuse
            raise ValueError("Invalid or unsupported audio file.") from exc
        duration = get_audio_duration(y=y, sr=sr)
        if not (cfg.allow_audio_chunking and cfg.max_audio_clip_s is not None and duration > cfg.max_audio_clip_s):
            return [y], duration
        chunks = split_audio(audio_data=y, sample_rate=int(sr), max_clip_duration_s=cfg.max_audio_clip_s,
                             overlap_duration_s=cfg.overlap_chunk_second,
                             min_energy_window_size=cfg.min_energy_split_window_size)
        return chunks, duration

    def chunk_offsets(self, chunks: list[Any], task: str) -> list[float]:
        rate = self.config(task).sample_rate
        offsets = [0.0]
        for chunk in chunks[:-1]:
            offsets.append(offsets[-1] + chunk.shape[-1] / rate)
        return offsets

    # --------------------------------------------------------------------------- prompts
    def generation_prompts(self, chunks: list[Any], task: str, *, language: str | None, prompt: str,
                           to_language: str | None, hotwords: str | None, verbose: bool) -> list[Rendered]:
        """One rendered prompt per chunk (vLLM's `_preprocess_speech_to_text` loop)."""
        from vllm.config.speech_to_text import SpeechToTextParams

        cfg = self.config(task)
        out = []
        for chunk in chunks:
            params = SpeechToTextParams(audio=chunk, stt_config=cfg, model_config=self.mm.model_config,
                                        language=language, task_type=task, request_prompt=prompt,
                                        to_language=to_language, hotwords=hotwords)
            p = self.model_cls.get_generation_prompt(params)
            out.append(self.render(p, verbose=verbose))
        return out

    def detection_prompt(self, chunk: Any, task: str) -> tuple[Rendered, list[int]]:
        """The language-detection request (one token among the language tokens)."""
        p = self.model_cls.get_language_detection_prompt(chunk, self.config(task))
        allowed = list(self.model_cls.get_language_token_ids(self.hf_tokenizer()))
        return self.render(p, verbose=False), allowed

    def parse_detection(self, token_ids: list[int]) -> str:
        return self.model_cls.parse_language_detection_output(list(token_ids), self.hf_tokenizer())

    def render(self, prompt: Any, *, verbose: bool) -> Rendered:
        """A prompt of the model class -> engine inputs, as vLLM's renderer renders it."""
        from vllm.renderers.inputs.preprocess import parse_enc_dec_prompt, parse_model_prompt

        mc = self.mm.model_config
        if verbose:
            parsed = parse_enc_dec_prompt(prompt)
            dec = parsed["decoder_prompt"]
            if not (isinstance(dec, dict) and "prompt" in dec):
                raise ValueError("Expected decoder_prompt to contain text")
            dec["prompt"] = dec["prompt"].replace("<|notimestamps|>", "<|0.00|>")
        else:
            parsed = parse_model_prompt(mc, prompt)
        if "encoder_prompt" not in parsed:
            ids, processed = self._singleton(parsed)
            return Rendered(ids, processed)
        enc_ids, processed = self._singleton(parsed["encoder_prompt"])
        dec_prompt = parsed["decoder_prompt"]
        if dec_prompt is None:
            dec_ids = enc_ids if processed is None else list(processed.prompt_ids)
        else:
            dec_ids, dec_processed = self._singleton(dec_prompt)
            if dec_processed is not None:
                raise ValueError("Multimodal data in the decoder prompt of an encoder-decoder model.")
        if not self._skip_decoder_start():
            start = self._decoder_start_id()
            if not dec_ids or dec_ids[0] != start:
                dec_ids = [start, *dec_ids]
        return Rendered(list(dec_ids), processed)

    def _singleton(self, p: dict[str, Any]) -> tuple[list[int], Processed | None]:
        if "prompt_token_ids" in p:
            ids = list(p["prompt_token_ids"])
        else:
            ids = self._tokenize(p.get("prompt", ""))
        mm_data = p.get("multi_modal_data")
        if not mm_data:
            return ids, None
        processed = self.mm.process(ids, mm_data, p.get("multi_modal_uuids"), p.get("mm_processor_kwargs"))
        return list(processed.prompt_ids), processed

    def _tokenize(self, text: str) -> list[int]:
        params = self.mm.processor.info.default_tok_params
        if getattr(params, "do_lower_case", False):
            text = text.lower()
        return list(self._tokenizer.encode(text, add_special_tokens=bool(params.add_special_tokens)))

    def _skip_decoder_start(self) -> bool:
        from vllm.multimodal.processing import EncDecMultiModalProcessor

        proc = self.mm.processor
        return isinstance(proc, EncDecMultiModalProcessor) and bool(proc.skip_decoder_start_token)

    def _decoder_start_id(self) -> int:
        start = getattr(self.mm.model_config.hf_config, "decoder_start_token_id", None)
        if start is None:
            start = getattr(self._tokenizer, "bos_token_id", None)
        if start is None:
            raise RuntimeError("Cannot find decoder start token id or <BOS>")
        return int(start)

    # --------------------------------------------------------------------------- outputs
    def post_process(self, text: str) -> str:
        return self.model_cls.post_process_output(text)

    def num_audio_tokens(self, duration_s: float, task: str) -> int | None:
        return self.model_cls.get_num_audio_tokens(duration_s, self.config(task), self.mm.model_config)

    def verbose_segments(self, tokens: list[int], sampled_logprobs: list[float], *, temperature: float,
                         start_time: float) -> list[dict[str, Any]]:
        """vLLM's `_get_verbose_segments`: segments between timestamp tokens (Whisper's
        `<|0.00|>`... counted from the first one, 0.02 s apart). `sampled_logprobs[i]` is the
        logprob of `tokens[i]`."""
        tok = self.hf_tokenizer()
        base = 0.02
        init = tok.encode("<|0.00|>", add_special_tokens=False)[0]
        toks = tuple(tokens)
        if toks and toks[-1] == tok.eos_token_id:
            toks = toks[:-1]
        seq = (init, *toks)
        if len(seq) >= 2 and seq[-2] < init and seq[-1] >= init:
            seq = (*seq, seq[-1])
        segments: list[dict[str, Any]] = []
        last = 0
        avg = 0.0
        for idx in range(1, len(seq)):
            token = seq[idx]
            if token >= init and seq[idx - 1] >= init:
                sliced = seq[last:idx]
                text = tok.decode(list(sliced[1:-1]))
                raw = text.encode("utf-8")
                segments.append({
                    "id": len(segments),
                    "avg_logprob": avg / (idx - last),
                    "compression_ratio": len(raw) / len(zlib.compress(raw)),
                    "end": start_time + base * (sliced[-1] - init),
                    "no_speech_prob": None,
                    "seek": int(start_time),
                    "start": start_time + base * (sliced[0] - init),
                    "temperature": temperature,
                    "text": text,
                    "tokens": list(sliced[1:-1]),
                })
                last = idx
                avg = 0.0
            else:
                avg += sampled_logprobs[idx - 1]
        return segments
