"""vLLM's own parsers (installed `vllm.tool_parsers`, `vllm.reasoning`) on our corpus."""

from __future__ import annotations

import functools
import json
import warnings
from typing import Any

#: markers of the non-DeepSeek formats, added to the DeepSeek V4 tokenizer so
#: that vLLM's parsers (which look their markers up in the vocab) can load.
EXTRA_TOKENS = [
    "<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]",
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_end|>", "<|tool_call_argument_begin|>", "<minimax:tool_call>",
    "</minimax:tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
    "<function=", "</function>", "<parameter=", "</parameter>",
]  # fmt: skip


def hf_tokenizer(model_dir: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = PreTrainedTokenizerFast.from_pretrained(model_dir)
    hf.add_tokens(EXTRA_TOKENS, special_tokens=False)
    # vLLM's parsers call get_vocab() per instance and per lookup; the dict is
    # the same every time, so build it once (129k entries).
    vocab = hf.get_vocab()
    hf.get_vocab = lambda: vocab
    return hf


def chat_request(tools: list[dict[str, Any]] | None, kwargs: dict[str, Any] | None = None) -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=tools,
        chat_template_kwargs=kwargs,
    )


def vllm_tool_calls(name: str, hf: Any, tools: list[dict[str, Any]], text: str) -> tuple[str, list[tuple[str, Any]]]:
    """vLLM's non-streaming result: (content or "", [(name, decoded args)])."""
    from vllm.tool_parsers import ToolParserManager

    if name == "openai":  # gpt-oss: vLLM's parser is a stub, HarmonyParser does the work
        _, content, calls = vllm_harmony(hf, tools, text, reasoning=False, tools_on=True)
        return content, calls
    request = chat_request(tools)
    cls = ToolParserManager.get_tool_parser(name)
    preset = getattr(cls, "melody_preset", None)
    if preset is not None:
        # Cohere Command: vLLM's parser is cohere_melody's filter (what
        # vllm.parser.cohere_command.CohereCommandParser.parse runs)
        from cohere_melody import PyFilter, PyFilterOptions

        result = PyFilter(getattr(PyFilterOptions(), preset)()).process_full_text(text)
        melody_calls = []
        for t in result.tool_calls:
            try:
                melody_calls.append((t.name, json.loads(t.arguments)))
            except ValueError:
                melody_calls.append((t.name, ("<invalid JSON>", t.arguments)))
        return result.content or "", melody_calls
    # the request's tool objects, as vLLM's server passes them (some parsers,
    # e.g. hy_v4, read attributes and fail on plain dicts)
    parser = cls(hf, request.tools)
    try:
        info = parser.extract_tool_calls(text, request)
    except Exception as exc:  # a crash is a result too (cases pin it in DIFFERENCES)
        return f"<vLLM raised {type(exc).__name__}>", []
    calls = []
    for t in info.tool_calls:
        try:
            args = json.loads(t.function.arguments)
        except ValueError:
            args = ("<invalid JSON>", t.function.arguments)
        calls.append((t.function.name, args))
    return info.content or "", calls


def vllm_reasoning(
    name: str, hf: Any, text: str, kwargs: dict[str, Any] | None
) -> tuple[str, str]:
    """vLLM's non-streaming split: (reasoning or "", content or "")."""
    from vllm.reasoning import ReasoningParserManager

    if name == "openai_gptoss":  # gpt-oss: vLLM's parser is a stub, HarmonyParser does the work
        reasoning, content, _ = vllm_harmony(hf, None, text, reasoning=True, tools_on=False)
        return reasoning, content
    if name in COMPOSED_REASONING:
        return _vllm_composed_reasoning(name, hf, text, kwargs)
    cls = ReasoningParserManager.get_reasoning_parser(name)
    parser = cls(hf, chat_template_kwargs=kwargs or {})
    reasoning, content = parser.extract_reasoning(text, chat_request(None, kwargs))
    return reasoning or "", content or ""


#: reasoning parsers whose split vLLM does in the composed parser (ParserManager),
#: not in the ReasoningParser class (its extract_reasoning is a stub there)
COMPOSED_REASONING = {"cohere_command3", "cohere_command4", "kimi_k3", "minicpmv"}


def _vllm_composed_reasoning(
    name: str, hf: Any, text: str, kwargs: dict[str, Any] | None
) -> tuple[str, str]:
    from vllm.parser.parser_manager import ParserManager

    cls = ParserManager.get_parser(reasoning_parser_name=name)
    parser = cls(hf, None, chat_template_kwargs=kwargs or {})
    reasoning, content, _ = parser.parse(text, chat_request(None, kwargs))
    return reasoning or "", content or ""


def vllm_tool_calls_streaming(
    name: str, hf: Any, tools: list[dict[str, Any]], chunks: list[str], chunk_ids: list[list[int]]
) -> tuple[str, list[tuple[str, str]]]:
    """vLLM's streaming result, accumulated the way a client does:
    (content, [(name, arguments text)])."""
    from vllm.tool_parsers import ToolParserManager

    parser = ToolParserManager.get_tool_parser(name)(hf, tools)
    request = chat_request(tools)
    prev_text = ""
    prev_ids: list[int] = []
    content = ""
    calls: dict[int, list[str]] = {}

    def take(delta: Any) -> None:
        nonlocal content
        if delta is None:
            return
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            slot = calls.setdefault(tc.index, ["", ""])
            if tc.function is not None:
                slot[0] += tc.function.name or ""
                slot[1] += tc.function.arguments or ""

    for text, ids in zip(chunks, chunk_ids):
        cur_text = prev_text + text
        cur_ids = prev_ids + ids
        try:
            take(
                parser.extract_tool_calls_streaming(
                    prev_text, cur_text, text, prev_ids, cur_ids, ids, request
                )
            )
        except Exception as exc:  # a crash is a result too
            content += f"<vLLM raised {type(exc).__name__}>"
        prev_text, prev_ids = cur_text, cur_ids
    finish = getattr(parser, "finish_streaming", None)
    if finish is not None:
        take(finish())
    return content, [(n, a) for _, (n, a) in sorted(calls.items())]


def vllm_harmony(
    hf: Any, tools: list[dict[str, Any]] | None, text: str, *, reasoning: bool, tools_on: bool
) -> tuple[str, str, list[tuple[str, Any]]]:
    """vLLM's gpt-oss result (HarmonyParser over the harmony tokens of ``text``):
    (reasoning or "", content or "", [(name, decoded args)])."""
    from vllm.parser.harmony import HarmonyParser
    from vllm.reasoning.gptoss_reasoning_parser import GptOssReasoningParser
    from vllm.tool_parsers.gptoss_tool_parser import GptOssToolParser

    cls = type(
        "HarmonyRef",
        (HarmonyParser,),
        {
            "reasoning_parser_cls": GptOssReasoningParser if reasoning else None,
            "tool_parser_cls": GptOssToolParser if tools_on else None,
        },
    )
    request = chat_request(tools)
    parser = cls(hf, request.tools)
    enc = _harmony_encoding()

    class _GptOssTokenizer:  # vLLM decodes unparsable output with the model's (gpt-oss's) tokenizer
        decode = staticmethod(lambda ids, **_: enc.decode(list(ids)))

    parser.model_tokenizer = _GptOssTokenizer()
    ids = enc.encode(text, allowed_special="all")
    r, content, fcalls = parser.parse(text, request, model_output_token_ids=ids)
    calls = []
    for f in fcalls or []:
        try:
            args = json.loads(f.arguments)
        except ValueError:
            args = ("<invalid JSON>", f.arguments)
        calls.append((f.name, args))
    return r or "", content or "", calls


@functools.cache
def _harmony_encoding() -> Any:
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def vllm_response_template(
    hf: Any,
    template: dict[str, Any],
    tools: list[dict[str, Any]] | None,
    text: str,
    *,
    reasoning: bool,
    tools_on: bool,
    prompt: str = "",
    chunks: list[str] | None = None,
) -> tuple[str, str, list[tuple[str, Any]]]:
    """vLLM's ``hf`` parsers (ResponseTemplateParser, the composed parser that does the work
    for both names) with ``template`` as the tokenizer's response_template: (reasoning or "",
    content or "", [(name, decoded args)]). ``prompt``: the decoded prompt (the prefix);
    ``chunks``: stream ``text`` in these pieces (parse_delta) instead of parsing it whole."""
    from vllm.parser.response_template import (
        ResponseTemplateParser,
        ResponseTemplateReasoningParser,
        ResponseTemplateToolParser,
    )

    cls = type(
        "ResponseTemplateRef",
        (ResponseTemplateParser,),
        {
            "reasoning_parser_cls": ResponseTemplateReasoningParser if reasoning else None,
            "tool_parser_cls": ResponseTemplateToolParser if tools_on else None,
            "_enable_auto_tools": True,
        },
    )
    request = chat_request(tools)
    parser = cls(hf, request.tools, response_template=template)
    parser._prefix = prompt  # what set_prompt_token_ids decodes from the prompt's ids
    parser._prompt_token_ids = []
    if chunks is None:
        r, content, fcalls = parser.parse(text, request, enable_auto_tools=True)
        calls = [(f.name, f.arguments) for f in fcalls or []]
    else:
        r, content, by_index = "", "", {}
        for k, piece in enumerate(chunks):
            d = parser.parse_delta(piece, [], request, finished=k == len(chunks) - 1)
            if d is None:
                continue
            r += d.reasoning or ""
            content += d.content or ""
            for tc in d.tool_calls or []:
                slot = by_index.setdefault(tc.index, ["", ""])
                slot[0] += tc.function.name or ""
                slot[1] += tc.function.arguments or ""
        calls = [tuple(by_index[i]) for i in sorted(by_index)]
    out = []
    for name, args in calls:
        try:
            out.append((name, json.loads(args)))
        except ValueError:
            out.append((name, ("<invalid JSON>", args)))
    return r or "", content or "", out
