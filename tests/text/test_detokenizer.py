"""IncrementalDetokenizer equals vLLM's FastIncrementalDetokenizer."""

from __future__ import annotations

import json
import os
import random
import types

import pytest
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers
from vllm.sampling_params import SamplingParams
from vllm.v1.engine.detokenizer import FastIncrementalDetokenizer

from vllm_pyfrontend.text.tokenizer import Tokenizer


def vllm_detok(hf: tokenizers.Tokenizer, prompt: list[int], skip: bool, spaces: bool):
    params = SamplingParams(
        skip_special_tokens=skip, spaces_between_special_tokens=spaces, max_tokens=10
    )
    req = types.SimpleNamespace(request_id="r", prompt_token_ids=prompt, sampling_params=params)
    return FastIncrementalDetokenizer(types.SimpleNamespace(_tokenizer=hf), req)


def compare_streams(tok: Tokenizer, hf: tokenizers.Tokenizer, ids, prompt, skip, spaces, rng) -> None:
    ref = vllm_detok(hf, prompt, skip, spaces)
    ours = tok.new_detokenizer(prompt, skip_special_tokens=skip, spaces_between_special_tokens=spaces)
    i = 0
    while i < len(ids):
        chunk = ids[i : i + rng.randint(1, 3)]
        i += len(chunk)
        ref.update(chunk, False)
        want = ref.get_next_output_text(False, True)
        got = ours.feed(chunk)
        assert got == want, (ids, prompt, skip, spaces, chunk)
    assert ours.flush() == ""


@pytest.fixture(scope="module")
def pools(tok: Tokenizer):
    table = tok.detokenizer_vocab.text_table()
    partial = [i for i in range(128000) if table[i] is None and tok.token_bytes[i]]
    base = tok.encode("héllo 世界 😀👍🏽 ok\n  code(){}\t中文テキスト" * 2)
    return partial, list(tok.added_token_ids), base


def test_random_ids_equal_vllm(tok: Tokenizer, pools) -> None:
    partial, added, base = pools
    assert len(partial) > 100  # tokens that hold only part of a UTF-8 char
    hf = tok.hf_tokenizer
    rng = random.Random(0)
    for _ in range(400):
        ids = []
        for _ in range(rng.randint(1, 30)):
            r = rng.random()
            pool = partial if r < 0.4 else added if r < 0.55 else base if r < 0.8 else None
            ids.append(rng.choice(pool) if pool else rng.randrange(128000))
        prompt = [rng.randrange(tok.vocab_size) for _ in range(rng.randint(0, 4))]
        if rng.random() < 0.3:
            prompt.append(rng.choice(partial))  # prompt ends inside a character
        compare_streams(tok, hf, ids, prompt, rng.random() < 0.5, rng.random() < 0.5, rng)


def test_real_text_equals_full_decode(tok: Tokenizer) -> None:
    text = "Ünïcödé 中文 emoji 😀👍🏽🇺🇸 <think>x</think> done\n\n  end"
    ids = tok.encode(text)
    d = tok.new_detokenizer(tok.encode("prompt"))
    out = "".join(d.feed([i]) for i in ids) + d.flush()
    assert out == tok.decode(ids) == text
    # One call with all ids gives the same text.
    assert tok.new_detokenizer().feed(ids) == text


def test_special_tokens_skipped_or_kept(tok: Tokenizer) -> None:
    ids = [0] + tok.encode("hi") + [1]
    assert tok.new_detokenizer().feed(ids) == "hi"
    kept = tok.new_detokenizer(skip_special_tokens=False).feed(ids)
    assert kept == "<｜begin▁of▁sentence｜>hi<｜end▁of▁sentence｜>"


def test_incomplete_tail_held(tok: Tokenizer) -> None:
    raw = "😀".encode()
    # Find single-byte tokens for the emoji's bytes.
    ids = []
    table = tok.token_bytes
    assert table is not None
    for b in raw:
        ids.append(table.index(bytes([b])))
    d = tok.new_detokenizer()
    assert [d.feed([i]) for i in ids[:-1]] == ["", "", ""]
    assert d.flush() == ""
    assert d.flush(emit_incomplete=True) == "\ufffd"
    d2 = tok.new_detokenizer()
    assert "".join(d2.feed([i]) for i in ids) == "😀"


@pytest.fixture(scope="module")
def sp_tok(tmp_path_factory) -> Tokenizer:
    """A sentencepiece-style (Metaspace + ByteFallback) tokenizer: not byte-level."""
    model = models.BPE(unk_token="<unk>", byte_fallback=True)
    hf = tokenizers.Tokenizer(model)
    hf.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    hf.pre_tokenizer = pre_tokenizers.Split("▁", "merged_with_next")
    hf.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens, initial_alphabet=list("▁abcdefghijklmnopqrstuvwxyz"))
    hf.train_from_iterator(["hello world this is a small corpus for a tiny model"] * 50, trainer)
    hf.add_tokens([tokenizers.AddedToken("<tool>", special=False)])
    d = tmp_path_factory.mktemp("sp")
    hf.save(str(d / "tokenizer.json"))
    with open(d / "tokenizer_config.json", "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, f)
    return Tokenizer.load(str(d))


def test_fallback_decoder_equals_vllm(sp_tok: Tokenizer) -> None:
    assert sp_tok.token_bytes is None  # not byte-level: DecodeStream path
    hf = sp_tok.hf_tokenizer
    rng = random.Random(3)
    text = "hello world é 中 😀 <tool> this"
    base = sp_tok.encode(text)
    # Byte-fallback tokens are special here, so keep special tokens.
    assert sp_tok.decode(base, skip_special_tokens=False) == text
    for _ in range(200):
        ids = [rng.choice(base) if rng.random() < 0.7 else rng.randrange(sp_tok.vocab_size) for _ in range(rng.randint(1, 15))]
        prompt = [rng.randrange(sp_tok.vocab_size) for _ in range(rng.randint(0, 3))]
        compare_streams(sp_tok, hf, ids, prompt, rng.random() < 0.5, rng.random() < 0.5, rng)
    d = sp_tok.new_detokenizer(skip_special_tokens=False)
    assert "".join(d.feed([i]) for i in base) == text


def test_table_shared_between_requests(tok: Tokenizer) -> None:
    a, b = tok.new_detokenizer(), tok.new_detokenizer()
    assert a._text is b._text and a._bytes is b._bytes
    # The one-token step's table: shared too, special tokens "" when they are skipped.
    assert a._fast is b._fast is tok.detokenizer_vocab.skipping_text_table()
    assert all(a._fast[i] == "" for i in tok.special_token_ids)
    kept = tok.new_detokenizer(skip_special_tokens=False)
    assert kept._fast is a._text and kept.feed([0]) == "<｜begin▁of▁sentence｜>"
    assert a.feed([0]) == "" and a.feed([1]) == ""
