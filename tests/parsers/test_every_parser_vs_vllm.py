"""Every tool-call and reasoning parser name vLLM registers, against vLLM's installed parser.

The cases live in ``tests/parsers/cases/`` (one module per family). For each case: our
parser on the whole output gives the expected result; the same under several splits of the
output (one character at a time and random cuts); vLLM's installed parser on the whole output
agrees, unless the case id is in a module's ``DIFFERENCES`` (then it must still differ).
"""

from __future__ import annotations

import json
import logging
import random
from typing import Any

import pytest

from tests.parsers.cases import Loaded, ReasoningCase, ToolCase, load
from tests.parsers.corpus import TOOLS
from tests.parsers.harness import random_char_splits, run_chunks, run_whole
from vllm_pyfrontend.parsers.reasoning import get_reasoning_parser, reasoning_parser_names
from vllm_pyfrontend.parsers.tool import get_tool_parser, tool_parser_names

CASES: Loaded = load()


def _vllm_names(kind: str) -> list[str]:
    if kind == "tool":
        from vllm.tool_parsers import ToolParserManager as manager

        names = {**getattr(manager, "tool_parsers", {}), **getattr(manager, "lazy_parsers", {})}
    else:
        from vllm.reasoning import ReasoningParserManager as manager

        names = {**getattr(manager, "reasoning_parsers", {}), **getattr(manager, "lazy_parsers", {})}
    return sorted(names)


@pytest.fixture(scope="module")
def hf_all(dsv4_dir: str):
    """The test tokenizer with every case module's markers (vLLM's parsers need them)."""
    from tests.parsers.vllm_ref import hf_tokenizer

    hf = hf_tokenizer(dsv4_dir)
    extra = [t for t in CASES.extra_tokens if t not in hf.get_vocab()]
    if extra:
        hf.add_tokens(extra, special_tokens=False)
        vocab = hf.__class__.get_vocab(hf)
        hf.get_vocab = lambda: vocab
    return hf


def _gaps(kind: str) -> list[str]:
    return sorted(k.split(":", 1)[1] for k in CASES.known_gaps if k.startswith(kind + ":"))


def test_every_vllm_tool_parser_name_is_ours() -> None:
    """Every name but the known gaps (each with its reason in a case module's KNOWN_GAPS)."""
    missing = sorted(set(_vllm_names("tool")) - set(tool_parser_names()))
    assert missing == _gaps("tool"), f"vLLM tool parsers we do not register: {missing}"


def test_every_vllm_reasoning_parser_name_is_ours() -> None:
    missing = sorted(set(_vllm_names("reasoning")) - set(reasoning_parser_names()))
    assert missing == _gaps("reasoning"), f"vLLM reasoning parsers we do not register: {missing}"


def test_every_name_has_cases() -> None:
    tool = {c.parser for c in CASES.tool_cases}
    reasoning = {c.parser for c in CASES.reasoning_cases}
    missing = sorted(set(_vllm_names("tool")) - tool - set(_gaps("tool"))) + sorted(
        f"reasoning:{n}" for n in set(_vllm_names("reasoning")) - reasoning - set(_gaps("reasoning"))
    )
    assert not missing, f"parser names without differential cases: {missing}"


class _TemplateTokenizer:
    """A tokenizer whose tokenizer_config.json carries a response_template (the ``hf``
    parsers read it there); everything else is the wrapped tokenizer's."""

    def __init__(self, inner: Any, template: dict[str, Any]) -> None:
        self._inner = inner
        self.tokenizer_config = {**(getattr(inner, "tokenizer_config", None) or {}), "response_template": template}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _with_template(tok: Any, template: dict[str, Any] | None) -> Any:
    return tok if template is None else _TemplateTokenizer(tok, template)


def _splits(text: str, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [list(text)] + [random_char_splits(text, rng) for _ in range(3)]


def _decoded(calls: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    out = []
    for name, args in calls:
        try:
            out.append((name, json.loads(args) if isinstance(args, str) else args))
        except ValueError:
            out.append((name, ("<invalid JSON>", args)))
    return out


@pytest.mark.parametrize("case", CASES.tool_cases, ids=lambda c: c.id)
def test_tool_case(case: ToolCase, hf_all) -> None:
    from tests.parsers.vllm_ref import vllm_tool_calls

    tools = case.tools if case.tools is not None else TOOLS
    make = lambda: get_tool_parser(case.parser, _with_template(None, case.template), tools)  # noqa: E731
    whole = run_whole(make, case.text)
    assert (whole.content, whole.decoded_calls()) == (case.content, case.calls)
    for chunks in _splits(case.text, hash(case.id) & 0xFFFF):
        assert run_chunks(make, chunks).key() == whole.key(), chunks

    logging.disable(logging.ERROR)  # vLLM logs tracebacks for malformed output
    try:
        if case.template is not None:  # `hf`: the checkpoint's response_template
            from tests.parsers.vllm_ref import vllm_response_template

            _, v_content, v_calls = vllm_response_template(
                hf_all, case.template, tools, case.text, reasoning=False, tools_on=True
            )
        else:
            v_content, v_calls = vllm_tool_calls(case.parser, hf_all, tools, case.text)
    finally:
        logging.disable(logging.NOTSET)
    same = (v_content.strip(), _decoded(v_calls)) == (case.content.strip(), case.calls)
    if case.id in CASES.differences:
        assert not same, f"{case.id}: vLLM now agrees; remove the DIFFERENCES entry"
    else:
        assert same, f"undocumented difference: vLLM gives {(v_content, v_calls)!r}"


@pytest.mark.parametrize("case", CASES.reasoning_cases, ids=lambda c: c.id)
def test_reasoning_case(case: ReasoningCase, hf_all, tok) -> None:
    from tests.parsers.vllm_ref import vllm_reasoning

    rtok = _with_template(tok, case.template)
    make = lambda: get_reasoning_parser(case.parser, rtok, template_kwargs=case.kwargs)  # noqa: E731
    whole = run_whole(make, case.text)
    assert (whole.reasoning, whole.content) == (case.reasoning, case.content)
    for chunks in _splits(case.text, hash(case.id) & 0xFFFF):
        assert run_chunks(make, chunks).key() == whole.key(), chunks

    if case.template is not None:  # `hf`: the checkpoint's response_template
        from tests.parsers.vllm_ref import vllm_response_template

        v_reasoning, v_content, _ = vllm_response_template(
            hf_all, case.template, None, case.text, reasoning=True, tools_on=False
        )
    else:
        v_reasoning, v_content = vllm_reasoning(case.parser, hf_all, case.text, case.kwargs)
    same = (v_reasoning, v_content) == (case.reasoning, case.content)
    if case.id in CASES.differences:
        assert not same, f"{case.id}: vLLM now agrees; remove the DIFFERENCES entry"
    else:
        assert same, f"undocumented difference: vLLM gives {(v_reasoning, v_content)!r}"
