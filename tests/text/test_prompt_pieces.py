"""The prompt piece cache (text/prompt_pieces.py) gives exactly the tokenizer's ids for the
whole text, on the real DeepSeek V4 tokenizer (both encoders) and on tokenizers built here whose
added tokens would break a careless cut."""

from __future__ import annotations

import random

import pytest
import tokenizers
from tokenizers import AddedToken, models, pre_tokenizers

from vllm_pyfrontend.chat.template import load_chat_template
from vllm_pyfrontend.text import prompt_pieces
from vllm_pyfrontend.text.prompt_pieces import PieceCache, safe_anchors
from vllm_pyfrontend.text.tokenizer import Tokenizer

WORDS = [" the", " tool", "\n", "\n\n", " ", "  ", "é", "中文", "😀", "<", "｜", "##", "name=\"x\"", "{", "}", "\t"]


def _random_prompts(rng: random.Random, frames: list[str], anchors: list[str], others: list[str], n: int) -> list[str]:
    """Texts made of repeated frames, anchors, other added tokens and words, with whitespace
    and look-alike text right next to the anchors."""
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.3:
                parts.append(rng.choice(frames))
            elif r < 0.5:
                parts.append(rng.choice(anchors))
            elif r < 0.6 and others:
                parts.append(rng.choice(others))
            elif r < 0.7:
                a = rng.choice(anchors)
                parts.append(a[: rng.randint(1, len(a))])  # a piece of an anchor
            else:
                parts.append("".join(rng.choice(WORDS) for _ in range(rng.randint(1, 80))))
        texts.append("".join(parts))
    return texts


@pytest.fixture(scope="module")
def dsv4_template(dsv4_dir):
    return load_chat_template(dsv4_dir)


@pytest.mark.parametrize("backend", ["fastokens", "tokenizers"])
def test_equals_the_whole_text_encoding_on_deepseek_v4(dsv4_dir, dsv4_template, backend):
    tok = Tokenizer.load(dsv4_dir, backend=backend)
    assert tok.use_prompt_anchors(dsv4_template.source)
    anchors = list(tok._pieces._anchors.pattern.replace("\\", "").split("|"))
    assert "<｜User｜>" in anchors and "<｜Assistant｜>" in anchors
    others = [c for c in tok.added_token_ids.values() if c not in anchors][:200]
    rng = random.Random(7)
    frames = [dsv4_template.render([{"role": "system", "content": "You are terse. " * rng.randint(5, 30)},
                                    {"role": "user", "content": "hi"}])[:-10] for _ in range(4)]
    texts = _random_prompts(rng, frames, anchors, others, 600)
    looked_up = 0
    for text in texts + texts:  # the second time, the repeated pieces are looked up
        before = len(tok._pieces._ids)
        assert tok.encode(text) == tok._encode_impl(text, False), text
        looked_up += len(tok._pieces._ids) > before
    assert looked_up > 20


def test_a_repeated_prompt_frame_is_encoded_once(dsv4_dir, dsv4_template):
    tok = Tokenizer.load(dsv4_dir)
    assert tok.use_prompt_anchors(dsv4_template.source)
    tools = [{"type": "function", "function": {"name": "f", "description": "d " * 200, "parameters": {}}}]
    texts = [dsv4_template.render([{"role": "user", "content": f"question {i} " * 3}], tools=tools) for i in range(5)]
    real = tok._pieces._encode
    encoded = []  # per text: the lengths of the texts the tokenizer was given
    tok._pieces._encode = lambda text: encoded[-1].append(len(text)) or real(text)
    for text in texts:
        encoded.append([])
        assert tok.encode(text) == tok._encode_impl(text, False)
    # First sighting: encoded whole; second: the frame's pieces encoded on their own and kept,
    # then the rest; after that only the question and what follows it is encoded.
    frame = texts[0].index("<｜User｜>") + len("<｜User｜>")
    assert encoded[0] == [len(texts[0])]
    assert sum(encoded[1]) == len(texts[1]) and len(encoded[1]) >= 2
    assert all(sum(e) == len(texts[0]) - frame for e in encoded[2:]), encoded


def _word_level(added: list[AddedToken]) -> tokenizers.Tokenizer:
    vocab = {"[UNK]": 0, **{ch: i + 1 for i, ch in enumerate("abcdefghij xyz<>|/[]")}}
    for w in ("ab", "abc", "<x", "x>", "<xy", "ab|", "xy", "y["):
        vocab.setdefault(w, len(vocab))
    hf = tokenizers.Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    hf.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    hf.add_tokens(added)
    return hf


def test_only_anchors_the_tokenizer_certainly_splits_at():
    added = [
        AddedToken("<A>", normalized=False),  # safe
        AddedToken("<B>", normalized=False, rstrip=True),  # eats the spaces after it
        AddedToken("<C>", normalized=False),  # inside "<C>x" below
        AddedToken("<C>x", normalized=False),
        AddedToken("[D]", normalized=False),  # "y[" ends where "[D]" begins
        AddedToken("y[", normalized=False),
        AddedToken("]a", normalized=False),  # (shows the difference below)
        AddedToken("<E>", normalized=True),  # fine here: no normalizer
    ]
    hf = _word_level(added)
    got = safe_anchors(hf.get_added_tokens_decoder().values(), ["<A>", "<B>", "<C>", "[D]", "<E>"], True)
    assert sorted(got) == ["<A>", "<E>"]
    assert safe_anchors(hf.get_added_tokens_decoder().values(), ["<E>"], False) == []
    # Cutting after each refused one would change the ids: the rules are needed.
    enc = lambda t: hf.encode(t, add_special_tokens=False).ids  # noqa: E731
    for text, cut in (("ab  <B>  ab", "ab  <B>"), ("a<C>x b", "a<C>"), ("xy[D]ab", "xy[D]")):
        assert enc(text) != enc(cut) + enc(text[len(cut):]), text


def test_equals_the_whole_text_encoding_with_tricky_added_tokens(monkeypatch):
    monkeypatch.setattr(prompt_pieces, "PIECE_MIN_CHARS", 4)
    added = [AddedToken(c, normalized=False) for c in ("<A>", "<C>", "<C>x", "[D]", "y[", "ab|")]
    added.append(AddedToken("<B>", normalized=False, lstrip=True, rstrip=True))
    hf = _word_level(added)
    enc = lambda t: hf.encode(t, add_special_tokens=False).ids  # noqa: E731
    contents = [t.content for t in hf.get_added_tokens_decoder().values()]
    anchors = safe_anchors(hf.get_added_tokens_decoder().values(), contents, True)
    assert sorted(anchors) == ["<A>", "<C>x", "ab|", "y["]  # not "<C>" (inside "<C>x"), "[D]" ("y[")
    cache = PieceCache(enc, anchors)
    rng = random.Random(3)
    frames = ["abc<A>xyz<A>", "<A>ab ab ab<A>", "y[D]<A>ab|<A>", "<C>x<A> <B> ab|ab|"]
    texts = _random_prompts(rng, frames, contents, [], 800)
    for text in texts + texts:
        assert cache.encode(text) == enc(text), text
    assert cache._ids  # pieces were looked up
