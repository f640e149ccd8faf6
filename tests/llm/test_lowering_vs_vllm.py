"""Request-level lowering helpers checked against vLLM's own implementations."""

from __future__ import annotations

import pytest

from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.llm.prompt import bad_words_token_ids, truncate_prompt
from vllm_pyfrontend.llm.structured import choice_as_grammar
from vllm_pyfrontend.supervisor.demo_model import materialize_deepseek_v4
from vllm_pyfrontend.text.tokenizer import Tokenizer

vllm_utils = pytest.importorskip("vllm.v1.structured_output.utils")


@pytest.mark.parametrize("choices", [["yes", "no"], ['a"b', "c\\d", "x\ny", "\x01z\x7f"], ["unicode ✓", "tab\tx"]])
def test_choice_grammar_matches_vllm(choices):
    assert choice_as_grammar(choices) == vllm_utils.choice_as_grammar(choices)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return Tokenizer.load(materialize_deepseek_v4(str(tmp_path_factory.mktemp("dsv4"))))


def test_bad_words_match_vllm(tokenizer):
    from vllm.sampling_params import SamplingParams

    words = ["the", "sea", " waves", "Hello world", "ünïcode"]

    class Tok:  # the slice of vLLM's TokenizerLike that update_from_tokenizer reads
        max_token_id = tokenizer.vocab_size - 1

        def encode(self, text, add_special_tokens=False):
            return tokenizer.encode(text, add_special_tokens=add_special_tokens)

    sp = SamplingParams(bad_words=words)
    sp.update_from_tokenizer(Tok())
    ours = bad_words_token_ids(tokenizer.encode, words, tokenizer.vocab_size)
    assert ours == sp._bad_words_token_ids


def test_bad_words_that_tokenize_to_nothing_are_refused(tokenizer):
    with pytest.raises(InvalidRequestError) as e:
        bad_words_token_ids(tokenizer.encode, [""], tokenizer.vocab_size)
    assert e.value.param == "bad_words"


def test_truncate_prompt_keeps_the_end():
    ids = list(range(10))
    assert truncate_prompt(ids, None, 100) == ids
    assert truncate_prompt(ids, 3, 100) == [7, 8, 9]
    assert truncate_prompt(ids, -1, 4) == [6, 7, 8, 9]
    assert truncate_prompt(ids, 50, 100) == ids
