"""Split invariance of every registered parser: however the output is cut into chunks, the
result is the one of feeding it whole.

Enumerated from the registries at collection time, so a newly registered name is covered
without touching this file: every ``--tool-call-parser`` name (aliases included: every name
`tool_parser_names()` lists), every ``--reasoning-parser`` name, and reasoning + tool composed
(`make_assistant_stream`) for every name registered as both (and gpt-oss's pair).

Samples per name (built lazily, once per name):

- tool parsers: the format's renderer (tests/parsers/corpus.py, render_more.py, the case
  modules; for a name with none, one written for a name on the same format class, else the
  first renderer whose one and two calls the name parses as written) on one call, two, three,
  nested/escaped, unicode, empty arguments, a ~2,000-character string argument (quotes,
  backslashes, tags, newlines, unicode) alone and between text and a second call, text
  before/after, two sections with text between, and malformed outputs (truncated, only the
  start, unclosed inside the long argument, last characters cut off, garbage inside, start
  written twice); the corpus' own malformed outputs; every case text of tests/parsers/cases
  for the name (with its tools and response_template); where no renderer fits, a case's
  "Paris" widened to ~2,000 characters; random mixtures of the format's markers and fragments
  (as test_fuzz.py builds them);
- reasoning parsers: outputs built from the parser's own markers, read off the parser for no
  kwargs, thinking asked for and thinking switched off (reasoning + content, no start marker,
  unclosed, ~1,000-character reasoning and content, stray end, two blocks, cut end marker,
  whitespace around, empty reasoning, framing markers); every case text for the name; where
  the parser has no such markers (harmony, ``hf``), a case's reasoning and content widened;
  random mixtures of markers and case fragments;
- pipelines: the name's reasoning markers, then the tool format's call(s).

Splits: for every sample, token-sized chunks (1 to 6 characters, seeded) and one character per
chunk (left out for the long texts other than the long argument alone, and for case texts,
whose one-character split test_every_parser_vs_vllm.py runs); for samples shorter than
``ALL_CUTS_BELOW`` characters also random cuts (seeded), and every single cut point for the
standard ones (single call, text before/after, truncated; the reasoning marker texts under
the first kwargs that give reasoning; the first case text of a name; reasoning + single
call). On top, hypothesis draws samples and splits (any set of cut points, or cycled token
sizes) for every name, derandomized so that CI is stable (``SPLIT_INVARIANCE_EXAMPLES=N``
raises the count per name, ``SPLIT_INVARIANCE_RANDOM=1`` draws fresh ones); seeded random
splits without hypothesis.

What must not depend on the split: the final result (content, reasoning, each call's name and
decoded arguments, the parser's call count) and the concatenated streams (content deltas
joined, reasoning deltas joined, each call's argument deltas joined, compared as exact text);
every run also keeps the OpenAI delta contract (harness.check_contract).

A counterexample found here is not fixed in this file (frontend/ is the parsers' owners'):
it goes into ``KNOWN`` (sample and cut points) and ``MINIMAL`` (the smallest text found), is
left out of the sweeps, and runs as ``xfail(strict=True)`` in `test_known_counterexample`, so
that a fix shows up as an XPASS to remove the entry.
"""

from __future__ import annotations

import functools
import json
import os
import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pytest

from tests.parsers import corpus
from tests.parsers.cases import load
from tests.parsers.corpus import EMPTY, NESTED, ONE, PARALLEL, PLAIN, RENDER, TOOLS, UNICODE
from tests.parsers.harness import collect, random_char_splits, split_at
from tests.parsers.render_more import MORE
from vllm_pyfrontend.parsers.pipeline import make_assistant_stream
from vllm_pyfrontend.parsers.reasoning import get_reasoning_parser, reasoning_parser_names
from vllm_pyfrontend.parsers.tool import get_tool_parser, tool_markers, tool_parser_names
from vllm_pyfrontend.parsers.tool.base import ToolFormat
from vllm_pyfrontend.parsers.tool.registry import tool_format

try:  # a test dependency (pyproject's `test` extra); seeded random splits without it
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None  # type: ignore[assignment]

#: every cut point is tried for outputs shorter than this
ALL_CUTS_BELOW = 200
#: case texts per name split at every cut point (the others: the cheaper splits only)
FULL_CASES = 1
#: hypothesis examples per parser name
EXAMPLES = int(os.environ.get("SPLIT_INVARIANCE_EXAMPLES", "6"))
DERANDOMIZE = os.environ.get("SPLIT_INVARIANCE_RANDOM", "") in ("", "0")

# ------------------------------------------------------------------ enumeration
TOOL_NAMES: list[str] = tool_parser_names()
REASONING_NAMES: list[str] = reasoning_parser_names()
#: (reasoning name, tool name) composed in one stream: every name registered as both, and
#: gpt-oss's harmony pair
PIPELINES: list[tuple[str, str]] = sorted((n, n) for n in set(TOOL_NAMES) & set(REASONING_NAMES))
if "openai" in TOOL_NAMES and "openai_gptoss" in REASONING_NAMES:
    PIPELINES.append(("openai_gptoss", "openai"))

WELL_KNOWN_TOOL = {"hermes", "deepseek_v4", "pythonic", "qwen3_coder", "openai"}
WELL_KNOWN_REASONING = {"deepseek_r1", "qwen3", "deepseek_v4", "openai_gptoss"}

CASES = load()

# ------------------------------------------------------------------ long values
#: ~2,000 characters of code: quotes, backslashes, tags, braces, unicode, newlines
_LINE = 'if a < b and s == "x\\\\y": print(f"{a}</p>") # 杭州 😀\n'
CODE = "".join(f"{i}: {_LINE}" for i in range(40))[:2000]
LONG: corpus.Calls = [("run_code", {"code": CODE})]
#: ~2,000 characters any format carries verbatim (no quotes, backslashes, tags, newlines)
PLAIN_LONG = ("Lorem ipsum, dolor sit amet; 杭州 😀 Ünïcödé 42 + 17 = 59. " * 40)[:2000]
#: ~1,000 characters of prose for reasoning / content (reasoning + content: ~2,000)
PROSE = ("First, 1 < 2 and 3 > 2; {not json} [x] 杭州 😀.\nThen more text, line after line. " * 15)[:1000]
TWO = PARALLEL[:2]

# ------------------------------------------------------------------ samples


@dataclass(frozen=True, eq=False)  # hashed by identity (tools are lists)
class Sample:
    id: str
    text: str
    #: the request's tools (None: corpus.TOOLS)
    tools: Any = None
    #: the checkpoint's response_template (the ``hf`` parsers)
    template: Any = None
    #: chat_template_kwargs
    kwargs: Any = None
    #: every cut point is tried (when shorter than ALL_CUTS_BELOW); else only the one
    #: character per chunk, token-sized and random splits
    full: bool = True
    #: the one-character-per-chunk split (off for the case texts that are not ``full``:
    #: test_every_parser_vs_vllm.py runs that split on every case text)
    one_char: bool = True


class _TemplateTokenizer:
    """No tokenizer, only a tokenizer_config.json with a response_template (``hf``)."""

    def __init__(self, template: dict[str, Any]) -> None:
        self.tokenizer_config = {"response_template": template}


def _tok(template: Any) -> Any:
    return None if template is None else _TemplateTokenizer(template)


def _tools(s: Sample) -> Any:
    return TOOLS if s.tools is None else s.tools


def _factory(kind: str, name: Any, s: Sample) -> Callable[[], Any]:
    if kind == "tool":
        return lambda: get_tool_parser(name, _tok(s.template), _tools(s))
    if kind == "reasoning":
        return lambda: get_reasoning_parser(name, _tok(s.template), template_kwargs=s.kwargs)
    rname, tname = name
    return lambda: make_assistant_stream(rname, tname, _tok(s.template), None, s.kwargs, _tools(s))


def _harmony(calls: corpus.Calls) -> str:
    from tests.parsers.cases.harmony import THINK, call

    return THINK + "".join(call(n, a) for n, a in calls)


def _renderers() -> dict[str, Callable[[corpus.Calls], str]]:
    """Every renderer the test corpora have, by the parser name it was written for."""
    from tests.parsers.cases import tool_names_apertus_to_kimi as a_k, xml_more

    out: dict[str, Callable[[corpus.Calls], str]] = {**RENDER, **MORE}
    out.update({
        "dots": a_k.dots, "hy_v4": a_k.hy(""), "k2_horizon": a_k.k2_horizon, "glm47": a_k.glm47,
        "minicpm5": xml_more.minicpm5, "minimax_m3": xml_more.minimax_m3, "openai": _harmony,
    })  # fmt: skip
    return out


RENDERERS = _renderers()


@dataclass
class Observed:
    """One run: the concatenated streams (content deltas joined, reasoning deltas joined,
    each call's name and argument deltas joined) and the parser's call count."""

    content: str
    reasoning: str
    calls: list[tuple[str, str]]
    n_calls: Any

    def final(self) -> dict[str, Any]:
        """The final result: what a non-streaming response holds (arguments decoded)."""
        decoded: list[tuple[str, Any]] = []
        for name, args in self.calls:
            try:
                decoded.append((name, json.loads(args)))
            except ValueError:
                decoded.append((name, ("<invalid JSON>", args)))
        return {"content": self.content, "reasoning": self.reasoning, "calls": decoded, "n_calls": self.n_calls}

    def streams(self) -> dict[str, Any]:
        return {"content": self.content, "reasoning": self.reasoning, "calls": self.calls}


def _observe(make: Callable[[], Any], chunks: Sequence[str]) -> Observed:
    """Feed ``chunks`` to a fresh parser, then finish (the delta contract is checked)."""
    p = make()
    deltas = [p.feed(c) for c in chunks]
    deltas.append(p.finish())
    res, _ = collect(deltas)
    n_calls = getattr(p, "n_tool_calls", None)
    if n_calls is None:
        n_calls = getattr(p, "n_calls", None)
    return Observed(res.content, res.reasoning, [(name, args) for name, args, _ in res.calls], n_calls)


def _parses_as(kind: str, name: str, s: Sample, want: corpus.Calls) -> bool:
    try:
        final = _observe(_factory(kind, name, s), [s.text]).final()
    except Exception:
        return False
    return final["calls"] == [(n, a) for n, a in want]


def _find_renderers(name: str, template: Any) -> list[tuple[str, Callable[[corpus.Calls], str]]]:
    """The name's own renderer; else one written for a name on the same format class; else
    the first renderer whose single and parallel calls this name parses as written."""
    if template is None and name in RENDERERS:
        return [(name, RENDERERS[name])]
    if template is None:
        try:
            cls = type(tool_format(name))
        except Exception:
            cls = ToolFormat
        if cls is not ToolFormat:
            for other, r in RENDERERS.items():
                try:
                    same = type(tool_format(other)) is cls
                except Exception:
                    same = False
                if same and _parses_as("tool", name, Sample("", r(ONE)), ONE):
                    return [(other, r)]
    for other, r in RENDERERS.items():
        if _parses_as("tool", name, Sample("", r(ONE), template=template), ONE) and _parses_as(
            "tool", name, Sample("", r(TWO), template=template), TWO
        ):
            return [(other, r)]
    return []


def _rendered(prefix: str, r: Callable[[corpus.Calls], str]) -> list[tuple[str, str, bool, bool]]:
    """(id, text, every cut point?, one character per chunk?) of the format's standard outputs
    (of the long ones, only the long argument alone is also split one character at a time)."""
    one, long = r(ONE), r(LONG)
    out = [
        ("single", one, True),
        ("two_calls", r(TWO), False),
        ("parallel", r(PARALLEL), False),
        ("nested_escaped", r(NESTED), False),
        ("unicode", r(UNICODE), False),
        ("empty_args", r(EMPTY), False),
        ("long_arg", long, False),
        ("text_around_long_arg_then_call", "Sure, writing it.\n" + r(LONG + ONE) + "\nDone.", False),
        ("text_before_after", "Let me check.\n\n" + one + "\n\nDone: 杭州.", True),
        ("two_sections_text_between", one + " and " + r(EMPTY), False),
        ("malformed_truncated", one[: len(one) * 2 // 3], True),
        ("malformed_only_start", one[: max(1, len(one) // 6)], False),
        ("malformed_unclosed_long", long[: len(long) // 2], False),
        ("malformed_last_char_cut", one[:-1], False),
        ("malformed_tail_cut", one[:-8], False),
        ("malformed_garbage_inside", one[: len(one) // 2] + '}{<oops "\\' + one[len(one) // 2 :], False),
        ("malformed_start_twice", one[: len(one) // 3] + one, False),
        ("plain", PLAIN, False),
    ]
    return [(f"{prefix}:{k}", t, full, k == "long_arg" or len(t) < ALL_CUTS_BELOW) for k, t, full in out]


def _fuzz_texts(seed: str, alphabet: list[str], n: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(2, 14))) for _ in range(n)]


_PIECES = [" ", "\n", "x", "{", "}", '"', "<", ">", "\\", "杭州", ":", ",", "[", "]", "|"]


def _fragments(texts: list[str], width: int = 7) -> list[str]:
    return [t[k : k + width] for t in texts for k in range(0, len(t), width)]


@functools.cache
def tool_samples(name: str) -> tuple[Sample, ...]:
    cases = [c for c in CASES.tool_cases if c.parser == name]
    out: list[Sample] = []
    templates = [None] if not any(c.template for c in cases) else []
    for c in cases:
        if c.template is not None and c.template not in templates:
            templates.append(c.template)
    found = []
    for k, template in enumerate(templates):
        for rname, r in _find_renderers(name, template):
            found.append(r)
            prefix = f"render[{rname}]" + (f"[template{k}]" if template is not None else "")
            out += [Sample(i, t, template=template, full=full, one_char=one)
                    for i, t, full, one in _rendered(prefix, r)]
    if name in RENDER:  # the corpus' own malformed outputs ("broken") for this format
        out += [Sample(f"corpus:{c.name}", c.text) for c in corpus.cases(name) if c.malformed]
    out += _case_samples([Sample(f"case:{c.name}", c.text, c.tools, c.template) for c in cases], out)
    # a long value in the name's own cases, where no renderer makes one
    widened = [] if found else [c for c in cases if "Paris" in c.text and c.calls][:2]
    for c in widened:
        out.append(Sample(f"widened:{c.name}", c.text.replace("Paris", PLAIN_LONG), c.tools, c.template))
    texts = [r(ONE) for r in found] + [c.text for c in cases if c.calls][:3]
    alphabet = tool_markers(name) + [r(ONE) for r in found] + [r(EMPTY) for r in found]
    alphabet += _fragments(texts) + _PIECES
    template = templates[0] if templates else None
    out += [Sample(f"fuzz:{k}", t, template=template, full=False)
            for k, t in enumerate(_fuzz_texts(name, alphabet, 8))]
    return _dedup(out)


def _key(s: Sample) -> tuple[str, str]:
    return s.text, json.dumps([s.tools, s.template, s.kwargs], sort_keys=True, default=str)


def _dedup(samples: list[Sample]) -> tuple[Sample, ...]:
    seen: set[tuple[str, str]] = set()
    out = []
    for s in samples:
        if _key(s) not in seen:
            seen.add(_key(s))
            out.append(s)
    return tuple(out)


def _case_samples(samples: list[Sample], before: list[Sample]) -> list[Sample]:
    """The case texts not already among ``before``; the first FULL_CASES of them under
    ALL_CUTS_BELOW characters get every cut point."""
    seen = {_key(s) for s in before}
    fresh = list(_dedup([s for s in samples if _key(s) not in seen]))
    full = {id(s) for s in [s for s in fresh if len(s.text) < ALL_CUTS_BELOW][:FULL_CASES]}
    return [Sample(s.id, s.text, s.tools, s.template, s.kwargs, full=id(s) in full, one_char=id(s) in full)
            for s in fresh]


def _markers(name: str, kwargs: Any, template: Any) -> tuple[str, str, list[str]] | None:
    """(start, end, other markers) read off the parser this name builds for these kwargs;
    None where it is not a ``<think>``-style split (harmony, ``hf``)."""
    try:
        p = get_reasoning_parser(name, _tok(template), template_kwargs=kwargs)
    except Exception:
        return None
    fam = getattr(p, "family", None)
    inner = getattr(p, "inner", p)
    style = getattr(inner, "style", None)
    if style is None or not getattr(style, "start", None) or not getattr(style, "end", None):
        return None
    other: list[str] = []
    if fam is not None:
        for a, b in getattr(fam, "rewrite", ()):
            other += [a, b]
        other += list(getattr(fam, "answer_wrapper", None) or ())
        other += list(getattr(fam, "implicit_ends", ()))
        if getattr(fam, "reasoning_label", ""):
            other.append(fam.reasoning_label)
    return style.start, style.end, [m for m in other if m]


def _reasoning_texts(s: str, e: str) -> list[tuple[str, str]]:
    return [
        ("both", f"{s}Let me think: 1 < 2.{e}The answer is 4."),
        ("no_start", f"Let me think.{e}The answer."),
        ("unclosed", f"{s}Still thinking about 杭州"),
        ("long_both", f"{s}{PROSE}{e}{PROSE}"),
        ("long_unclosed", f"{s}{PROSE}"),
        ("content_only", "Just the answer, 杭州 😀."),
        ("stray_end", f"{e}Answer after a stray end."),
        ("two_blocks", f"{s}one{e}Mid.{s}two{e}End."),
        ("end_cut", f"{s}thinking{e[:-1]}"),
        ("whitespace_around", f"\n\n{s}\nthink\n\n{e}\n\nanswer\n\n"),
        ("empty_reasoning", f"{s}{e}answer"),
        ("start_only", s),
    ]


#: chat_template_kwargs tried with every reasoning parser's marker texts: none, thinking
#: asked for (each family's switch), thinking switched off
THINKING_ON = {"enable_thinking": True, "thinking": True, "reasoning_effort": "high", "thinking_mode": "enabled"}
THINKING_OFF = {"enable_thinking": False, "thinking": False}
_KWARGS_VARIANTS: list[Any] = [None, THINKING_ON, THINKING_OFF]


@functools.cache
def reasoning_samples(name: str) -> tuple[Sample, ...]:
    cases = [c for c in CASES.reasoning_cases if c.parser == name]
    out: list[Sample] = []
    kwargs_variants = list(_KWARGS_VARIANTS)  # (the case texts run with their own kwargs)
    template = next((c.template for c in cases if c.template is not None), None)
    alphabet = ["<think>", "</think>", "\n\n", " ", "x", "<", ">", "|", "杭州"]
    has_markers = False
    long_done = False
    for k, kw in enumerate(kwargs_variants):
        m = _markers(name, kw, template)
        if m is None:
            continue
        s, e, other = m
        alphabet += [s, e, *other]
        texts = _reasoning_texts(s, e)
        # the long texts once, with the first kwargs under which the parser gives reasoning
        both = Sample("", texts[0][1], template=template, kwargs=kw)
        with_long = not long_done and (_observe(_factory("reasoning", name, both), [both.text]).reasoning
                                       or k == len(kwargs_variants) - 1)
        long_done = long_done or bool(with_long)
        # every cut point with those kwargs too
        out += [Sample(f"markers[kw{k}]:{i}", t, template=template, kwargs=kw, full=bool(with_long))
                for i, t in texts if with_long or not i.startswith("long")]
        has_markers = True
        if other:
            out.append(Sample(f"markers[kw{k}]:framing", f"{s}r{e}" + "a".join(other) + "z", template=template,
                              kwargs=kw))
    out += _case_samples([Sample(f"case:{c.name}", c.text, template=c.template, kwargs=c.kwargs) for c in cases],
                         out)
    widened = 0
    for c in cases:  # long reasoning and content in the name's own cases, where no markers make them
        if widened >= 1 or has_markers:
            break
        r, t = c.reasoning, c.text
        if len(r) >= 3 and r in t and c.content and c.content in t[t.index(r) + len(r):]:
            at = t.index(r)
            rest = t[at + len(r) :].replace(c.content, c.content + PROSE, 1)
            out.append(Sample(f"widened:{c.name}", t[:at] + PROSE + r + rest, template=c.template, kwargs=c.kwargs))
            widened += 1
    alphabet += _fragments([c.text for c in cases][:6])
    out += [Sample(f"fuzz:{k}", t, template=template, full=False)
            for k, t in enumerate(_fuzz_texts(name, alphabet, 8))]
    return _dedup(out)


@functools.cache
def pipeline_samples(pair: tuple[str, str]) -> tuple[Sample, ...]:
    rname, tname = pair
    r_cases = [c for c in CASES.reasoning_cases if c.parser == rname]
    template = next((c.template for c in r_cases if c.template is not None), None)
    tools_of = {s.id: s for s in tool_samples(tname)}
    picks = [s for s in tools_of.values() if s.id.startswith("render") and s.id.split(":", 1)[1] in (
        "single", "long_arg", "text_before_after")]
    if template is not None:
        picks = [s for s in picks if s.template == template]
    m = _markers(rname, THINKING_ON, template)
    prefixes = [("plain", "")]
    if m is not None:
        s, e, _ = m
        prefixes = [("think", f"{s}\nNeed the weather.\n{e}\n\n"), ("unclosed_think", f"{s}Need the weather. ")]
    out = []
    for pid, prefix in prefixes:
        for s in picks:
            if pid == "unclosed_think" and not s.id.endswith(":single"):
                continue
            full = pid != "unclosed_think" and s.id.endswith(":single")
            out.append(Sample(f"{pid}+{s.id}", prefix + s.text, s.tools, s.template or template,
                              kwargs=THINKING_ON if m is not None else None, full=full,
                              one_char=not s.id.endswith(":long_arg")))
    for c in r_cases[:2]:
        out.append(Sample(f"reasoning_case:{c.name}", c.text, template=c.template, kwargs=c.kwargs, full=False,
                          one_char=False))
    return _dedup(out)


SAMPLES: dict[str, Callable[[Any], tuple[Sample, ...]]] = {
    "tool": tool_samples, "reasoning": reasoning_samples, "pipeline": pipeline_samples,
}

# ------------------------------------------------------------------ known failures
#: (kind, name, sample id) -> (cut points, why): split-dependent results found by this test,
#: left to the parsers' owners (frontend/ is not changed here). Each runs as a strict xfail.
KNOWN: dict[tuple[str, Any, str], tuple[tuple[int, ...], str]] = {}
#: the minimal counterexamples above, on their own: (kind, name, text, cut points, why)
MINIMAL: list[tuple[str, Any, str, tuple[int, ...], str]] = []

#: counterexamples found here and fixed since (kind, name, text): every cut point is checked
FIXED: list[tuple[str, Any, str]] = [
    # gpt-oss harmony: a refused token (text after a message's end, a stray <|call|>) ended the
    # chunk's parsing (the rest of the chunk was dropped); multi-byte characters given back
    # token by token were garbled (now vLLM's HarmonyParser: refused tokens skipped, a header
    # cut off by the end given back decoded whole)
    ("tool", "openai", "Hi.\n\n<|channel|>analysis<|message|>Think.<|end|>Done."),
    ("tool", "openai", "<|channel|>final<|message|>Done.<|end|>x<|call|>"),
    ("tool", "openai", "Let me check.\n\n<|channel|>analysis<|message|>Think.<|end|>Done: 杭州."),
    ("tool", "openai", "x 州"),
    ("tool", "openai", "a 杭州 😀"),
    ("reasoning", "openai_gptoss", "x 州"),
    ("reasoning", "openai_gptoss", "<|channel|>analysis<|message|>杭州<|end|>x<|start|>assistant<|chan"),
    ("pipeline", ("openai_gptoss", "openai"), "Hi <|channel|>final<|message|>杭州 😀<|end|> and<|call|>"),
    # gemma4: the "thought\n" label of a block opened after answer text was stripped only when
    # it came in one chunk with <|channel>
    ("reasoning", "gemma4", "a<|channel>thought\nb"),
    ("reasoning", "gemma4", "a<|channel>tho<channel|>b<|channel>ught\nc<channel|>d"),
]

# ------------------------------------------------------------------ the check


@functools.cache
def _whole(kind: str, name: Any, s: Sample) -> Observed:
    return _observe(_factory(kind, name, s), [s.text])


def _cuts_of(chunks: Sequence[str]) -> list[int]:
    out, at = [], 0
    for c in chunks[:-1]:
        at += len(c)
        out.append(at)
    return out


def _short(text: str, limit: int = 400) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} chars)"


def check_split(kind: str, name: Any, s: Sample, chunks: Sequence[str]) -> None:
    """The run over ``chunks`` gives the whole run's final result and streams."""
    want = _whole(kind, name, s)
    where = f"{kind} parser {name!r}, sample {s.id!r}, text {_short(s.text)}, cut at {_cuts_of(chunks)}"
    try:
        got = _observe(_factory(kind, name, s), chunks)
    except Exception as e:
        raise AssertionError(f"{where}: raised {e!r}") from e
    if got == want:  # equal streams and count: equal final results too
        return
    for label, got_d, want_d in (("final result", got.final(), want.final()),
                                 ("streams", got.streams(), want.streams())):
        for key in want_d:
            assert got_d[key] == want_d[key], (
                f"{where}: {label} {key} differs from the whole text's:\n"
                f"  split: {_short(str(got_d[key]))}\n  whole: {_short(str(want_d[key]))}"
            )


def token_sized(text: str, rng: random.Random, lo: int = 1, hi: int = 6) -> list[str]:
    out, i = [], 0
    while i < len(text):
        k = rng.randint(lo, hi)
        out.append(text[i : i + k])
        i += k
    return out or [text]


def deterministic_splits(text: str, seed: str, full: bool = True, one_char: bool = True) -> list[list[str]]:
    """Token-sized chunks, one character per chunk (when ``one_char``); under ALL_CUTS_BELOW
    characters also random cuts, and every single cut point when ``full``."""
    n = len(text)
    if n < 2:
        return [[text]]
    rng = random.Random(seed)
    out: list[list[str]] = [token_sized(text, rng)] + ([list(text)] if one_char else [])
    if n < ALL_CUTS_BELOW:
        out.append(random_char_splits(text, rng))
        if full:
            out += [[text[:k], text[k:]] for k in range(1, n)]
    return out


def _cases(kind: str, name: Any) -> list[Sample]:
    return [s for s in SAMPLES[kind](name) if (kind, name, s.id) not in KNOWN]


def _ids(names: Sequence[Any]) -> list[str]:
    return ["+".join(n) if isinstance(n, tuple) else n for n in names]


# ------------------------------------------------------------------ tests
def test_every_registered_name_is_enumerated() -> None:
    assert TOOL_NAMES and REASONING_NAMES and PIPELINES
    assert WELL_KNOWN_TOOL <= set(TOOL_NAMES), sorted(WELL_KNOWN_TOOL - set(TOOL_NAMES))
    assert WELL_KNOWN_REASONING <= set(REASONING_NAMES), sorted(WELL_KNOWN_REASONING - set(REASONING_NAMES))


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_tool_samples_exercise_the_parser(name: str) -> None:
    """The samples make calls, one of them with a long (>= 1,500 characters) argument text, and
    leave some output as content: the property is not checked on empty results only."""
    results = [_whole("tool", name, s).final() for s in tool_samples(name)]
    assert any(r["calls"] for r in results), f"{name}: no sample makes a call (add a renderer or cases)"
    assert any(len(json.dumps(a)) >= 1500 for r in results for _, a in r["calls"]), (
        f"{name}: no sample makes a call with a long argument"
    )
    assert any(r["content"] for r in results)


@pytest.mark.parametrize("name", REASONING_NAMES)
def test_reasoning_samples_exercise_the_parser(name: str) -> None:
    """Some samples give reasoning and content, one of them long (a parser that never gives
    reasoning, such as minimax_m2_append_think, at least gives long content)."""
    results = [_whole("reasoning", name, s).final() for s in reasoning_samples(name)]
    field = "reasoning" if any(r["reasoning"] for r in results) else "content"
    assert any(r[field] and r["content"] for r in results), f"{name}: no sample has reasoning and content"
    assert any(len(r[field]) >= 900 for r in results), f"{name}: no sample has long (>= 900 characters) {field}"


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_tool_split_invariance(name: str) -> None:
    for s in _cases("tool", name):
        for chunks in deterministic_splits(s.text, f"{name}/{s.id}", s.full, s.one_char):
            check_split("tool", name, s, chunks)


@pytest.mark.parametrize("name", REASONING_NAMES)
def test_reasoning_split_invariance(name: str) -> None:
    for s in _cases("reasoning", name):
        for chunks in deterministic_splits(s.text, f"{name}/{s.id}", s.full, s.one_char):
            check_split("reasoning", name, s, chunks)


@pytest.mark.parametrize("pair", PIPELINES, ids=_ids(PIPELINES))
def test_pipeline_split_invariance(pair: tuple[str, str]) -> None:
    samples = _cases("pipeline", pair)
    assert any(_whole("pipeline", pair, s).calls for s in samples), f"{pair}: no sample makes a call"
    for s in samples:
        for chunks in deterministic_splits(s.text, f"{pair}/{s.id}", s.full, s.one_char):
            check_split("pipeline", pair, s, chunks)


_ALL: list[tuple[str, Any]] = (
    [("tool", n) for n in TOOL_NAMES] + [("reasoning", n) for n in REASONING_NAMES]
    + [("pipeline", p) for p in PIPELINES]
)
_ALL_IDS = [f"{k}:{i}" for (k, _), i in zip(_ALL, _ids([n for _, n in _ALL]))]


def _random_chunks(text: str, rng: random.Random) -> list[str]:
    return random_char_splits(text, rng) if rng.random() < 0.5 else token_sized(text, rng, 1, rng.randint(2, 12))


if given is not None:

    @st.composite
    def _split_of(draw: Any, text: str) -> list[str]:
        n = len(text)
        if n < 2:
            return [text]
        if draw(st.booleans()):  # any set of cut points (dense near the start when shrunk)
            cuts = draw(st.lists(st.integers(1, n - 1), max_size=min(n - 1, 48), unique=True))
            return split_at(text, cuts)
        sizes = draw(st.lists(st.integers(1, 12), min_size=1, max_size=32))  # token-sized, cycled
        out, i, k = [], 0, 0
        while i < n:
            out.append(text[i : i + sizes[k % len(sizes)]])
            i += sizes[k % len(sizes)]
            k += 1
        return out

    @pytest.mark.parametrize("kind,name", _ALL, ids=_ALL_IDS)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=DERANDOMIZE,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def test_random_splits(kind: str, name: Any, data: Any) -> None:
        samples = _cases(kind, name)
        s = samples[data.draw(st.integers(0, len(samples) - 1), label="sample")]
        check_split(kind, name, s, data.draw(_split_of(s.text), label="chunks"))

else:  # pragma: no cover

    @pytest.mark.parametrize("kind,name", _ALL, ids=_ALL_IDS)
    def test_random_splits(kind: str, name: Any) -> None:
        rng = random.Random(f"{kind}/{name}")
        for s in _cases(kind, name):
            for _ in range(4):
                check_split(kind, name, s, _random_chunks(s.text, rng))


def _known_params() -> list[Any]:
    out = []
    for (kind, name, sid), (cuts, why) in KNOWN.items():
        label = "+".join(name) if isinstance(name, tuple) else name
        out.append(pytest.param(kind, name, sid, None, cuts, id=f"{kind}:{label}:{sid}",
                                marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=why)))
    for k, (kind, name, text, cuts, why) in enumerate(MINIMAL):
        out.append(pytest.param(kind, name, None, text, cuts, id=f"{kind}:{name}:minimal{k}",
                                marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=why)))
    return out


@pytest.mark.parametrize("kind,name,sample_id,text,cuts", _known_params())
def test_known_counterexample(kind: str, name: Any, sample_id: str | None, text: str | None,
                              cuts: tuple[int, ...]) -> None:
    """Each known counterexample still fails (strict xfail: a fix shows up as XPASS; an entry
    whose sample no longer exists is an error, not an expected failure)."""
    if kind != "pipeline" and name not in (TOOL_NAMES if kind == "tool" else REASONING_NAMES):
        pytest.skip(f"{kind} parser {name!r} is no longer registered")
    if text is not None:
        s = Sample("minimal", text)
    else:
        found = [s for s in SAMPLES[kind](name) if s.id == sample_id]
        if not found:
            raise LookupError(f"KNOWN names a sample that no longer exists: {(kind, name, sample_id)}")
        s = found[0]
    check_split(kind, name, s, split_at(s.text, cuts))


@pytest.mark.parametrize("kind,name,text", FIXED,
                         ids=[f"{k}:{_ids([n])[0]}:{i}" for i, (k, n, _) in enumerate(FIXED)])
def test_fixed_counterexample(kind: str, name: Any, text: str) -> None:
    """A counterexample fixed since: the same result under every cut point and one character
    per chunk."""
    s = Sample("fixed", text)
    for chunks in [list(text)] + [[text[:k], text[k:]] for k in range(1, len(text))]:
        check_split(kind, name, s, chunks)
