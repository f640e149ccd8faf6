"""Tokenizer: text <-> token ids for one model directory.

Encoding runs on `fastokens` when it reproduces HF `tokenizers` ids exactly on a
check corpus at load time (it is many times faster on long prompts), else on
`tokenizers` itself. Decoding and the incremental detokenizer always follow
`tokenizers`' semantics (see detokenizer.py), so output text never depends on
which encoder was picked.

When fastokens encodes and the decoder is pure byte-level (decoding is then the byte
table of bytelevel.py), nothing on the serving path needs the `tokenizers` object, and it
is released once loaded: it holds ~31 MiB of the DeepSeek V4 tokenizer that every worker
would otherwise share. The few routes that read it (offsets for score truncation,
vLLM's piece-wise derender) load it again on first use.

Special-token metadata comes from ``tokenizer_config.json`` the way
transformers reads it (strings or serialized ``AddedToken`` dicts), and the
extra EOS ids from ``generation_config.json`` / ``config.json`` the way vLLM
reads them.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Callable

import msgspec
import tokenizers

from vllm_pyfrontend.text.bytelevel import build_token_bytes, is_pure_byte_level, token_string_to_bytes
from vllm_pyfrontend.text.detokenizer import DetokenizerVocab, IncrementalDetokenizer
from vllm_pyfrontend.text.prompt_pieces import PIECE_MIN_CHARS, TEXT_MAX_CHARS, PieceCache, safe_anchors

logger = logging.getLogger(__name__)

# Named special tokens transformers (v5) exposes as ``special_tokens_map`` and
# passes to chat templates.
SPECIAL_TOKEN_ATTRIBUTES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)

# Texts the fastokens backend must encode exactly like `tokenizers` before it is
# trusted. Added-token strings are appended at load time.
_CHECK_CORPUS: tuple[str, ...] = (
    "",
    "Hello, world! This is a simple ASCII sentence.",
    "The quick brown fox jumps over the lazy dog 1234567890 times.",
    "  leading spaces, trailing spaces   ",
    "multiple    spaces\tand\ttabs\n\nand\r\nnewlines\n \n  \n",
    "\n\n\n",
    "           ",
    "Ünïcödé àéîõü ñ ß Ω ж й ш ∑ ∫ √ ≠ ≤",
    "中文测试：你好，世界！日本語のテキスト、カタカナ。한국어 문장입니다.",
    "emoji 😀👍🏽 🇺🇸 👨‍👩‍👧‍👦 ❤️ ✨",
    "numbers 3.14159 1e-10 -42 0x1F 100000000000000000",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n\nclass A:\n\tpass\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    '{"key": "value", "list": [true, false, null], "nested": {"x": 1.5}}',
    "<html><body><p>tag soup &amp; entities &lt;</p></body></html>",
    "don't won't I'm you're they'll we've it's",
    "ﬁ ligature, zero\u200bwidth, non\u00a0breaking, combining e\u0301",
    "\u0000\u0001 control chars \u007f",
    "Ｆｕｌｌｗｉｄｔｈ ｜ characters ▁ here",
)


def _token_content(value: Any) -> str | None:
    """A special-token entry of tokenizer_config: a string or an AddedToken dict."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        content = value.get("content")
        return content if isinstance(content, str) else None
    return None


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def _eos_list(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def read_model_chat_template(
    model_dir: str, tokenizer_config: dict[str, Any] | None = None
) -> str | None:
    """A model dir's chat template, as transformers finds it.

    ``chat_template.jinja`` wins over tokenizer_config.json's ``chat_template``;
    a list of named templates yields the one named "default".
    """
    jinja_path = os.path.join(model_dir, "chat_template.jinja")
    if os.path.isfile(jinja_path):
        with open(jinja_path, encoding="utf-8") as f:
            return f.read()
    if tokenizer_config is None:
        tokenizer_config = _read_json(os.path.join(model_dir, "tokenizer_config.json"))
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {
            t.get("name"): t.get("template") for t in template if isinstance(t, dict)
        }
        template = named.get("default")
    return template if isinstance(template, str) else None


class _TokenizerHead(msgspec.Struct):
    """What `Tokenizer.load` reads of tokenizer.json itself (the libraries read the rest)."""

    decoder: Any = None


class Tokenizer:
    """One model's tokenizer; see the module docstring for backend choice."""

    def __init__(
        self,
        path: str,
        hf: tokenizers.Tokenizer,
        fast: Any | None,
        tokenizer_json: dict[str, Any],
        tokenizer_config: dict[str, Any],
        generation_eos_ids: list[int],
        chat_template: str | None,
    ) -> None:
        self.path = path
        self._hf: tokenizers.Tokenizer | None = hf
        self._fast = fast
        self.backend: str = "fastokens" if fast is not None else "tokenizers"
        self.tokenizer_config = tokenizer_config
        self.generation_eos_ids: list[int] = generation_eos_ids
        self.chat_template: str | None = chat_template
        self.model_max_length: int | None = (
            tokenizer_config.get("model_max_length")
            if isinstance(tokenizer_config.get("model_max_length"), int)
            else None
        )

        self._special_tokens: dict[str, str | None] = {
            attr: _token_content(tokenizer_config.get(attr))
            for attr in SPECIAL_TOKEN_ATTRIBUTES
        }
        added = hf.get_added_tokens_decoder()
        self._added_tokens: list[Any] = list(added.values())
        self._normalizer_identity = _normalizer_is_identity(hf)
        self.added_token_ids: dict[int, str] = {i: t.content for i, t in added.items()}
        self.special_token_ids: frozenset[int] = frozenset(
            i for i, t in added.items() if t.special
        )
        self.vocab_size: int = hf.get_vocab_size(with_added_tokens=True)

        # Byte table for the fast detokenizer: only for pure byte-level decoders.
        self.token_bytes: list[bytes] | None = None
        if is_pure_byte_level(tokenizer_json):
            size = max(self.vocab_size, max(added, default=-1) + 1)
            self.token_bytes = build_token_bytes(
                hf.get_vocab(with_added_tokens=True), size
            )

        self.detokenizer_vocab = DetokenizerVocab(
            self.special_token_ids,
            self.added_token_ids,
            self.token_bytes,
            hf if self.token_bytes is None else None,  # (DecodeStream only without the table)
        )

        self._pieces: PieceCache | None = None  # use_prompt_anchors
        if fast is not None:
            self._encode_impl: Callable[[str, bool], list[int]] = (
                lambda text, add: fast.encode(text, add_special_tokens=add).ids
            )
        else:
            self._encode_impl = lambda text, add: hf.encode(
                text, add_special_tokens=add
            ).ids
        # Released where nothing else needs it (see the module docstring; `hf_tokenizer` loads
        # it again): decoding reads the byte table, the vocabulary lookups fastokens (checked).
        self._vocab_lookup: Any = hf
        if fast is not None and self.token_bytes is not None and _same_vocabulary(fast, hf, self.vocab_size):
            self._vocab_lookup = fast
            self._hf = None

    # ------------------------------------------------------------------ load
    @classmethod
    def load(cls, path: str, backend: str = "auto") -> "Tokenizer":
        """Load a model dir (tokenizer.json + tokenizer_config.json).

        ``backend``: "auto" (fastokens when it checks out), "tokenizers" to
        skip fastokens, "fastokens" to require it (raises if it mismatches).
        """
        tok_path = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(tok_path):
            raise FileNotFoundError(f"no tokenizer.json in {path!r}")
        with open(tok_path, encoding="utf-8") as f:
            raw = f.read()
        # Only the decoder is read here: the vocabulary and merges (most of the file) are
        # skipped, not built as Python objects. Built and freed, they left ~25 MiB of
        # fragmented heap behind in the process every worker is forked from.
        tokenizer_json = {"decoder": msgspec.json.decode(raw, type=_TokenizerHead).decoder}
        hf = tokenizers.Tokenizer.from_str(raw)
        tokenizer_config = _read_json(os.path.join(path, "tokenizer_config.json"))

        fast = None
        if backend in ("auto", "fastokens"):
            fast = cls._try_fastokens(raw, hf)
            if fast is None and backend == "fastokens":
                raise RuntimeError("fastokens does not reproduce tokenizers ids here")

        chat_template = read_model_chat_template(path, tokenizer_config)

        return cls(
            path=path,
            hf=hf,
            fast=fast,
            tokenizer_json=tokenizer_json,
            tokenizer_config=tokenizer_config,
            generation_eos_ids=cls._read_generation_eos_ids(path),
            chat_template=chat_template,
        )

    @staticmethod
    def _try_fastokens(raw_json: str, hf: tokenizers.Tokenizer) -> Any | None:
        """A fastokens tokenizer if it matches `tokenizers` on the check corpus."""
        try:
            import fastokens
        except ImportError:
            return None
        try:
            fast = fastokens.Tokenizer.from_json_str(raw_json)
        except Exception as exc:  # unsupported model type, regex, ...
            logger.info("fastokens cannot load this tokenizer: %s", exc)
            return None
        corpus = list(_CHECK_CORPUS)
        added = [t.content for t in hf.get_added_tokens_decoder().values()]
        # Added tokens alone, glued to text, and next to each other.
        sample = added[:64] + added[-64:]
        corpus.append("".join(sample))
        corpus.append(" ".join(sample))
        corpus.extend(f"x{t}y {t}\n{t}" for t in sample[:32])
        corpus.append("\n".join(_CHECK_CORPUS) * 3)
        try:
            for text in corpus:
                for add in (False, True):
                    want = hf.encode(text, add_special_tokens=add).ids
                    got = fast.encode(text, add_special_tokens=add).ids
                    if list(got) != want:
                        logger.warning(
                            "fastokens differs from tokenizers on %r; using tokenizers",
                            text[:60],
                        )
                        return None
        except Exception as exc:
            logger.warning("fastokens check failed (%s); using tokenizers", exc)
            return None
        return fast

    @staticmethod
    def _read_generation_eos_ids(path: str) -> list[int]:
        """EOS ids as vLLM's ``try_get_generation_config`` finds them.

        generation_config.json when present (even without eos_token_id), else
        config.json (``GenerationConfig.from_model_config``, which also looks
        into a nested text_config).
        """
        gen_path = os.path.join(path, "generation_config.json")
        if os.path.isfile(gen_path):
            ids = _eos_list(_read_json(gen_path).get("eos_token_id"))
        else:
            cfg = _read_json(os.path.join(path, "config.json"))
            value = cfg.get("eos_token_id")
            if value is None and isinstance(cfg.get("text_config"), dict):
                value = cfg["text_config"].get("eos_token_id")
            ids = _eos_list(value)
        return list(dict.fromkeys(ids))

    # ------------------------------------------------------------ encode/decode
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        pieces = self._pieces
        if pieces is not None and not add_special_tokens and 2 * PIECE_MIN_CHARS <= len(text) <= TEXT_MAX_CHARS:
            return pieces.encode(text)
        return self._encode_impl(text, add_special_tokens)

    def use_prompt_anchors(self, template_source: str | None) -> bool:
        """Keep the ids of repeated prompt pieces (text/prompt_pieces.py), cut after the added
        tokens that `template_source` (the chat template) writes. Checked against the whole-text
        encoding on the template's own text first; False (and no cache) when there is no safe
        anchor or the check fails."""
        self._pieces = None
        if not template_source:
            return False
        added = self._added_tokens
        present = [t.content for t in added if t.content and t.content in template_source]
        anchors = safe_anchors(added, present, self._normalizer_identity)
        if not anchors:
            return False
        whole = lambda text: self._encode_impl(text, False)  # noqa: E731
        cache = PieceCache(whole, anchors)
        probe = (template_source + "\n") * 3  # every piece seen, then looked up
        for _ in range(3):
            if cache.encode(probe) != whole(probe):
                logger.warning("prompt piece cache disagrees with the tokenizer; not used")
                return False
        self._pieces = cache
        return True

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        table = self.token_bytes
        if table is None:
            return self.hf_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)
        # `tokenizers`' ByteLevel decode: the tokens' bytes joined, invalid UTF-8 replaced;
        # ids past the vocabulary are left out, one that is no u32 is refused as it refuses it.
        skip = self.special_token_ids if skip_special_tokens else ()
        size = len(table)
        parts = []
        for i in ids:
            if not 0 <= i <= 0xFFFFFFFF:
                raise OverflowError(f"number too {'small' if i < 0 else 'large'} to fit in target type")
            if i < size and i not in skip:
                parts.append(table[i])
        return b"".join(parts).decode("utf-8", "replace")

    def with_special_tokens(self, ids: list[int]) -> list[int]:
        """`ids` as vLLM re-encodes a rendered chat prompt asked for `add_special_tokens`: their
        text (special tokens kept) encoded with the tokenizer's special tokens added."""
        return self.encode(self.decode(ids, skip_special_tokens=False), add_special_tokens=True)

    def decode_pieces(self, pieces: list[str]) -> str:
        """Token strings (as `id_to_token` gives them) to text through the tokenizer's decoder,
        as transformers' `convert_tokens_to_string` does; " "-joined without a decoder."""
        if self.token_bytes is not None:  # the ByteLevel decoder (see bytelevel.py)
            return b"".join(map(token_string_to_bytes, pieces)).decode("utf-8", "replace")
        decoder = self.hf_tokenizer.decoder
        return decoder.decode(pieces) if decoder is not None else " ".join(pieces)

    def token_to_id(self, token: str) -> int | None:
        return self._vocab_lookup.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._vocab_lookup.id_to_token(token_id)

    @property
    def hf_tokenizer(self) -> tokenizers.Tokenizer:
        """The underlying `tokenizers.Tokenizer`, loaded again on first use where it was
        released (see the module docstring)."""
        hf = self._hf
        if hf is None:
            logger.info("loading the tokenizers library's tokenizer for %s (first use)", self.path)
            hf = self._hf = tokenizers.Tokenizer.from_file(os.path.join(self.path, "tokenizer.json"))
        return hf

    # --------------------------------------------------------- special tokens
    @property
    def bos_token(self) -> str | None:
        return self._special_tokens["bos_token"]

    @property
    def eos_token(self) -> str | None:
        return self._special_tokens["eos_token"]

    @property
    def pad_token(self) -> str | None:
        return self._special_tokens["pad_token"]

    @property
    def unk_token(self) -> str | None:
        return self._special_tokens["unk_token"]

    @property
    def bos_token_id(self) -> int | None:
        tok = self.bos_token
        return None if tok is None else self.token_to_id(tok)

    @property
    def eos_token_id(self) -> int | None:
        tok = self.eos_token
        return None if tok is None else self.token_to_id(tok)

    def template_vars(self) -> dict[str, Any]:
        """Special tokens as transformers passes them to chat templates."""
        return {k: v for k, v in self._special_tokens.items() if v is not None}

    # ------------------------------------------------------------ streaming
    def new_detokenizer(
        self,
        prompt_ids: list[int] | None = None,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(
            self.detokenizer_vocab,
            prompt_ids=prompt_ids,
            skip_special_tokens=skip_special_tokens,
            spaces_between_special_tokens=spaces_between_special_tokens,
        )


def _normalizer_is_identity(hf: tokenizers.Tokenizer) -> bool:
    norm = hf.normalizer
    if norm is None:
        return True
    probe = "Aa \u00c4\u0041\u0308 \ufb01 \u2460 \u3000\t\r\n  x \u00e9\u0301 \uff21"
    try:
        return norm.normalize_str(probe) == probe
    except Exception:
        return False


def _same_vocabulary(fast: Any, hf: tokenizers.Tokenizer, size: int) -> bool:
    """fastokens maps every id to the token `tokenizers` does, and a sample of tokens back
    (every added token, every 16th id): ~0.1 s for a 129k vocabulary, once per load."""
    try:
        for i in range(size + 1):
            token = hf.id_to_token(i)
            if fast.id_to_token(i) != token:
                return False
            if i % 16 == 0 and token is not None and fast.token_to_id(token) != i:
                return False
        for i, t in hf.get_added_tokens_decoder().items():
            if fast.token_to_id(t.content) != hf.token_to_id(t.content):
                return False
    except Exception as exc:
        logger.warning("fastokens vocabulary check failed (%s); using tokenizers", exc)
        return False
    return True
