"""Tokenizer: ids equal HF `tokenizers`, backend selection, metadata."""

from __future__ import annotations

import json
import os
import random
import shutil
from types import SimpleNamespace

import pytest
import tokenizers

import fastokens
from vllm_pyfrontend.text import tokenizer as tokmod
from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4
from vllm_pyfrontend.text.tokenizer import Tokenizer

TEXTS = [
    "Hello, world!",
    "  spaces   and\ttabs\n\n\r\n",
    "中文，日本語、한국어",
    "emoji 😀👍🏽 🇺🇸 👨‍👩‍👧‍👦",
    "<｜User｜>hi<｜Assistant｜><think>ok</think>done<｜end▁of▁sentence｜>",
    "def f(x):\n    return x ** 2  # square\n",
    "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">",
    "1234567890 3.14159",
]


def random_text(rng: random.Random, specials: list[str]) -> str:
    pieces = []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.15:
            pieces.append(rng.choice(specials))
        elif r < 0.3:
            pieces.append(" " * rng.randint(1, 5) + "\n" * rng.randint(0, 2))
        else:
            pieces.append("".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0x4E00, 0x4E50), rng.randint(0x1F600, 0x1F64F), rng.randint(0xC0, 0x17F)])) for _ in range(rng.randint(1, 12))))
    return "".join(pieces)


def test_backend_selection(tok: Tokenizer, tok_hf: Tokenizer) -> None:
    assert tok.backend == "fastokens"
    assert tok_hf.backend == "tokenizers"


def test_ids_equal_hf_tokenizers(tok: Tokenizer, tok_hf: Tokenizer, dsv4_dir: str) -> None:
    ref = tokenizers.Tokenizer.from_file(os.path.join(dsv4_dir, "tokenizer.json"))
    specials = [t.content for t in ref.get_added_tokens_decoder().values()]
    rng = random.Random(1)
    texts = TEXTS + [random_text(rng, specials) for _ in range(300)]
    for text in texts:
        want = ref.encode(text, add_special_tokens=False).ids
        assert tok.encode(text) == want, text
        assert tok_hf.encode(text) == want, text
        assert tok.encode(text, add_special_tokens=True) == ref.encode(text).ids


def test_falls_back_when_fastokens_differs(dsv4_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = fastokens.Tokenizer.from_json_str

    class Wrong:
        def __init__(self, inner):
            self.inner = inner

        def encode(self, text, add_special_tokens=False):
            enc = self.inner.encode(text, add_special_tokens=add_special_tokens)
            if "中" in text:
                return fastokens.Encoding(list(enc.ids) + [5])
            return enc

    monkeypatch.setattr(fastokens.Tokenizer, "from_json_str", staticmethod(lambda s: Wrong(real(s))))
    t = Tokenizer.load(dsv4_dir)
    assert t.backend == "tokenizers"
    assert t.encode("中文") == tokenizers.Tokenizer.from_file(os.path.join(dsv4_dir, "tokenizer.json")).encode("中文", add_special_tokens=False).ids
    with pytest.raises(RuntimeError):
        Tokenizer.load(dsv4_dir, backend="fastokens")


def test_falls_back_when_fastokens_cannot_load(dsv4_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(s):
        raise ValueError("unsupported")

    monkeypatch.setattr(fastokens.Tokenizer, "from_json_str", staticmethod(boom))
    assert Tokenizer.load(dsv4_dir).backend == "tokenizers"


def test_falls_back_when_the_fastokens_check_raises(dsv4_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def raising(text, add_special_tokens=False):
        raise RuntimeError("boom")

    monkeypatch.setattr(fastokens.Tokenizer, "from_json_str", staticmethod(lambda s: SimpleNamespace(encode=raising)))
    assert Tokenizer.load(dsv4_dir).backend == "tokenizers"


def test_special_tokens_and_vocab(tok: Tokenizer) -> None:
    assert tok.vocab_size == 129280
    assert tok.bos_token == "<｜begin▁of▁sentence｜>" and tok.bos_token_id == 0
    assert tok.eos_token == "<｜end▁of▁sentence｜>" and tok.eos_token_id == 1
    assert tok.pad_token == "<｜end▁of▁sentence｜>"
    assert tok.unk_token is None
    assert {0, 1, 2} <= tok.special_token_ids
    assert tok.token_to_id("<｜User｜>") == 128803
    assert 128803 not in tok.special_token_ids  # added but not special
    assert tok.id_to_token(128803) == "<｜User｜>"
    assert tok.token_to_id("no-such-token-xyz") is None
    assert tok.template_vars() == {
        "bos_token": "<｜begin▁of▁sentence｜>",
        "eos_token": "<｜end▁of▁sentence｜>",
        "pad_token": "<｜end▁of▁sentence｜>",
    }
    assert tok.chat_template and "DeepSeek V4" in tok.chat_template


def test_decode_matches_hf(tok: Tokenizer, dsv4_dir: str) -> None:
    ref = tokenizers.Tokenizer.from_file(os.path.join(dsv4_dir, "tokenizer.json"))
    for text in TEXTS:
        ids = tok.encode(text)
        for skip in (True, False):
            assert tok.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip)
    assert tok.decode(tok.encode(TEXTS[3])) == TEXTS[3]


def test_decode_of_any_ids_matches_hf(tok: Tokenizer, dsv4_dir: str) -> None:
    """The byte-table decode against `tokenizers`' on ids no text produces: split UTF-8
    sequences, special and added tokens, ids past the vocabulary, ids that are no u32."""
    ref = tokenizers.Tokenizer.from_file(os.path.join(dsv4_dir, "tokenizer.json"))
    rng = random.Random(7)
    specials = sorted(tok.special_token_ids) + [128803]
    for _ in range(2000):
        ids = [rng.choice(specials) if rng.random() < 0.2 else rng.randrange(tok.vocab_size + 8)
               for _ in range(rng.randint(0, 12))]
        for skip in (True, False):
            assert tok.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip), ids
    for bad in (-1, 2**32):
        with pytest.raises(OverflowError):
            ref.decode([bad])
        with pytest.raises(OverflowError):
            tok.decode([bad])


def test_decode_pieces_matches_hf_decoder(tok: Tokenizer, dsv4_dir: str) -> None:
    """What vLLM's derender decodes token strings with (`convert_tokens_to_string`)."""
    ref = tokenizers.Tokenizer.from_file(os.path.join(dsv4_dir, "tokenizer.json"))
    rng = random.Random(3)
    for _ in range(1000):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randint(0, 8))]
        pieces = [tok.id_to_token(i) or "" for i in ids]
        assert tok.decode_pieces(pieces) == ref.decoder.decode(pieces), ids


def test_tokenizers_object_released_and_loaded_on_use(dsv4_dir: str) -> None:
    """With fastokens encoding and a byte-level decoder the `tokenizers` object is let go at
    load (workers share ~31 MiB less); the routes that read it get it loaded again."""
    tok = Tokenizer.load(dsv4_dir)
    assert tok.backend == "fastokens" and tok._hf is None
    assert tok.detokenizer_vocab.hf_tokenizer is None
    assert tok.decode(tok.encode(TEXTS[4]), skip_special_tokens=False) == TEXTS[4]
    assert tok.token_to_id("<｜User｜>") == 128803 and tok.id_to_token(1) == "<｜end▁of▁sentence｜>"
    assert tok.decode_pieces(["Hello", "Ġworld"]) == "Hello world"
    assert tok._hf is None  # none of these needed it
    hf = tok.hf_tokenizer
    assert isinstance(hf, tokenizers.Tokenizer) and tok.hf_tokenizer is hf
    assert hf.encode(TEXTS[2], add_special_tokens=False).ids == tok.encode(TEXTS[2])
    kept = Tokenizer.load(dsv4_dir, backend="tokenizers")
    assert kept._hf is not None  # it encodes


def _copy_min(src: str, dst: str) -> str:
    os.makedirs(dst, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, name), dst)
    return dst


def test_generation_eos_ids(dsv4_dir: str, tmp_path) -> None:
    d = _copy_min(dsv4_dir, str(tmp_path / "a"))
    assert Tokenizer.load(d, backend="tokenizers").generation_eos_ids == []
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"eos_token_id": [1, 128803]}, f)
    assert Tokenizer.load(d, backend="tokenizers").generation_eos_ids == [1, 128803]
    # generation_config.json wins over config.json, even without eos ids.
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": 7}, f)
    assert Tokenizer.load(d, backend="tokenizers").generation_eos_ids == [7]
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"temperature": 0.6}, f)
    assert Tokenizer.load(d, backend="tokenizers").generation_eos_ids == []
    assert tokmod._eos_list({"text_config": 3}) == []


def test_chat_template_sources(dsv4_dir: str, tmp_path) -> None:
    d = _copy_min(dsv4_dir, str(tmp_path / "b"))
    cfg_path = os.path.join(d, "tokenizer_config.json")
    cfg = json.load(open(cfg_path))
    cfg["chat_template"] = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    json.dump(cfg, open(cfg_path, "w"))
    assert Tokenizer.load(d, backend="tokenizers").chat_template == "D"
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write("J")
    assert Tokenizer.load(d, backend="tokenizers").chat_template == "J"


def test_materialize_is_idempotent(tmp_path) -> None:
    d = materialize_deepseek_v4(str(tmp_path / "m"))
    stamps = {n: os.stat(os.path.join(d, n)).st_mtime_ns for n in os.listdir(d)}
    assert set(stamps) == {"tokenizer.json", "tokenizer_config.json", "config.json"}
    assert materialize_deepseek_v4(d) == d
    assert {n: os.stat(os.path.join(d, n)).st_mtime_ns for n in os.listdir(d)} == stamps
    cfg = json.load(open(os.path.join(d, "config.json")))
    assert cfg["max_position_embeddings"] > 0 and cfg["eos_token_id"] == 1
